"""NAKACK in a sandwich: seqnos, FIFO delivery, NAKs, retransmission, HIGHEST, stability."""
import pytest

from raygroups.stack.events import (Catchup, Freeze, GetDigest, MergeDigest, Thaw,
                                    SetDigest, Stability, ViewInstalled, Writable)
from raygroups.stack.message import CONTROL, INTERNAL, NO_RELIABILITY, Message
from raygroups.stack.nakack import (HIGHEST, MSG, XMIT_REQ, NakAck, NakAckConfig,
                                    SendBufferFull)
from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich

# Timers use Context.every: the first tick at interval * U(0.5, 1), the next ones every
# interval * U(0.9, 1.1). With interval 1: exactly one tick by t=1.0, exactly two by t=2.1.
ONE_TICK, TWO_TICKS = 1.0, 2.1


def make(**cfg):
    opts = dict(xmit_interval_s=1.0, highest_interval_s=1000.0)
    opts.update(cfg)
    s = Sandwich(NakAck(NakAckConfig(**opts)))
    s.b, s.c = s.addr("B"), s.addr("C")
    s.view = View(ViewId(s.local, 1), (s.local, s.b, s.c))
    s.down_event(ViewInstalled(s.view))
    return s


def data(sender, seq, payload=None, vc=1):
    """A multicast of ``sender`` as it arrives: [MSG, seqno, sender's view counter]."""
    return Message(None, payload if payload is not None else f"m{seq}", 0, {2: [MSG, seq, vc]},
                   sender)


def kinds(msgs, typ):
    return [m for m in msgs if m.headers.get(2, [None])[0] == typ]


def test_multicasts_get_consecutive_seqnos():
    s = make()
    for i in range(3):
        s.down(Message(None, f"p{i}"))
    # [MSG, seqno, the sender's view counter]
    assert [m.headers[2] for m in s.below.sent] == [[MSG, 1, 1], [MSG, 2, 1], [MSG, 3, 1]]
    assert sorted(s.layer.sent) == [1, 2, 3]  # kept for retransmission until stable


@pytest.mark.parametrize("msg_factory", [
    lambda s: Message(s.b, b"unicast"),
    lambda s: Message(None, b"best effort", NO_RELIABILITY),
    lambda s: Message(None, b"control", CONTROL),
])
def test_unicasts_and_unreliable_pass_untouched(msg_factory):
    s = make()
    m = msg_factory(s)
    s.down(m)
    assert s.below.sent == [m] and 2 not in m.headers
    s.down(Message(None, b"reliable"))
    assert s.below.sent[-1].headers[2] == [MSG, 1, 1]  # the seqno counter was not consumed


def test_in_order_delivery_and_passthrough_keep_batch_order():
    s = make()
    plain = Message(None, b"no header", 0, {}, s.b)
    s.up(data(s.b, 1), plain, data(s.b, 2))
    assert [m.payload for m in s.above.messages] == ["m1", b"no header", "m2"]
    assert s.layer.stats["delivered"] == 2


def test_out_of_order_is_buffered_and_released_in_order():
    s = make()
    s.up(data(s.b, 3))
    s.up(data(s.b, 2))
    assert s.above.messages == []
    s.up(data(s.b, 1))
    assert [m.payload for m in s.above.messages] == ["m1", "m2", "m3"]
    assert len(s.above.batches) == 1
    s.up(data(s.b, 4), data(s.c, 1))
    assert [m.payload for m in s.above.batches[-1]] == ["m4", "m1"]


def test_duplicates_dropped_and_counted():
    s = make()
    s.up(data(s.b, 1), data(s.b, 1))
    s.up(data(s.b, 3), data(s.b, 3))  # also a duplicate of a buffered one
    s.up(data(s.b, 1))
    assert [m.payload for m in s.above.messages] == ["m1"]
    assert s.layer.stats["duplicates"] == 3
    s.up(data(s.b, 2))
    assert [m.payload for m in s.above.messages] == ["m1", "m2", "m3"]


