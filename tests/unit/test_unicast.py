"""UNICAST in a sandwich: per-peer connections, FIFO delivery, acks, retransmission,
connection resets, back-pressure and expiry."""
import pytest

from raygroups.stack.events import ViewInstalled, Writable
from raygroups.stack.message import CONTROL, INTERNAL, NO_RELIABILITY, Message
from raygroups.stack.unicast import ACK, DATA, Unicast, UnicastConfig, UnicastWindowFull
from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich

# First tick at interval * U(0.5, 1), then every interval * U(0.9, 1.1) (interval = 1):
# exactly one tick by t=1.0, exactly two by t=2.1.
ONE_TICK, TWO_TICKS = 1.0, 2.1


def make(**cfg):
    opts = dict(xmit_interval_s=1.0)
    opts.update(cfg)
    s = Sandwich(Unicast(UnicastConfig(**opts)))
    s.b, s.c = s.addr("B"), s.addr("C")
    s.down_event(ViewInstalled(View(ViewId(s.local, 1), (s.local, s.b, s.c))))
    return s


def data(sender, seq, cid=7, payload=None):
    return Message(None, payload if payload is not None else f"u{seq}", 0,
                   {3: [DATA, cid, seq]}, sender)


def acks(msgs):
    return [(m.dest, m.headers[3]) for m in msgs if m.headers.get(3, [None])[0] == ACK]


def test_per_destination_seqnos_and_conn_ids():
    s = make()
    s.down(Message(s.b, "1"))
    s.down(Message(s.c, "2"))
    s.down(Message(s.b, "3"))
    hdr = [(m.dest, m.headers[3]) for m in s.below.sent]
    cb, cc = hdr[0][1][1], hdr[1][1][1]
    assert cb != cc
    assert hdr == [(s.b, [DATA, cb, 1]), (s.c, [DATA, cc, 1]), (s.b, [DATA, cb, 2])]


@pytest.mark.parametrize("flags", [0, NO_RELIABILITY])
def test_multicasts_and_unreliable_unicasts_pass_untouched(flags):
    s = make()
    m1, m2 = Message(None, b"m", flags), Message(s.b, b"u", NO_RELIABILITY | flags)
    s.down(m1)
    s.down(m2)
    assert s.below.sent == [m1, m2] and 3 not in m1.headers and 3 not in m2.headers
    s.up(Message(None, b"plain", 0, {}, s.b))
    assert [m.payload for m in s.above.messages] == [b"plain"]


def test_in_order_delivery_with_buffering():
    s = make()
    s.up(data(s.b, 3))
    s.up(data(s.b, 2))
    assert s.above.messages == []
    s.up(data(s.b, 1))
    assert [m.payload for m in s.above.messages] == ["u1", "u2", "u3"]
    s.up(data(s.b, 2))
    assert s.layer.stats["duplicates"] == 1
    assert len(s.above.messages) == 3


def test_one_ack_per_loop_turn_with_highest_contiguous_seqno():
    s = make()
    s.up(data(s.b, 1), data(s.b, 2))
    s.up(data(s.b, 4))
    s.up(data(s.c, 1, cid=3))
    assert acks(s.below.sent) == []  # not before the loop turn ends
    s.advance(0)
    assert sorted(acks(s.below.take()), key=lambda a: a[0] != s.b) == [
        (s.b, [ACK, 7, 2]), (s.c, [ACK, 3, 1])]
    assert all(m.flags & NO_RELIABILITY for m in s.below.sent)
    s.advance(0)
    assert s.below.sent == []  # nothing new received: no ack
    s.up(data(s.b, 3))
    s.advance(0)
    assert acks(s.below.take()) == [(s.b, [ACK, 7, 4])]


def test_duplicate_is_acked_again():
    """The ack may have been lost: a retransmitted duplicate must be re-acknowledged."""
    s = make()
    s.up(data(s.b, 1))
    s.advance(0)
    s.below.take()
    s.up(data(s.b, 1))
    s.advance(0)
    assert acks(s.below.take()) == [(s.b, [ACK, 7, 1])]


