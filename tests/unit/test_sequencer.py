"""SEQUENCER in a sandwich: forwarding to the coordinator, ordering per origin inside a
primary view, dedup, delivery as the origin, resends, coordinator changes, exchange."""
import pytest

from raygroups.stack.message import CONTROL, INTERNAL, NO_RELIABILITY, OOB, ORDERED, Message
from raygroups.stack.events import CollectExchange, ExchangeResult, Writable
from raygroups.stack.sequencer import (FORWARD, ORDERED_MSG, OrderWindowFull, Sequencer,
                                       SequencerConfig)
from raygroups.stack.view import View, ViewChange, ViewId

from .sandwich import Sandwich


def make(coord=False, primary=True, **cfg):
    """A member of view 3: the coordinator (``coord``) or B's follower, with C too."""
    s = Sandwich(Sequencer(SequencerConfig(**{"resend_interval_s": 1.0, **cfg})))
    s.b, s.c = s.addr("B"), s.addr("C")
    s.current = None
    members = (s.local, s.b, s.c) if coord else (s.b, s.local, s.c)
    install(s, 3, members, primary)
    return s


def install(s, counter, members, primary=True):
    view = View(ViewId(members[0], counter), tuple(members), primary=primary)
    prev, s.current = s.current, view
    s.up_event(ViewChange(view, prev))
    return view


def forward(s, sender, seq, payload=None, view=None):
    vid = (view or s.current).view_id
    return Message(s.local, payload if payload is not None else f"{sender.name}{seq}",
                   ORDERED | CONTROL, {10: [FORWARD, seq, vid.coord.uid, vid.id]}, sender)


def ordered(s, origin, seq, payload=None, coord=None):
    """The coordinator's multicast of ``origin``'s ``seq``-th ordered message."""
    return Message(None, payload if payload is not None else f"{origin.name}{seq}", ORDERED,
                   {10: [ORDERED_MSG, origin.uid, seq]}, coord or s.current.coordinator)


def hdrs(msgs):
    return [m.headers.get(10) for m in msgs]


# -- sending --------------------------------------------------------------------------------
def test_other_messages_pass_untouched():
    s = make()
    plain, uni = Message(None, b"p"), Message(s.b, b"u", ORDERED)
    s.down(plain)
    s.down(uni)
    assert s.below.sent == [plain, uni] and 10 not in plain.headers and 10 not in uni.headers
    assert s.layer.outstanding == {}


def test_a_member_forwards_to_the_coordinator_best_effort_with_its_view_id():
    s = make()
    m = Message(None, b"x", ORDERED | OOB)
    s.down(m)
    [f] = s.below.take()
    assert f.dest == s.b and f.payload == b"x"
    assert f.flags == ORDERED | OOB | CONTROL and f.flags & NO_RELIABILITY
    assert f.headers[10] == [FORWARD, 1, s.b.uid, 3]
    assert s.layer.outstanding == {1: m}
    s.down(Message(None, b"y", ORDERED))
    assert s.below.take()[0].headers[10] == [FORWARD, 2, s.b.uid, 3]


def test_outstanding_until_the_ordered_copy_comes_back():
    s = make()
    s.down(Message(None, b"x", ORDERED))
    s.down(Message(None, b"y", ORDERED))
    s.up(ordered(s, s.local, 1, b"x"))
    assert list(s.layer.outstanding) == [2]
    [m] = s.above.messages
    assert m.sender == s.local and m.payload == b"x"


def test_order_window_full_raises():
    s = make(max_outstanding=2)
    s.down(Message(None, 1, ORDERED))
    s.down(Message(None, 2, ORDERED))
    with pytest.raises(OrderWindowFull):
        s.down(Message(None, 3, ORDERED))
    assert list(s.layer.outstanding) == [1, 2]


def test_a_full_order_window_makes_the_member_unwritable_until_half_came_back():
    s = make(max_outstanding=4)
    for k in range(1, 4):
        s.down(Message(None, k, ORDERED))
    assert not s.above.events_of(Writable)
    s.down(Message(None, 4, ORDERED))
    assert [(e.layer, e.writable) for e in s.above.events_of(Writable)] == \
        [("sequencer", False)]
    s.up(ordered(s, s.local, 1, 1))
    assert len(s.above.events_of(Writable)) == 1  # 3 outstanding: more than half
    s.up(ordered(s, s.local, 2, 2))
    assert [(e.layer, e.writable) for e in s.above.events_of(Writable)] == \
        [("sequencer", False), ("sequencer", True)]