def test_gap_is_naked_once_after_outliving_one_tick():
    s = make()
    s.up(data(s.b, 1), data(s.b, 3), data(s.b, 6))
    s.advance(ONE_TICK)  # first tick sees the gap: reordering tolerance, no NAK yet
    assert kinds(s.below.sent, XMIT_REQ) == []
    s.advance(TWO_TICKS - ONE_TICK)
    naks = kinds(s.below.sent, XMIT_REQ)
    assert len(naks) == 1
    nak = naks[0]
    assert nak.dest == s.b and nak.flags & NO_RELIABILITY
    assert nak.headers[2] == [XMIT_REQ, [[2, 2], [4, 5]]]
    assert s.layer.stats["naks_sent"] == 1


def test_gap_filled_before_second_tick_is_not_naked():
    s = make()
    s.up(data(s.b, 2))
    s.advance(ONE_TICK)
    s.up(data(s.b, 1))
    s.advance(5.0)
    assert kinds(s.below.sent, XMIT_REQ) == []
    assert [m.payload for m in s.above.messages] == ["m1", "m2"]


def test_nak_is_bounded_by_max_xmit_req():
    s = make(max_xmit_req=3)
    s.up(data(s.b, 10))
    s.advance(TWO_TICKS)
    assert [m.headers[2] for m in kinds(s.below.sent, XMIT_REQ)] == [[XMIT_REQ, [[1, 3]]]]


def test_xmit_req_resends_stored_messages_as_unicasts_to_requester():
    s = make()
    for i in range(1, 5):
        s.down(Message(None, f"p{i}"))
    s.below.take()
    s.up(Message(s.local, b"", CONTROL, {2: [XMIT_REQ, [[2, 3], [4, 99]]]}, s.c))
    out = s.below.take()
    assert [(m.dest, m.payload, m.headers[2]) for m in out] == [
        (s.c, "p2", [MSG, 2, 1]), (s.c, "p3", [MSG, 3, 1]), (s.c, "p4", [MSG, 4, 1])]
    assert s.layer.stats["retransmitted"] == 3
    # a purged (stable) message cannot be retransmitted; nothing is invented
    s.down_event(Stability({s.local: 2, s.b: 0, s.c: 0}))
    s.up(Message(s.local, b"", CONTROL, {2: [XMIT_REQ, [[1, 3]]]}, s.c))
    assert [m.headers[2] for m in s.below.take()] == [[MSG, 3, 1]]


def test_highest_announced_while_unstable_and_stops_after_stability():
    s = make(highest_interval_s=1.0)
    s.advance(5.0)
    assert kinds(s.below.sent, HIGHEST) == []  # nothing sent, nothing to announce
    s.down(Message(None, b"a"))
    s.down(Message(None, b"b"))
    s.advance(TWO_TICKS)
    highest = kinds(s.below.take(), HIGHEST)
    assert highest and all(m.dest is None and m.headers[2] == [HIGHEST, 2] for m in highest)
    s.down_event(Stability({s.local: 2, s.b: 0, s.c: 0}))
    s.advance(5.0)
    assert kinds(s.below.take(), HIGHEST) == []


def test_highest_announcement_opens_a_nak_for_a_lost_last_message():
    s = make()
    s.up(data(s.b, 1))
    s.up(Message(None, b"", CONTROL, {2: [HIGHEST, 3]}, s.b))
    s.advance(TWO_TICKS)
    assert [m.headers[2] for m in kinds(s.below.sent, XMIT_REQ)] == [[XMIT_REQ, [[2, 3]]]]


def test_stability_digest_opens_a_nak_for_a_lost_last_message():
    s = make()
    s.down_event(Stability({s.local: 0, s.b: 2, s.c: 0}))
    s.advance(TWO_TICKS)
    naks = kinds(s.below.sent, XMIT_REQ)
    assert [(m.dest, m.headers[2]) for m in naks] == [(s.b, [XMIT_REQ, [[1, 2]]])]


def test_stability_purges_send_buffer_and_restores_writability():
    s = make(send_window=4)
    for i in range(4):
        s.down(Message(None, i))
    assert s.above.events == []
    s.down(Message(None, 4))  # the window is full: not writable, but still accepted
    assert s.above.events == [Writable("nakack", False)]
    s.down(Message(None, 5))
    assert s.above.events == [Writable("nakack", False)]  # reported once
    s.down_event(Stability({s.local: 3}))
    assert len(s.layer.sent) == 3
    assert s.above.events == [Writable("nakack", False)]  # 3 >= window/2: still blocked
    s.down_event(Stability({s.local: 5}))
    assert len(s.layer.sent) == 1
    assert s.above.events == [Writable("nakack", False), Writable("nakack", True)]
    assert sorted(s.layer.sent) == [6]