def test_unacked_messages_retransmitted_after_a_tick():
    s = make()
    s.down(Message(s.b, "a"))
    s.down(Message(s.b, "b"))
    cid = s.below.take()[0].headers[3][1]
    s.advance(ONE_TICK)
    assert s.below.take() == []  # sent during this tick: not yet
    s.up(Message(s.local, b"", CONTROL, {3: [ACK, cid, 1]}, s.b))
    s.advance(TWO_TICKS - ONE_TICK)
    out = s.below.take()
    assert [(m.dest, m.payload, m.headers[3]) for m in out] == [(s.b, "b", [DATA, cid, 2])]
    assert s.layer.stats["retransmitted"] == 1
    s.up(Message(s.local, b"", CONTROL, {3: [ACK, cid, 2]}, s.b))
    s.advance(10.0)
    assert s.below.take() == []


def test_ack_with_another_conn_id_is_ignored():
    s = make()
    s.down(Message(s.b, "a"))
    cid = s.below.take()[0].headers[3][1]
    s.up(Message(s.local, b"", CONTROL, {3: [ACK, cid + 100, 5]}, s.b))
    s.advance(TWO_TICKS)
    assert [m.payload for m in s.below.take()] == ["a"]


def test_higher_conn_id_resets_receive_window_lower_is_stale():
    s = make()
    s.up(data(s.b, 1, cid=5), data(s.b, 2, cid=5))
    s.up(data(s.b, 1, cid=6, payload="new1"))  # the peer reopened the connection
    assert [m.payload for m in s.above.messages] == ["u1", "u2", "new1"]
    s.up(data(s.b, 3, cid=5))
    assert s.layer.stats["stale_conn"] == 1
    assert len(s.above.messages) == 3
    s.advance(0)
    assert acks(s.below.take()) == [(s.b, [ACK, 6, 1])]


def test_window_full_back_pressure():
    s = make(send_window=2)
    s.down(Message(s.b, 1))
    s.down(Message(s.b, 2))
    assert s.above.events == []
    s.down(Message(s.b, 3))
    assert s.above.events == [Writable("unicast", False)]
    s.down(Message(s.c, 1))
    s.down(Message(s.c, 2))
    s.down(Message(s.c, 3))
    assert s.above.events == [Writable("unicast", False)]  # one report for both peers
    s.down(Message(s.b, 4))
    with pytest.raises(UnicastWindowFull):
        s.down(Message(s.b, 5))
    s.down(Message(s.b, "internal", INTERNAL))  # stack traffic is never refused
    cb = s.below.sent[0].headers[3][1]
    cc = s.below.sent[3].headers[3][1]
    s.up(Message(s.local, b"", CONTROL, {3: [ACK, cb, 5]}, s.b))
    assert s.above.events == [Writable("unicast", False)]  # C is still full
    s.up(Message(s.local, b"", CONTROL, {3: [ACK, cc, 3]}, s.c))
    assert s.above.events == [Writable("unicast", False), Writable("unicast", True)]


def test_connection_to_departed_peer_expires_and_releases_back_pressure():
    s = make(send_window=2, conn_expiry_s=5.0)
    for i in range(3):
        s.down(Message(s.b, i))
    assert s.above.events == [Writable("unicast", False)]
    s.down_event(ViewInstalled(View(ViewId(s.local, 2), (s.local, s.c))))  # B is gone
    s.advance(10.0)
    assert s.layer.stats["expired_conns"] == 1
    assert s.above.events == [Writable("unicast", False), Writable("unicast", True)]
    assert not s.layer.blocked


def test_new_connection_after_expiry_uses_a_higher_conn_id():
    s = make(conn_expiry_s=5.0)
    s.down(Message(s.b, "old"))
    old = s.below.take()[0].headers[3][1]
    s.down_event(ViewInstalled(View(ViewId(s.local, 2), (s.local, s.c))))
    s.advance(10.0)
    s.below.take()
    s.down(Message(s.b, "new"))
    new = s.below.take()[0].headers[3]
    assert new[1] > old and new[2] == 1


@pytest.mark.parametrize("header", [5, "x", [], [DATA, 1], [9, 1, 1], [DATA, "1", 1],
                                    [DATA, 1, None], [DATA, 1.0, 1], [DATA, 1, 2.5], {"a": 1}],
                         ids=repr)
def test_malformed_headers_are_counted_never_raised(header):
    s = make()
    s.up(Message(None, b"bad", 0, {3: header}, s.b), data(s.b, 1))
    assert s.layer.stats["malformed_header"] == 1
    assert [m.payload for m in s.above.messages] == ["u1"]