def test_outstanding_forwards_are_resent_after_a_whole_interval_in_a_primary_view():
    s = make()
    s.down(Message(None, b"x", ORDERED))
    s.below.take()
    s.advance(1.0)  # the first tick only marks what is outstanding
    assert s.below.sent == []
    s.advance(1.1)
    [again] = s.below.take()
    assert again.dest == s.b and again.headers[10] == [FORWARD, 1, s.b.uid, 3]
    assert s.layer.stats["resent"] == 1
    s.up(ordered(s, s.local, 1, b"x"))
    s.advance(5.0)
    assert s.below.sent == []


def test_no_resends_outside_a_primary_view():
    s = make(primary=False)
    s.down(Message(None, b"x", ORDERED))
    s.below.take()
    s.advance(5.0)
    assert s.below.sent == [] and s.layer.stats["resent"] == 0


def test_a_new_coordinator_gets_the_outstanding_forwards_with_the_new_view_id():
    s = make()
    s.down(Message(None, b"x", ORDERED))
    s.down(Message(None, b"y", ORDERED))
    s.up(ordered(s, s.local, 1, b"x"))
    s.below.take()
    install(s, 4, (s.c, s.local))  # B crashed: C orders now
    [f] = s.below.take()
    assert f.dest == s.c and f.payload == b"y" and f.headers[10] == [FORWARD, 2, s.c.uid, 4]


def test_outstanding_forwards_go_again_when_the_view_becomes_primary():
    s = make(primary=False)
    s.down(Message(None, b"x", ORDERED))
    s.below.take()
    install(s, 4, (s.b, s.local, s.c), primary=False)
    assert s.below.sent == []  # same coordinator, still not primary
    install(s, 5, (s.b, s.local, s.c))
    assert hdrs(s.below.take()) == [[FORWARD, 1, s.b.uid, 5]]
    install(s, 6, (s.b, s.local, s.c))
    assert s.below.sent == []  # same coordinator, was primary already


# -- the coordinator ------------------------------------------------------------------------
def test_the_coordinator_orders_its_own_messages_at_once():
    s = make(coord=True)
    s.down(Message(None, b"x", ORDERED | INTERNAL))
    [m] = s.below.take()
    assert m.dest is None and m.payload == b"x" and m.flags == ORDERED  # reliable multicast
    assert m.headers[10] == [ORDERED_MSG, s.local.uid, 1]
    assert s.layer.stats["ordered"] == 1


def test_the_coordinator_orders_each_origins_forwards_in_its_own_order_once():
    s = make(coord=True)
    s.up(forward(s, s.b, 2), forward(s, s.c, 1))
    assert hdrs(s.below.sent) == [[ORDERED_MSG, s.c.uid, 1]]  # B's 1 is missing
    s.up(forward(s, s.b, 1), forward(s, s.b, 1), forward(s, s.b, 2))
    out = s.below.take()
    assert hdrs(out) == [[ORDERED_MSG, s.c.uid, 1], [ORDERED_MSG, s.b.uid, 1],
                         [ORDERED_MSG, s.b.uid, 2]]
    assert [m.payload for m in out] == ["C1", "B1", "B2"]
    assert all(m.dest is None and not m.flags & CONTROL for m in out)
    s.up(forward(s, s.b, 2))
    assert s.below.sent == [] and s.layer.stats["ordered"] == 3


def test_forwards_of_another_view_or_to_a_non_coordinator_are_ignored():
    s = make(coord=True)
    old = View(ViewId(s.local, 2), (s.local, s.b, s.c))
    s.up(forward(s, s.b, 1, view=old))
    assert s.below.sent == [] and s.layer.stats["stale_forwards"] == 1
    f = make()
    f.up(forward(f, f.c, 1))
    assert f.below.sent == [] and f.layer.stats["stale_forwards"] == 1


def test_a_coordinator_outside_a_primary_view_waits_then_orders_in_the_next_primary_one():
    s = make(coord=True, primary=False)
    s.up(forward(s, s.b, 1))
    s.down(Message(None, b"own", ORDERED))
    assert s.below.sent == [] and len(s.layer.waiting) == 2
    install(s, 4, (s.local, s.b, s.c), primary=False)
    assert s.below.sent == [] and len(s.layer.waiting) == 2
    install(s, 5, (s.local, s.b, s.c))
    out = s.below.take()
    assert sorted(map(tuple, hdrs(out))) == sorted([(ORDERED_MSG, s.b.uid, 1),
                                                    (ORDERED_MSG, s.local.uid, 1)])
    assert s.layer.waiting == []