def test_application_send_beyond_twice_the_window_raises_internal_does_not():
    s = make(send_window=2)
    for i in range(4):
        s.down(Message(None, i))
    with pytest.raises(SendBufferFull):
        s.down(Message(None, "too many"))
    s.down(Message(None, "view", INTERNAL))
    assert s.below.sent[-1].headers[2] == [MSG, 5, 1]


def test_get_digest_delivered_and_sent():
    s = make()
    s.up(data(s.b, 1), data(s.b, 2), data(s.c, 1))
    s.down(Message(None, b"x"))
    s.down(Message(None, b"y"))
    assert s.down_event(GetDigest()) == {s.local: 0, s.b: 2, s.c: 1}
    assert s.down_event(GetDigest(sent=True)) == {s.local: 2, s.b: 2, s.c: 1}


def test_set_digest_treats_earlier_seqnos_as_duplicates():
    s = Sandwich(NakAck(NakAckConfig(xmit_interval_s=1.0, highest_interval_s=1000.0)))
    a = s.addr("A")
    s.down_event(SetDigest({a: 5}))
    s.down_event(ViewInstalled(View(ViewId(a, 2), (a, s.local))))  # keeps the window
    s.up(data(a, 4), data(a, 5), data(a, 6))
    assert [m.payload for m in s.above.messages] == ["m6"]
    assert s.layer.stats["duplicates"] == 2
    s.advance(5 * TWO_TICKS)
    assert kinds(s.below.sent, XMIT_REQ) == []  # 1..5 are not a gap


def test_view_installed_is_passed_down_and_keeps_existing_windows():
    s = make()
    s.up(data(s.b, 1))
    v2 = View(ViewId(s.local, 2), (s.local, s.b))
    s.down_event(ViewInstalled(v2))
    assert s.below.events_of(ViewInstalled)[-1].view == v2
    s.up(data(s.b, 1), data(s.b, 2), data(s.c, 1))
    assert [m.payload for m in s.above.messages] == ["m1", "m2"]
    assert s.layer.stats["duplicates"] == 1
    assert s.layer.stats["kept_early"] == 1  # C left: no window, its message is only kept
    s.down_event(ViewInstalled(View(ViewId(s.local, 3), (s.local, s.b))))
    s.advance(1.0)
    assert [m.payload for m in s.above.messages] == ["m1", "m2"]  # C still out: forgotten
    assert s.layer.early == {}


def test_messages_from_outside_the_view_are_never_delivered_there():
    s = make()
    stranger = s.addr("X")
    s.up(data(stranger, 1), data(stranger, 2))
    assert s.above.messages == []
    assert s.layer.stats["kept_early"] == 2 and s.layer.stats["delivered"] == 0
    s.down_event(ViewInstalled(View(ViewId(s.local, 2), (s.local, s.b, s.c))))
    s.advance(1.0)
    assert s.above.messages == []  # X did not join: its early messages are dropped
    s.up(data(s.b, 1))
    assert [m.payload for m in s.above.messages] == ["m1"]


def test_early_multicasts_of_a_joiner_are_replayed_in_order_once_it_has_a_window():
    """A joiner's first multicasts can overtake the VIEW that adds it: they are kept and
    delivered (in seqno order, next loop turn) once the view gives it a window."""
    s = make()
    d = s.addr("D")
    s.up(data(d, 2, vc=2), data(d, 1, vc=2))
    assert s.above.messages == []
    s.down_event(ViewInstalled(View(ViewId(s.local, 2), (s.local, s.b, s.c, d))))
    assert s.above.messages == []
    s.advance(0)
    assert [(m.sender, m.payload) for m in s.above.messages] == [(d, "m1"), (d, "m2")]
    assert s.layer.stats["delivered"] == 2
    s.up(data(d, 2, vc=2))
    assert s.layer.stats["duplicates"] == 1 and len(s.above.messages) == 2


