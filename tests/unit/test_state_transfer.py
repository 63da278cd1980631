"""STATE_TRANSFER in a sandwich: the coordinator sends get_state() to each joiner when the
view that adds it is delivered; a joiner holds deliveries and events until the state came
(set_state), or until the recovery failed (StateTransferFailed, ERROR, it leaves); the
recovery status each one announces (RECOVERING, DONOR, ONLINE, ERROR)."""
import pytest

from raygroups.stack.events import (CollectExchange, Leave, MemberStatuses, StatusAnnounced,
                                    Writable)
from raygroups.stack.message import INTERNAL, Message
from raygroups.stack.primary import DONOR, ERROR, ONLINE, RECOVERING, SetStatus
from raygroups.stack.state_transfer import (STATE_RSP, StateTransfer, StateTransferConfig,
                                            StateTransferFailed)
from raygroups.stack.view import MergeView, View, ViewChange, ViewId

from .sandwich import Sandwich


def make(handlers=True, **cfg):
    s = Sandwich(StateTransfer(StateTransferConfig(**{"timeout_s": 5.0, **cfg})))
    s.a, s.b, s.c = s.addr("A"), s.addr("B"), s.addr("C")
    s.applied, s.calls = [], []

    def get_state():
        s.calls.append(("get", len(s.above.messages)))
        return b"state:%d" % len(s.above.messages)

    def set_state(data):
        s.calls.append(("set", data))
        s.applied.append(data)
    if handlers:
        s.layer.handlers(get_state, set_state)
    return s


def vc(coord, counter, members, prev=None, cls=View, **kw):
    return ViewChange(cls(ViewId(coord, counter), tuple(members), **kw), prev)


def state_rsp(s, sender, data=b"S"):
    return Message(s.local, data, INTERNAL, {13: [STATE_RSP]}, sender)


def joined(s):
    """We joined A's group {A, B, me}: the first view we see has others in it."""
    ev = vc(s.a, 4, (s.a, s.b, s.local))
    s.up_event(ev)
    return ev


# -- the coordinator ------------------------------------------------------------------------
def test_the_coordinator_sends_its_state_to_each_joiner_when_the_view_is_delivered():
    s = make()
    v1 = vc(s.local, 1, (s.local,))
    s.up_event(v1)
    s.up(Message(None, b"m1", 0, {}, s.local))
    v2 = vc(s.local, 2, (s.local, s.a, s.b), prev=v1.view)
    s.up_event(v2)
    assert s.above.events == [v1, v2]  # the view goes up first
    assert s.calls == [("get", 1)]     # the state after every message of the old view
    out = s.below.take()
    assert [(m.dest, m.payload, m.flags, m.headers) for m in out] == [
        (s.a, b"state:1", INTERNAL, {13: [STATE_RSP]}),
        (s.b, b"state:1", INTERNAL, {13: [STATE_RSP]})]
    assert s.layer.stats["states_sent"] == 2


def test_no_state_is_sent_without_joiners_by_a_non_coordinator_or_for_a_merge():
    s = make()
    v1 = vc(s.local, 1, (s.local,))
    s.up_event(v1)
    v2 = vc(s.a, 2, (s.a, s.local, s.b), prev=v1.view)  # A and B come in, A coordinates
    s.up_event(v2)
    v3 = vc(s.local, 3, (s.local,), prev=v2.view)  # they left: no joiner
    s.up_event(v3)
    v4 = vc(s.local, 4, (s.local, s.a, s.b, s.c), prev=v3.view, cls=MergeView)
    s.up_event(v4)
    assert s.below.sent == [] and s.calls == []
    assert s.above.events == [v1, v2, v3, v4]


def test_no_state_without_a_get_state_handler():
    s = make(handlers=False)
    v1 = vc(s.local, 1, (s.local,))
    s.up_event(v1)
    s.up_event(vc(s.local, 2, (s.local, s.a), prev=v1.view))
    assert s.below.sent == [] and len(s.above.events) == 2


# -- the joiner -----------------------------------------------------------------------------
def test_a_joiner_holds_deliveries_and_events_until_the_state_arrived():
    s = make()
    ev = joined(s)
    m1, m2 = Message(None, b"m1", 0, {}, s.a), Message(None, b"m2", 0, {}, s.b)
    s.up(m1)
    w = Writable("nakack", False)
    s.up_event(w)
    s.up(m2)
    assert s.above.events == [] and s.above.messages == [] and s.applied == []
    s.up(state_rsp(s, s.a, b"snapshot"))
    assert s.applied == [b"snapshot"]
    assert s.above.events == [ev, w]
    assert s.above.batches == [[m1], [m2]]
    assert s.layer.stats["states_received"] == 1
    m3 = Message(None, b"m3", 0, {}, s.a)
    s.up(m3)
    assert s.above.batches[-1] == [m3]