def test_retransmissions_to_a_peer_outside_the_view_back_off_until_it_answers():
    """A peer outside the view (the other side of a partition) that acknowledges nothing
    gets retransmissions ever less often, doubling from a tick to xmit_backoff_max_s; a
    member of the view that answers gets one every tick. A new message to the silent peer
    goes out at once and does not end the backoff (every round restarted across a partition
    sends one); any acknowledgement from the peer does, even one of nothing new."""
    s = make(xmit_interval_s=0.1, xmit_backoff_max_s=1.6, conn_expiry_s=100.0)
    s.down_event(ViewInstalled(View(ViewId(s.local, 2), (s.local, s.c))))  # B is gone
    s.down(Message(s.b, "to B"))
    cid = s.below.take()[0].headers[3][1]
    to_c = 0
    for _ in range(100):  # C answers each of its messages; B nothing
        s.down(Message(s.c, "to C"))
        s.advance(0.1)
        out = s.below.take()
        to_c += sum(1 for m in out if m.dest == s.c)
        for m in out:
            if m.dest == s.c:
                s.up(Message(s.local, b"", CONTROL, {3: [ACK, m.headers[3][1], m.headers[3][2]]},
                             s.c))
    # B: ticks 1, 2, 4, 8, 16 then every 16 (about 10)
    to_b = s.layer.stats["retransmitted"]
    assert 7 <= to_b <= 12 and to_c == 100, (to_b, to_c)
    assert s.layer.stats["xmit_backed_off"] >= 80
    s.down(Message(s.b, "again"))
    assert [m.payload for m in s.below.take()] == ["again"]  # at once
    s.advance(0.35)
    assert [m.payload for m in s.below.take()] == []  # still backing off
    s.up(Message(s.local, b"", CONTROL, {3: [ACK, cid, 0]}, s.b))  # it answers: nothing new
    s.advance(0.1)
    assert [m.payload for m in s.below.take()] == ["to B", "again"]


def test_a_member_of_the_view_silent_for_xmit_backoff_after_s_gets_backed_off_retransmissions():
    """A member of the view that acknowledges nothing gets one retransmission a tick for
    xmit_backoff_after_s, then ever fewer (its side of a partition, before the view excludes
    it: every START_FLUSH of every restarted round again each tick); an acknowledgement
    ends it."""
    s = make(xmit_interval_s=0.1, xmit_backoff_max_s=1.6, xmit_backoff_after_s=0.5)
    s.down_event(ViewInstalled(View(ViewId(s.local, 2), (s.local, s.b, s.c))))
    s.down(Message(s.b, "to B"))
    cid = s.below.take()[0].headers[3][1]
    s.advance(0.55)
    assert [m.payload for m in s.below.take()] in (["to B"] * 4, ["to B"] * 5)  # each tick
    s.advance(10.0)
    assert 5 <= len(s.below.take()) <= 10 and s.layer.stats["xmit_backed_off"] >= 80
    s.up(Message(s.local, b"", CONTROL, {3: [ACK, cid, 0]}, s.b))
    s.advance(0.35)
    assert [m.payload for m in s.below.take()] == ["to B"] * 3


def test_the_tick_walks_only_connections_with_messages_waiting():
    """A member of a large group holds a connection to most others, nearly all idle: the
    tick retransmits on those with unacknowledged messages and leaves the rest alone,
    and a message sent after a quiet spell still waits a tick before going out again."""
    s = make()
    peers = [s.addr(f"P{i}") for i in range(50)]
    s.down_event(ViewInstalled(View(ViewId(s.local, 2), (s.local, s.b, s.c, *peers))))
    for p in peers:
        s.down(Message(p, "x"))
    cids = {m.dest: m.headers[3][1] for m in s.below.take()}
    for p in peers[1:]:
        s.up(Message(s.local, b"", CONTROL, {3: [ACK, cids[p], 1]}, p))
    s.advance(ONE_TICK)  # (sent since the last tick: not yet again)
    assert s.below.take() == [] and list(s.layer.waiting) == [peers[0]]
    s.down(Message(peers[1], "y"))  # after a quiet spell
    assert [m.dest for m in s.below.take()] == [peers[1]]
    s.advance(1.1)
    assert [m.dest for m in s.below.take()] == [peers[0]]  # the only one unacknowledged
    s.advance(1.1)
    assert sorted(m.dest for m in s.below.take()) == sorted([peers[0], peers[1]])
