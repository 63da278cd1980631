"""NAKACK in a sandwich: seqnos, FIFO delivery, NAKs, retransmission, HIGHEST, stability."""
import pytest

from raygroups.stack.events import (GetDigest, OwnUnstable, SetDigest, Stability, ViewInstalled,
                                    Writable)
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


def data(sender, seq, payload=None):
    return Message(None, payload if payload is not None else f"m{seq}", 0, {2: [MSG, seq]},
                   sender)


def kinds(msgs, typ):
    return [m for m in msgs if m.headers.get(2, [None])[0] == typ]


def test_multicasts_get_consecutive_seqnos():
    s = make()
    for i in range(3):
        s.down(Message(None, f"p{i}"))
    assert [m.headers[2] for m in s.below.sent] == [[MSG, 1], [MSG, 2], [MSG, 3]]
    assert s.down_event(OwnUnstable()) == 3


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
    assert s.below.sent[-1].headers[2] == [MSG, 1]  # the seqno counter was not consumed


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
        (s.c, "p2", [MSG, 2]), (s.c, "p3", [MSG, 3]), (s.c, "p4", [MSG, 4])]
    assert s.layer.stats["retransmitted"] == 3
    # a purged (stable) message cannot be retransmitted; nothing is invented
    s.down_event(Stability({s.local: 2, s.b: 0, s.c: 0}))
    s.up(Message(s.local, b"", CONTROL, {2: [XMIT_REQ, [[1, 3]]]}, s.c))
    assert [m.headers[2] for m in s.below.take()] == [[MSG, 3]]


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
    assert s.down_event(OwnUnstable()) == 3
    assert s.above.events == [Writable("nakack", False)]  # 3 >= window/2: still blocked
    s.down_event(Stability({s.local: 5}))
    assert s.down_event(OwnUnstable()) == 1
    assert s.above.events == [Writable("nakack", False), Writable("nakack", True)]
    assert sorted(s.layer.sent) == [6]


def test_application_send_beyond_twice_the_window_raises_internal_does_not():
    s = make(send_window=2)
    for i in range(4):
        s.down(Message(None, i))
    with pytest.raises(SendBufferFull):
        s.down(Message(None, "too many"))
    s.down(Message(None, "view", INTERNAL))
    assert s.below.sent[-1].headers[2] == [MSG, 5]


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
    assert s.layer.stats["dropped_unknown_sender"] == 1  # C left


def test_messages_from_outside_the_view_are_dropped_and_counted():
    s = make()
    stranger = s.addr("X")
    s.up(data(stranger, 1), data(stranger, 2))
    assert s.above.messages == []
    assert s.layer.stats["dropped_unknown_sender"] == 2


@pytest.mark.parametrize("header", [
    5, "", "x", [], [MSG], [7, 1], [MSG, None], [MSG, "1"], [MSG, [1]],
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
    assert s.down_event(OwnUnstable()) == 0
    s.down(Message(None, "later1"))
    s.down(Message(None, "later2"))
    assert [m.headers[2][1] for m in s.below.sent[-2:]] == [4, 5]
    s.down_event(Stability({s.local: 5}))
    assert s.down_event(OwnUnstable()) == 0