def test_the_rest_of_the_batch_with_the_state_goes_up_after_it():
    s = make()
    joined(s)
    before, after = Message(None, b"1", 0, {}, s.a), Message(None, b"2", 0, {}, s.a)
    s.up(before, state_rsp(s, s.a), after)
    assert s.calls == [("set", b"S")]
    assert [m.payload for m in s.above.messages] == [b"1", b"2"]


def test_views_while_waiting_are_held_in_order():
    s = make()
    ev = joined(s)
    ev2 = vc(s.a, 5, (s.a, s.local), prev=ev.view)
    s.up_event(ev2)
    assert s.above.events == []
    s.up(state_rsp(s, s.a))
    assert s.above.events == [ev, ev2]


def test_a_founder_or_a_member_without_set_state_does_not_wait():
    s = make()
    ev = vc(s.local, 1, (s.local,))
    s.up_event(ev)
    s.up(Message(None, b"x", 0, {}, s.local))
    assert s.above.events == [ev] and len(s.above.messages) == 1
    t = make(handlers=False)
    joined(t)
    t.up(Message(None, b"x", 0, {}, t.a))
    assert len(t.above.events) == 1 and len(t.above.messages) == 1


def test_a_second_state_is_ignored():
    s = make()
    joined(s)
    s.up(state_rsp(s, s.a, b"one"))
    s.up(state_rsp(s, s.a, b"two"))
    assert s.applied == [b"one"] and s.above.messages == []


def test_no_state_within_the_timeout_fails_the_recovery_the_member_is_error_and_leaves():
    s = make()
    ev = joined(s)
    m = Message(None, b"m", 0, {}, s.a)
    s.up(m)
    s.advance(4.99)
    assert s.above.events == [] and s.below.events == []
    s.advance(0.02)
    reason = "no state from the donor A within 5 s"
    assert s.above.events == [ev, StateTransferFailed(reason)]
    assert s.above.messages == [m]
    assert s.below.events == [SetStatus(ERROR), Leave(f"recovery failed: {reason}")]
    assert s.layer.stats["state_timeouts"] == 1 and s.layer.stats["recoveries_failed"] == 1
    s.up(state_rsp(s, s.a))  # too late: not applied
    assert s.applied == []


def test_the_state_cancels_the_timeout():
    s = make()
    joined(s)
    s.up(state_rsp(s, s.a))
    s.advance(10.0)
    assert s.above.events_of(StateTransferFailed) == []
    assert s.layer.stats["state_timeouts"] == 0


def test_a_joiner_holds_at_most_max_held_deliveries():
    s = make(max_held=5)
    joined(s)
    for i in range(4):
        s.up(*[Message(None, (i, j), 0, {}, s.a) for j in range(2)])
    held = sum(len(x) for x in s.layer.waiting if type(x) is list)
    assert held <= 5
    assert held + s.layer.stats["dropped_held"] == 8
    s.up(state_rsp(s, s.a))
    assert len(s.above.messages) == held


@pytest.mark.parametrize("header", [5, {"a": 1}, [], "x", [7]], ids=repr)
@pytest.mark.parametrize("waiting", [False, True])
def test_malformed_headers_are_counted_never_raised(header, waiting):
    s = make()
    if waiting:
        joined(s)
    else:
        s.up_event(vc(s.local, 1, (s.local,)))
    s.up(Message(s.local, b"junk", INTERNAL, {13: header}, s.a),
         Message(None, b"app", 0, {}, s.a))
    assert s.layer.stats["malformed_header"] == 1
    assert s.applied == []
    s.up(state_rsp(s, s.a))
    assert [m.payload for m in s.above.messages] == [b"app"]


# -- the recovery status --------------------------------------------------------------------
def status_in(s, change):
    """What the layer answers PRIMARY's CollectExchange for ``change``."""
    ask = CollectExchange({}, change)
    s.up_event(ask)
    assert s.above.events.pop() is ask  # passed up at once, even while waiting
    return ask.status