def test_early_messages_before_the_join_digest_are_replayed_against_it():
    """The coordinator's multicasts racing its JOIN_RSP: replayed after SetDigest, those
    at or below the digest entry are duplicates."""
    s = Sandwich(NakAck(NakAckConfig(xmit_interval_s=1.0, highest_interval_s=1000.0)))
    a = s.addr("A")
    s.up(data(a, 5, "view"), data(a, 6, "after"))
    s.down_event(SetDigest({a: 5}))
    s.down_event(ViewInstalled(View(ViewId(a, 2), (a, s.local))))
    s.advance(0)
    assert [m.payload for m in s.above.messages] == ["after"]
    assert s.layer.stats["duplicates"] == 1


def test_early_buffer_is_bounded_per_sender_and_in_senders():
    from raygroups.stack.nakack import EARLY_PER_SENDER, EARLY_SENDERS
    s = make()
    x = s.addr("X")
    s.up(*[data(x, i) for i in range(1, EARLY_PER_SENDER + 3)])
    assert s.layer.stats["kept_early"] == EARLY_PER_SENDER
    assert s.layer.stats["dropped_unknown_sender"] == 2
    others = [s.addr(f"Y{i}") for i in range(EARLY_SENDERS)]
    s.up(*[data(y, 1) for y in others])
    assert len(s.layer.early) == EARLY_SENDERS  # X and the first EARLY_SENDERS - 1 others
    assert s.layer.stats["dropped_unknown_sender"] == 3
    assert s.above.messages == []


@pytest.mark.parametrize("header", [
    5, "", "x", [], [MSG], [7, 1], [MSG, None], [MSG, "1"], [MSG, [1]], [MSG, 1],
    [MSG, None, 1], [MSG, "1", 1], [MSG, 1, None], [MSG, 1, "1"], [MSG, 1, 1.0], [MSG, 1, True],
    [MSG, 1, [1]], [MSG, 1, float("nan")], [MSG, 1, 1, "not a uid"], [MSG, 1, 1, b"short"],
    [MSG, 1, 1, [1]],
    [XMIT_REQ, 5], [XMIT_REQ, [[1]]], [XMIT_REQ, [["a", 2]]], [XMIT_REQ, [[1, None]]],
    {}, {"a": 1}, [XMIT_REQ, [[float("inf"), 3]]], [XMIT_REQ, [[1, float("inf")]]],
], ids=repr)
def test_malformed_headers_are_counted_never_raised(header):
    s = make()
    s.down(Message(None, b"x"))
    s.up(Message(None, b"bad", 0, {2: header}, s.b), data(s.b, 1))
    assert s.layer.stats["malformed_header"] == 1
    assert [m.payload for m in s.above.messages] == ["m1"]  # the rest of the batch survives


@pytest.mark.parametrize("seq", [1.0, True, 2.5], ids=repr)
def test_non_integer_seqno_is_malformed_and_does_not_corrupt_the_window(seq):
    s = make()
    s.up(data(s.b, seq, "bogus"))
    assert s.above.messages == []
    assert s.layer.stats["malformed_header"] == 1
    s.up(data(s.b, 3))
    s.advance(3 * TWO_TICKS)  # gap checks must keep working (they do range() arithmetic)
    assert [m.headers[2] for m in kinds(s.below.sent, XMIT_REQ)][0] == [XMIT_REQ, [[1, 2]]]
    assert type(s.down_event(GetDigest())[s.b]) is int


def test_float_seqno_then_gap_does_not_crash_the_gap_check_timer():
    s = make()
    s.up(data(s.b, 1.0, "bogus"), data(s.b, 3))
    s.advance(3 * TWO_TICKS)  # a timer raising here would escape the runtime's loop
    naks = kinds(s.below.sent, XMIT_REQ)
    assert naks and all(m.dest == s.b for m in naks)