def test_a_new_coordinator_does_not_reorder_what_was_delivered():
    s = make()
    s.up(ordered(s, s.c, 1), ordered(s, s.c, 2))
    install(s, 4, (s.local, s.c))  # B left: we order now
    s.up(forward(s, s.c, 2), forward(s, s.c, 3))
    assert hdrs(s.below.take()) == [[ORDERED_MSG, s.c.uid, 3]]


def test_ordered_messages_keep_the_headers_of_the_layers_above():
    """FRAG (header 11) sits above the SEQUENCER: a fragment of an ordered message must reach
    the receivers with its fragment header, whether the coordinator sent it or forwarded."""
    frag = [7, 0, 2]
    s = make(coord=True)
    s.down(Message(None, b"part", ORDERED, {11: list(frag)}))
    [own] = s.below.take()
    assert own.headers.get(11) == frag
    f = make()
    f.down(Message(None, b"part", ORDERED, {11: list(frag)}))
    [fwd] = f.below.take()
    assert fwd.headers.get(11) == frag
    theirs = forward(s, s.b, 1, b"part")  # such a forward, arriving at the coordinator
    theirs.headers[11] = list(frag)
    s.up(theirs)
    [out] = s.below.take()
    assert out.headers.get(10) == [ORDERED_MSG, s.b.uid, 1] and out.headers.get(11) == frag


# -- receiving ------------------------------------------------------------------------------
def test_receivers_deliver_as_the_origin_once_in_the_coordinators_order():
    s = make()
    plain = Message(None, b"plain", 0, {}, s.c)
    s.up(ordered(s, s.c, 1), plain, ordered(s, s.local, 1), ordered(s, s.c, 1))
    assert [(m.sender, m.payload) for m in s.above.messages] == [
        (s.c, "C1"), (s.c, b"plain"), (s.local, f"{s.local.name}1")]
    assert s.layer.stats["duplicates"] == 1
    s.up(ordered(s, s.c, 3), ordered(s, s.c, 2))  # 2 after 3: below what was delivered
    assert [m.payload for m in s.above.messages][-1] == "C3"
    assert s.layer.stats["duplicates"] == 2
    assert s.layer.delivered == {s.c: 3, s.local: 1}


def test_an_order_from_a_former_sequencer_is_dropped_and_the_new_one_s_delivered():
    """A coordinator's ordering multicast held by flow control past a merge that made
    another member the coordinator goes out in the new view: delivered as it comes, it would
    sit at another position than the new sequencer's copy of the same message, at members
    that got the two in another order. Every member drops it, in the same view."""
    s = make()  # B orders
    s.up(ordered(s, s.c, 1))
    install(s, 4, (s.c, s.local, s.b))  # a merge: C is the sequencer now
    s.up(ordered(s, s.c, 2, coord=s.b))  # B's order of C's 2, late
    assert [m.payload for m in s.above.messages] == ["C1"]
    assert s.layer.stats["stale_orders"] == 1
    s.up(ordered(s, s.c, 2))  # C's own
    assert [m.payload for m in s.above.messages] == ["C1", "C2"]


def test_collect_exchange_reports_the_delivered_counters():
    s = make()
    s.up(ordered(s, s.c, 4))
    s.above.answers[CollectExchange] = lambda ev: {**ev.data, "app": 7}  # what is above adds
    ev = CollectExchange({"other": 1})
    assert s.up_event(ev) == {"other": 1, "sequencer": [[s.c.uid, 4]], "app": 7}


def test_exchange_result_merges_delivered_counters_and_drops_what_was_ordered_elsewhere():
    s = make()
    for p in (b"a", b"b", b"c"):
        s.down(Message(None, p, ORDERED))
    x = s.addr("X")
    s.up_event(ExchangeResult({s.b: {"sequencer": [[s.local.uid, 2], [x.uid, 5]]},
                               s.c: {"sequencer": [[x.uid, 3], [s.c.uid, 1]]},
                               s.local: {}}))
    assert s.layer.delivered == {s.local: 2, x: 5, s.c: 1}
    assert list(s.layer.outstanding) == [3]
    s.up(ordered(s, x, 5), ordered(s, x, 6))
    assert [m.payload for m in s.above.messages] == ["X6"]
    assert len(s.above.events_of(ExchangeResult)) == 1  # and on up: the application's part