def wire(view):
    return [view.view_id.coord.uid, view.view_id.id]


def test_a_joiner_is_recovering_in_its_first_view_and_online_once_set_state_ran():
    s = make()
    ev = vc(s.a, 4, (s.a, s.b, s.local))
    assert status_in(s, ev) == RECOVERING
    s.up_event(ev)
    v5 = vc(s.a, 5, (s.a, s.local), prev=ev.view)  # B left meanwhile; A, our donor, stays
    assert status_in(s, v5) == RECOVERING
    s.up_event(v5)
    assert s.below.events == []
    s.up(state_rsp(s, s.a))
    assert s.below.events == [SetStatus(ONLINE)]  # once the state is applied and released
    assert s.above.events == [ev, v5]


def test_a_founder_and_a_member_without_set_state_are_online():
    s = make()
    assert status_in(s, vc(s.local, 1, (s.local,))) == ONLINE
    t = make(handlers=False)
    assert status_in(t, vc(t.a, 4, (t.a, t.b, t.local))) == ONLINE


def test_the_donor_is_donor_until_none_of_its_joiners_is_recovering():
    s = make()
    v1 = vc(s.local, 1, (s.local,))
    s.up_event(v1)
    assert s.below.events == [SetStatus(ONLINE)]
    v2 = vc(s.local, 2, (s.local, s.c, s.a, s.b), prev=v1.view)
    assert status_in(s, v2) == DONOR
    s.up_event(MemberStatuses({s.local: DONOR, s.c: ONLINE, s.a: RECOVERING,
                               s.b: RECOVERING}, wire(v2.view)))
    s.up_event(v2)
    assert s.below.events[-1] == SetStatus(DONOR) and s.layer.serving == {s.a, s.b}
    s.below.events.clear()
    s.up_event(StatusAnnounced(wire(v2.view), 1, s.c, ERROR))  # not ours: nothing changes
    s.up_event(StatusAnnounced(wire(v2.view), 2, s.a, ONLINE))
    assert s.below.events == []
    s.up_event(StatusAnnounced(wire(v2.view), 3, s.b, ONLINE))
    assert s.below.events == [SetStatus(ONLINE)] and s.layer.serving == set()
    assert [type(e) for e in s.above.events] == [ViewChange, MemberStatuses, ViewChange,
                                                 StatusAnnounced, StatusAnnounced,
                                                 StatusAnnounced]


def test_joiners_that_take_no_state_or_leave_free_the_donor():
    s = make()
    v1 = vc(s.local, 1, (s.local,))
    s.up_event(v1)
    v2 = vc(s.local, 2, (s.local, s.a), prev=v1.view)
    # A has no set_state: the exchange says it is ONLINE, so we are done at once
    s.up_event(MemberStatuses({s.local: DONOR, s.a: ONLINE}, wire(v2.view)))
    s.up_event(v2)
    assert s.below.events_of(SetStatus)[-1] == SetStatus(ONLINE) and s.layer.serving == set()
    v3 = vc(s.local, 3, (s.local, s.a, s.b), prev=v2.view)
    s.up_event(v3)  # an interrupted round: no statuses of this view, B counts as recovering
    assert s.below.events_of(SetStatus)[-1] == SetStatus(DONOR)
    v4 = vc(s.local, 4, (s.local, s.a), prev=v3.view)  # B is gone
    assert status_in(s, v4) == ONLINE
    s.up_event(v4)
    assert s.below.events_of(SetStatus)[-1] == SetStatus(ONLINE) and s.layer.serving == set()


def test_a_view_without_the_donor_fails_the_recovery_at_once():
    s = make()
    ev = joined(s)
    m = Message(None, b"m", 0, {}, s.b)
    s.up(m)
    gone = vc(s.b, 5, (s.b, s.local), prev=ev.view)  # A crashed before its state came
    assert status_in(s, gone) == ERROR  # the exchange of that view already says so
    s.up_event(gone)
    reason = "the donor A left before the state came"
    assert s.above.events == [ev, StateTransferFailed(reason), gone]
    assert s.above.messages == [m]
    assert s.below.events == [SetStatus(ERROR), Leave(f"recovery failed: {reason}")]
    assert s.layer.waiting is None and s.layer.timer is None
    s.advance(10.0)  # the timeout was cancelled: no second failure
    assert s.layer.stats["recoveries_failed"] == 1 and s.layer.stats["state_timeouts"] == 0