def test_stability_beyond_own_highest_sent_does_not_leak_later_messages():
    """A (bogus) stability claiming seqnos we never sent must not move the purge point
    past what we sent: later multicasts still have to be purged when they become stable."""
    s = make()
    for i in range(3):
        s.down(Message(None, i))
    s.down_event(Stability({s.local: 1000}))
    assert not s.layer.sent
    s.down(Message(None, "later1"))
    s.down(Message(None, "later2"))
    assert [m.headers[2][1] for m in s.below.sent[-2:]] == [4, 5]
    s.down_event(Stability({s.local: 5}))
    assert not s.layer.sent


# -- views: messages of a newer view, flush freezes, catch-ups ------------------------------
def v(s, counter, *members):
    return View(ViewId(s.local, counter), members or (s.local, s.b, s.c))


def test_a_message_of_a_newer_view_is_held_until_that_view_is_installed():
    """No member delivers a message of V' while still in V: B installed view 2 and sent in
    it; we are in view 1."""
    s = make()
    s.up(data(s.b, 1), data(s.b, 2, vc=2), data(s.b, 3, vc=2), data(s.c, 1, vc=0))
    assert [(m.sender, m.payload) for m in s.above.messages] == [(s.b, "m1"), (s.c, "m1")]
    s.up(data(s.b, 4))  # behind the held ones: FIFO, held too (it cannot be of view 1 anyway)
    assert len(s.above.messages) == 2
    assert s.down_event(GetDigest())[s.b] == 1
    s.down_event(ViewInstalled(v(s, 2)))
    assert len(s.above.messages) == 2  # released at the next loop turn, not inside the event
    s.advance(0)
    assert [m.payload for m in s.above.batches[-1]] == ["m2", "m3", "m4"]
    assert s.layer.stats["delivered"] == 5
    assert s.down_event(GetDigest())[s.b] == 4


def test_own_multicasts_carry_the_installed_view_counter():
    s = make()
    s.down_event(ViewInstalled(v(s, 7)))
    s.down(Message(None, b"x"))
    assert s.below.sent[-1].headers[2] == [MSG, 1, 7]


def test_gap_before_a_newer_view_message_is_still_naked():
    s = make()
    s.up(data(s.b, 2, vc=2))
    s.advance(TWO_TICKS)
    assert [m.headers[2] for m in kinds(s.below.sent, XMIT_REQ)] == [[XMIT_REQ, [[1, 1]]]]


def test_freeze_stops_delivery_from_removed_members_at_what_was_delivered():
    s = make()
    s.up(data(s.b, 1), data(s.c, 1))
    s.down_event(Freeze([s.b], ViewId(s.local, 1)))
    s.up(data(s.b, 2), data(s.c, 2))
    assert [(m.sender, m.payload) for m in s.above.messages] == [
        (s.b, "m1"), (s.c, "m1"), (s.c, "m2")]  # B frozen at 1, C goes on
    assert s.layer.windows[s.b].limit == 1


def test_a_flush_ended_without_a_view_thaws_what_it_froze_and_no_other():
    s = make()
    s.up(data(s.b, 1))
    s.down_event(Freeze([s.b], ViewId(s.local, 1)))
    s.up(data(s.b, 2), data(s.b, 3))
    s.down_event(Thaw(ViewId(s.local, 0)))  # another flush's end: B stays frozen
    s.advance(0.01)
    assert [m.payload for m in s.above.messages] == ["m1"]
    s.down_event(Thaw(ViewId(s.local, 1)))  # FLUSH_RESUME of the flush that froze B
    s.advance(0.01)
    assert [m.payload for m in s.above.messages] == ["m1", "m2", "m3"]
    assert s.layer.windows[s.b].limit is None and s.layer.frozen_for is None


def test_catchup_raises_a_frozen_limit_to_the_cut_and_no_further():
    s = make()
    s.up(data(s.b, 1))
    s.down_event(Freeze([s.b], ViewId(s.local, 1)))
    s.up(data(s.b, 2), data(s.b, 3), data(s.b, 4))
    assert [m.payload for m in s.above.messages] == ["m1"]
    done = []
    s.down_event(Catchup({s.b: (3, s.b)}, lambda: done.append(1), until_view=True))
    assert [m.payload for m in s.above.messages] == ["m1", "m2", "m3"]  # up to the cut
    assert done == [1]
    assert s.layer.windows[s.b].limit == 3
    # the view that removes B: what B sent beyond the cut is never delivered
    s.down_event(ViewInstalled(v(s, 2, s.local, s.c)))
    s.advance(5.0)
    assert [m.payload for m in s.above.messages] == ["m1", "m2", "m3"]
    assert done == [1]