@pytest.mark.parametrize("data", [{"sequencer": 5}, {"sequencer": [[b"short", 1]]},
                                  {"sequencer": [["uid", "x"]]}, {"sequencer": [[1]]}], ids=repr)
def test_malformed_exchange_data_is_counted(data):
    s = make()
    s.up_event(ExchangeResult({s.b: data, s.c: {"sequencer": [[s.c.uid, 2]]}}))
    assert s.layer.stats["malformed_header"] == 1
    assert s.layer.delivered == {s.c: 2}


def test_view_changes_pass_up():
    s = make()
    [ev] = s.above.events
    assert type(ev) is ViewChange and ev.view == s.current


@pytest.mark.parametrize("header", [
    5, [], [7], {}, {"a": 1}, [ORDERED_MSG], [ORDERED_MSG, b"short", 1], [ORDERED_MSG, "x", 1],
    [ORDERED_MSG, "UID"], [ORDERED_MSG, "UID", "1"], [ORDERED_MSG, "UID", 1.0],
    [ORDERED_MSG, [1], 1],
], ids=repr)
def test_malformed_headers_are_counted_never_raised(header):
    s = make()
    h = [s.c.uid if x == "UID" else x for x in header] if type(header) is list else header
    s.up(Message(None, b"bad", 0, {10: h}, s.b), ordered(s, s.c, 1))
    assert s.layer.stats["malformed_header"] == 1
    assert [m.payload for m in s.above.messages] == ["C1"]


@pytest.mark.parametrize("header", [[FORWARD], [FORWARD, 1], [FORWARD, 1, "UID"]], ids=repr)
def test_malformed_forwards_at_the_coordinator_are_counted(header):
    s = make(coord=True)
    h = [s.local.uid if x == "UID" else x for x in header]
    s.up(Message(s.local, b"bad", CONTROL, {10: h}, s.b))
    assert s.layer.stats["malformed_header"] == 1 and s.below.sent == []


def test_an_ordered_send_refused_with_not_primary_is_never_delivered_later():
    """Over PRIMARY: the coordinator's ordered send during a state exchange raises NotPrimary;
    the application takes it as not sent (and may send it again), so the sequencer must not
    keep it and order it once the view is primary."""
    from raygroups.stack.errors import NotPrimary
    from raygroups.stack.events import GetPhysical
    from raygroups.stack.primary import STATE, Primary, PrimaryConfig

    s = Sandwich(Primary(PrimaryConfig()), Sequencer(SequencerConfig(resend_interval_s=1.0)),
                 answers={GetPhysical: ("10.0.0.1", 7800)})
    b = s.addr("B")

    def exchange(view):
        vid = [view.view_id.coord.uid, view.view_id.id]
        s.up(*[Message(None, b"", INTERNAL, {9: [STATE, vid, 0, [], {}, {}]}, m)
               for m in view.members])
    v1 = View(ViewId(s.local, 1), (s.local, b))
    s.up_event(ViewChange(v1, None))
    exchange(v1)
    v2 = View(ViewId(s.local, 2), (s.local, b))
    s.up_event(ViewChange(v2, v1))  # a state exchange runs: not primary meanwhile
    with pytest.raises(NotPrimary):
        s.down(Message(None, b"refused", ORDERED))
    exchange(v2)
    s.advance(5.0)
    assert [m.payload for m in s.below.sent if 10 in m.headers] == []


# -- flushes --------------------------------------------------------------------------------
def test_the_coordinator_orders_nothing_while_a_flush_stops_sending():
    """What it ordered then would be held by the flush and go out in the next view, whose
    sequencer may be another member: two interleaved streams, not one order."""
    from raygroups.stack.events import Writable
    s = make(coord=True)
    s.up_event(Writable("flush", False))
    s.up(forward(s, s.b, 1))
    assert s.below.take() == []
    s.up_event(Writable("flush", True))  # (the new view comes after its primary round)
    assert s.below.take() == []
    install(s, 4, (s.local, s.b, s.c))  # still the sequencer: ordered in the new view
    assert hdrs(s.below.take()) == [[ORDERED_MSG, s.b.uid, 1]]