def test_a_new_flush_round_freezes_at_what_was_delivered_not_at_an_abandoned_cut():
    """Round 1's cut raised B's limit to 4 while its catch-up was still fetching; round 1
    was abandoned and round 2 reported (GetDigest) only what was delivered: round 2's
    freeze must hold B there, else the old catch-up delivers beyond round 2's cut here
    and nowhere else (a virtual synchrony violation)."""
    s = make()
    s.up(data(s.b, 1))
    s.down_event(Freeze([s.b], ViewId(s.local, 1)))
    s.down_event(Catchup({s.b: (4, s.c)}, lambda: None, until_view=True))  # round 1
    assert s.layer.windows[s.b].limit == 4
    s.down_event(Freeze([s.b, s.c], ViewId(s.local, 1)))  # round 2 starts
    assert s.down_event(GetDigest())[s.b] == 1 and s.layer.windows[s.b].limit == 1
    s.up(data(s.b, 2), data(s.b, 3))  # round 1's retransmissions arrive late
    assert [m.payload for m in s.above.messages] == ["m1"]
    s.down_event(Catchup({s.b: (1, s.b)}, lambda: None, until_view=True))  # round 2's cut
    assert [m.payload for m in s.above.messages] == ["m1"]


def test_a_freeze_is_kept_by_a_late_install_of_the_flushed_view_and_thawed_by_a_newer_one():
    s = make()
    s.down_event(Freeze([s.b], ViewId(s.local, 2)))  # flushing view 2, we are still in 1
    s.down_event(ViewInstalled(v(s, 2)))             # late install of view 2: still frozen
    s.up(data(s.b, 1, vc=2))
    s.advance(0)
    assert s.above.messages == [] and s.layer.windows[s.b].limit == 0
    s.down_event(ViewInstalled(v(s, 3)))             # the view after the flush: thawed
    assert s.layer.windows[s.b].limit is None
    s.advance(0)
    assert [m.payload for m in s.above.messages] == ["m1"]


def test_an_older_freeze_does_not_move_the_flushed_view_back():
    s = make()
    s.down_event(Freeze([s.b], ViewId(s.local, 3)))
    s.down_event(Freeze([s.c], ViewId(s.local, 2)))
    assert s.layer.frozen_for == ViewId(s.local, 3)
    s.down_event(ViewInstalled(v(s, 3)))
    assert s.layer.windows[s.b].limit == 0 and s.layer.windows[s.c].limit == 0


def test_catchup_fetches_from_the_holder_then_calls_back_once():
    s = make()
    s.up(data(s.b, 1))
    done = []
    s.down_event(Catchup({s.b: (3, s.c), s.c: (0, s.c)}, lambda: done.append("x")))
    assert done == []
    s.advance(TWO_TICKS)
    naks = kinds(s.below.sent, XMIT_REQ)
    # asked of the holder C, naming B as the original sender
    assert [(m.dest, m.headers[2]) for m in naks] == [(s.c, [XMIT_REQ, [[2, 3]], s.b.uid])]
    # C retransmits B's messages: [MSG, seqno, B's view counter, B's uid]
    s.up(Message(s.local, "m2", 0, {2: [MSG, 2, 1, s.b.uid]}, s.c))
    assert done == []
    s.up(Message(s.local, "m3", 0, {2: [MSG, 3, 1, s.b.uid]}, s.c))
    assert [(m.sender, m.payload) for m in s.above.messages] == [
        (s.b, "m1"), (s.b, "m2"), (s.b, "m3")]
    assert done == ["x"]
    s.up(data(s.b, 4))
    assert done == ["x"]


def test_catchup_already_reached_calls_back_at_once():
    s = make()
    s.up(data(s.b, 1), data(s.b, 2))
    done = []
    s.down_event(Catchup({s.b: (2, s.b), s.addr("gone"): (9, s.b)}, lambda: done.append(1)))
    assert done == [1] and s.layer.catchups == []


def test_several_catchups_wait_at_once_and_each_completes_on_its_own():
    s = make()
    done = []
    s.down_event(Catchup({s.b: (2, s.b)}, lambda: done.append("b")))
    s.down_event(Catchup({s.c: (1, s.c)}, lambda: done.append("c")))
    s.down_event(Catchup({s.b: (1, s.b), s.c: (1, s.c)}, lambda: done.append("bc")))
    assert len(s.layer.catchups) == 3
    s.up(data(s.c, 1))
    assert done == ["c"]
    s.up(data(s.b, 1))
    assert done == ["c", "bc"]
    s.up(data(s.b, 2))
    assert done == ["c", "bc", "b"] and s.layer.catchups == []


def test_until_view_catchups_are_dropped_at_a_view_install_the_others_wait():
    s = make()
    done = []
    s.down_event(Catchup({s.b: (2, s.b)}, lambda: done.append("flush"), until_view=True))
    s.down_event(Catchup({s.b: (2, s.b)}, lambda: done.append("view")))
    s.down_event(ViewInstalled(v(s, 2)))
    assert len(s.layer.catchups) == 1
    s.up(data(s.b, 1), data(s.b, 2))
    assert done == ["view"]


def test_a_window_held_by_a_newer_view_message_counts_as_reached():
    """B's next message belongs to a newer view: everything B sent in ours is delivered."""
    s = make()
    s.up(data(s.b, 1))
    done = []
    s.down_event(Catchup({s.b: (3, s.b)}, lambda: done.append(1)))
    assert done == []
    s.up(data(s.b, 3, vc=2))  # not the next one: still waiting for 2
    assert done == []
    s.up(data(s.b, 2, vc=2))
    assert done == [1]
    assert [m.payload for m in s.above.messages] == ["m1"]  # and nothing of view 2 delivered


def test_a_departed_window_serves_catchup_retransmissions_for_two_more_views():
    s = make()
    s.up(data(s.b, 1), data(s.b, 2))
    xmit = Message(s.local, b"", CONTROL, {2: [XMIT_REQ, [[1, 2]], s.b.uid]}, s.c)
    s.down_event(ViewInstalled(v(s, 2, s.local, s.c)))  # B left
    s.up(xmit)
    out = s.below.take()
    assert [(m.dest, m.payload, m.headers[2]) for m in out] == [
        (s.c, "m1", [MSG, 1, 1, s.b.uid]), (s.c, "m2", [MSG, 2, 1, s.b.uid])]
    s.down_event(ViewInstalled(v(s, 3, s.local, s.c)))
    s.up(xmit)
    assert len(s.below.take()) == 2
    s.down_event(ViewInstalled(v(s, 4, s.local, s.c)))
    s.up(xmit)
    assert s.below.take() == []
    assert s.layer.stats["retransmitted"] == 4


def test_xmit_req_for_a_member_never_delivered_sends_nothing():
    s = make()
    s.up(Message(s.local, b"", CONTROL, {2: [XMIT_REQ, [[1, 5]], s.addr("X").uid]}, s.c))
    assert s.below.sent == [] and s.layer.stats["malformed_header"] == 0


def test_xmit_req_naming_our_own_uid_resends_our_own_messages():
    s = make()
    s.down(Message(None, "p1"))
    s.below.take()
    s.up(Message(s.local, b"", CONTROL, {2: [XMIT_REQ, [[1, 1]], s.local.uid]}, s.c))
    assert [(m.dest, m.headers[2]) for m in s.below.take()] == [(s.c, [MSG, 1, 1])]


def test_a_member_that_comes_back_never_redelivers():
    s = make()
    s.up(data(s.b, 1), data(s.b, 2), data(s.b, 3))
    s.down_event(ViewInstalled(v(s, 2, s.local, s.c)))   # B leaves (a partition)
    s.down_event(ViewInstalled(v(s, 3)))                 # and comes back (a merge)
    s.up(data(s.b, 2, vc=3), data(s.b, 3, vc=3), data(s.b, 4, vc=3))
    s.advance(0)
    assert [m.payload for m in s.above.messages] == ["m1", "m2", "m3", "m4"]
    assert s.layer.stats["duplicates"] == 2