def test_forwards_that_waited_for_a_flush_are_dropped_by_a_former_sequencer():
    from raygroups.stack.events import Writable
    s = make(coord=True)
    s.up_event(Writable("flush", False))
    s.up(forward(s, s.b, 1))
    install(s, 4, (s.b, s.local, s.c))  # B is the sequencer now: B's forward goes to B
    s.up_event(Writable("flush", True))
    assert [m for m in s.below.take() if m.headers.get(10, [None])[0] == ORDERED_MSG] == []


def test_the_coordinator_resends_nothing_into_a_state_exchange_and_orders_it_after():
    """Over PRIMARY: an ordered send the coordinator kept waiting (a flush stopped sending)
    is neither ordered nor raised from the resend timer while the next view's state
    exchange runs (PRIMARY refuses sends then); it is ordered once that view is primary."""
    from raygroups.stack.events import GetPhysical, Writable
    from raygroups.stack.primary import STATE, Primary, PrimaryConfig

    s = Sandwich(Primary(PrimaryConfig()), Sequencer(SequencerConfig(resend_interval_s=0.1)),
                 answers={GetPhysical: ("10.0.0.1", 7800)})
    b = s.addr("B")

    def exchange(view):
        vid = [view.view_id.coord.uid, view.view_id.id]
        s.up(*[Message(None, b"", INTERNAL, {9: [STATE, vid, 0, [], {}, {}]}, m)
               for m in view.members])

    def ordered_out():
        return [m.payload for m in s.below.sent if m.headers.get(10, [None])[0] == ORDERED_MSG]
    v1 = View(ViewId(s.local, 1), (s.local, b))
    s.up_event(ViewChange(v1, None))
    exchange(v1)
    s.up_event(Writable("flush", False))
    s.down(Message(None, b"mine", ORDERED))  # kept: the flush stopped sending
    s.up_event(Writable("flush", True))
    v2 = View(ViewId(s.local, 2), (s.local, b))
    s.up_event(ViewChange(v2, v1))  # the state exchange of v2 runs: not primary meanwhile
    s.advance(0.5)  # resend ticks
    assert ordered_out() == []
    exchange(v2)
    assert ordered_out() == [b"mine"]


def test_an_order_refused_below_waits_for_the_resend_and_nothing_goes_twice():
    """Flow control refuses the coordinator's multicast (its send queue is at its bound):
    nothing is raised into the receive path (the rest of the batch, or a view change, would
    be lost with it); what went stays ordered once, what did not goes when its sender
    forwards it again, in each origin's order."""
    from raygroups.stack.flow_control import FlowControlFull
    s = make(coord=True)
    full = {"origin": s.b.uid, "from": 2}
    real_down = s.below.down

    def down(msg):
        _, origin, seq = msg.headers[10]
        if origin == full["origin"] and seq >= full["from"]:
            raise FlowControlFull("full")
        real_down(msg)

    s.below.down = down
    s.up(forward(s, s.b, 1), forward(s, s.b, 2), forward(s, s.b, 3), forward(s, s.c, 1))
    assert hdrs(s.below.take()) == [[ORDERED_MSG, s.b.uid, 1], [ORDERED_MSG, s.c.uid, 1]]
    assert s.layer.stats["order_deferred"] == 2  # B's 2, then again when B's 3 came
    full["origin"] = None  # credits came back
    s.up(forward(s, s.b, 1), forward(s, s.b, 2), forward(s, s.b, 3))  # B's resends
    assert hdrs(s.below.take()) == [[ORDERED_MSG, s.b.uid, 2], [ORDERED_MSG, s.b.uid, 3]]
    assert s.layer.stats["ordered"] == 4


def test_an_order_refused_below_does_not_break_the_view_change_that_orders_the_waiting():
    """Forwards that waited for a primary view are ordered as the view arrives; a refusal
    below then must not raise out of the view change."""
    from raygroups.stack.flow_control import FlowControlFull
    s = make(coord=True, primary=False)
    s.up(forward(s, s.b, 1), forward(s, s.c, 1))
    assert s.below.take() == []  # not primary: they wait

    def down(msg):
        raise FlowControlFull("full")

    s.below.down = down
    install(s, 4, (s.local, s.b, s.c), primary=True)  # must not raise
    assert s.layer.stats["order_deferred"] == 2 and s.layer.stats["ordered"] == 0