def test_merge_digest_adds_windows_for_other_subgroups_never_below_what_was_delivered():
    s = make()
    s.up(data(s.b, 1), data(s.b, 2), data(s.b, 3))
    s.down_event(ViewInstalled(v(s, 2, s.local, s.c)))
    x = s.addr("X")
    s.down_event(MergeDigest({x: 4, s.b: 1, s.c: 99}))
    assert s.layer.windows[x].delivered == 4
    assert s.layer.windows[s.b].delivered == 3  # what we delivered of B before it left
    assert s.layer.windows[s.c].delivered == 0  # an existing window is kept
    s.up(data(x, 4), data(x, 5))
    assert [m.payload for m in s.above.messages] == ["m1", "m2", "m3", "m5"]


def test_own_window_survives_a_view_that_excludes_us():
    s = make()
    s.down(Message(None, b"mine"))
    [m] = s.below.take()
    s.down_event(ViewInstalled(View(ViewId(s.b, 2), (s.b, s.c))))  # excluded
    s.up(Message(None, m.payload, 0, dict(m.headers), s.local))  # our own loopback
    assert [x.payload for x in s.above.messages] == [b"mine"]
    s.down(Message(None, b"next"))
    assert s.below.sent[-1].headers[2] == [MSG, 2, 2]


def test_retransmission_on_behalf_of_a_member_is_delivered_as_that_member():
    s = make()
    s.up(Message(None, "relayed", 0, {2: [MSG, 1, 1, s.b.uid]}, s.c))
    [m] = s.above.messages
    assert m.sender == s.b and s.down_event(GetDigest())[s.b] == 1


def test_internal_multicasts_are_kept_packed_and_retransmitted_intact():
    """A VIEW of many members decodes into O(N) objects; kept until stable by every member
    it would cost O(N) memory per view per member. INTERNAL multicasts are kept packed (one
    bytes object each) and come back whole when retransmitted, own or another's."""
    from raygroups.stack.nakack import _Packed
    s = make()
    big = {5: [3, [[bytes([i]) * 16, f"m{i}"] for i in range(200)], [], None]}
    s.down(Message(None, b"", INTERNAL, dict(big)))
    s.down(Message(None, b"app", 0, {}))
    assert type(s.layer.sent[1]) is _Packed and type(s.layer.sent[2]) is Message
    s.up(Message(None, b"", INTERNAL, {**big, 2: [MSG, 1, 1]}, s.b))
    assert type(s.layer.windows[s.b].store[1]) is _Packed
    s.below.take()
    s.up(Message(s.local, b"", CONTROL, {2: [XMIT_REQ, [[1, 2]]]}, s.c))  # C: ours
    s.up(Message(s.local, b"", CONTROL, {2: [XMIT_REQ, [[1, 1]], s.b.uid]}, s.c))  # B's
    own, app, other = s.below.take()
    assert own.dest == s.c and own.flags == INTERNAL and own.headers[5] == big[5]
    assert own.headers[2][:2] == [MSG, 1] and app.payload == b"app"
    assert other.headers[5] == big[5] and other.headers[2] == [MSG, 1, 1, s.b.uid]


@pytest.mark.parametrize("how", ["early", "highest", "stability", "catchup"])
def test_an_idle_member_skips_the_gap_scan_until_a_gap_may_open(how):
    """With no gap anywhere one scan clears ``gappy`` and later ticks skip the O(N) scan;
    each way a window's highest can pass its delivered sets it again, so the gap is NAKed
    as before."""
    s = make()
    s.up(data(s.b, 1))
    s.advance(TWO_TICKS)
    assert s.layer.gappy is False and kinds(s.below.take(), XMIT_REQ) == []
    if how == "early":
        s.up(data(s.b, 3))
    elif how == "highest":
        s.up(Message(None, b"", CONTROL, {2: [HIGHEST, 3]}, s.b))
    elif how == "stability":
        s.down_event(Stability({s.local: 0, s.b: 3, s.c: 0}))
    else:
        s.down_event(Catchup({s.b: (3, s.c)}, lambda: None))
    s.advance(TWO_TICKS)
    [nak] = kinds(s.below.sent, XMIT_REQ)
    assert nak.headers[2][1] == ([[2, 2]] if how == "early" else [[2, 3]])
