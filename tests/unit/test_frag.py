"""FRAG in a sandwich: splitting, reassembly per (sender, frag_id), bounded memory (caps,
expiry, departed senders), malformed headers counted never raised, and the Stack's
MessageTooLarge limit taken from the frag layer."""
import random

import pytest

from raygroups.stack.config import StackConfig
from raygroups.stack.errors import MessageTooLarge
from raygroups.stack.events import AppBlocked, GetBundleRoom
from raygroups.stack.frag import HEADER, HEADER_ROOM, Frag, FragConfig
from raygroups.stack.message import OOB, Message
from raygroups.stack.view import View, ViewChange, ViewId

from .sandwich import ManualHost, Sandwich

FS = 1000


def make(room=FS + HEADER_ROOM, **cfg):
    s = Sandwich(Frag(FragConfig(**cfg)), answers={GetBundleRoom: room})
    s.b, s.c = s.addr("B"), s.addr("C")
    return s


def blob(n, seed=1):
    return random.Random(seed).randbytes(n)


def frags(s, sender):
    """What ``s`` sent, as received from ``sender`` (the transport sets the sender)."""
    out = []
    for m in s.below.take():
        out.append(Message(m.dest, bytes(m.payload), m.flags, dict(m.headers), sender))
    return out


def test_frag_size_comes_from_the_bundle_room():
    assert make().layer.frag_size == FS
    assert make(frag_size=500).layer.frag_size == 500
    assert make(frag_size=10 ** 9).layer.frag_size == FS  # capped at the room
    s = Sandwich(Frag(FragConfig()))  # nobody answers: a default that fits 60,000 bytes
    assert 50_000 < s.layer.frag_size < 60_000


def test_small_payloads_pass_untouched():
    s = make()
    m = Message(None, b"x" * FS, OOB, {7: 1})
    s.down(m)
    assert s.below.sent == [m] and HEADER not in m.headers
    s.up(Message(None, b"y", sender=s.b))
    assert [x.payload for x in s.above.messages] == [b"y"]


def test_large_payload_is_split_into_fragments_with_their_own_headers():
    s = make()
    data = blob(3 * FS + 10)
    s.down(Message(s.b, data, OOB, {7: "h"}))
    sent = s.below.sent
    assert [m.headers[HEADER] for m in sent] == [[0, i, 4] for i in range(4)]
    assert [len(m.payload) for m in sent] == [FS, FS, FS, 10]
    assert b"".join(bytes(m.payload) for m in sent) == data
    assert all(m.dest == s.b and m.flags == OOB and m.headers[7] == "h" for m in sent)
    assert len({id(m.headers) for m in sent}) == 4  # lower layers write into each one
    s.down(Message(None, blob(FS + 1)))
    assert [m.headers[HEADER] for m in s.below.sent[4:]] == [[1, 0, 2], [1, 1, 2]]
    assert s.layer.stats["fragmented"] == 2


def test_bytearray_and_memoryview_payloads_are_snapshotted():
    s = make()
    buf = bytearray(blob(2 * FS))
    s.down(Message(None, buf))
    buf[:] = b"\0" * len(buf)  # the application reuses its buffer
    got = b"".join(bytes(m.payload) for m in s.below.sent)
    assert got == blob(2 * FS)
    s.below.take()
    s.down(Message(None, memoryview(blob(2 * FS, 2))))
    assert b"".join(bytes(m.payload) for m in s.below.sent) == blob(2 * FS, 2)


def test_reassembly_delivers_once_in_the_position_of_the_last_fragment():
    s, r = make(), make()
    data = blob(2 * FS + 5)
    s.down(Message(None, data, OOB, {7: 1}))
    f = frags(s, s.local)
    before = Message(None, b"before", sender=s.local)
    mid = Message(None, b"mid", sender=r.b)
    r.layer.up([before, f[0], f[1], mid, f[2]])
    got = r.above.messages
    assert [m.payload for m in got] == [b"before", b"mid", data]
    whole = got[2]
    assert whole.sender == s.local and whole.flags == OOB and whole.headers == {7: 1}
    assert HEADER in f[2].headers  # the fragment itself is not modified (kept for xmit)
    assert r.layer.stats["reassembled"] == 1 and r.layer.pending_bytes == 0


def test_a_batch_without_fragments_is_passed_as_is():
    r = make()
    batch = [Message(None, b"a", sender=r.b), Message(None, b"b", sender=r.c)]
    r.layer.up(batch)
    assert r.above.batches == [batch]


def test_senders_and_streams_interleave():
    a, c, r = make(), make(), make()
    d1, d2, d3 = blob(3 * FS, 1), blob(2 * FS, 2), blob(2 * FS, 3)
    a.down(Message(None, d1))        # a multicast of A
    a.down(Message(r.local, d2))     # and a unicast of A, frag_ids differ
    c.down(Message(None, d3))        # C's own counter also starts at 0
    fa, fc = frags(a, r.b), frags(c, r.c)
    order = [fa[0], fc[0], fa[3], fa[1], fc[1], fa[4], fa[2]]
    for m in order:
        r.up(m)
    assert sorted(m.payload for m in r.above.messages) == sorted([d1, d2, d3])
    assert r.layer.pending_bytes == 0


def test_out_of_order_and_duplicate_fragments():
    s, r = make(), make()
    data = blob(5 * FS)
    s.down(Message(None, data))
    f = frags(s, r.b)
    for i in (3, 1, 1, 0, 4, 3):
        r.up(f[i])
    assert r.above.messages == []
    r.up(f[2])
    assert [m.payload for m in r.above.messages] == [data]
    assert r.layer.stats["duplicate_fragments"] == 2
    r.up(f[0])  # a late duplicate after completion starts an entry that never completes
    assert len(r.above.messages) == 1


def test_max_message_size_raises_before_sending_anything():
    s = make(max_message_size=10 * FS)
    s.down(Message(None, blob(10 * FS)))
    n = len(s.below.take())
    assert n == 10
    with pytest.raises(MessageTooLarge):
        s.down(Message(None, blob(10 * FS + 1)))
    assert s.below.sent == []


def test_per_sender_cap_drops_the_incomplete_message_and_its_rest():
    s, r = make(), make(max_pending_per_sender=3 * FS)
    big, ok = blob(5 * FS, 1), blob(2 * FS, 2)
    s.down(Message(None, big))
    s.down(Message(None, ok))
    f = frags(s, r.b)
    for m in f:
        r.up(m)
    assert [m.payload for m in r.above.messages] == [ok]
    st = r.layer.stats
    assert st["dropped_over_limit"] == 1 and st["dropped_fragments"] == 1  # the 5th one
    assert r.layer.pending_bytes == 0


def test_total_cap_bounds_all_senders_together():
    r = make(max_pending_total=4 * FS)
    sb, sc = make(), make()
    sb.down(Message(None, blob(3 * FS, 1)))
    sc.down(Message(None, blob(3 * FS, 2)))
    fb, fc = frags(sb, r.b), frags(sc, r.c)
    for m in (fb[0], fb[1], fc[0], fc[1], fb[2], fc[2]):
        r.up(m)
    assert r.layer.pending_bytes <= 4 * FS
    # B's last fragment would pass the cap: B's message goes, C's completes
    assert [m.payload for m in r.above.messages] == [blob(3 * FS, 2)]
    assert r.layer.stats["dropped_over_limit"] == 1


def test_incomplete_messages_expire_unless_the_application_is_blocked():
    s, r = make(), make(reassembly_timeout_s=1.0)
    s.down(Message(None, blob(3 * FS)))
    f = frags(s, r.b)
    r.up(f[0])
    r.down_event(AppBlocked(True))  # flow control holds the rest: no expiry meanwhile
    r.advance(5.0)
    assert r.layer.pending_bytes == FS
    r.down_event(AppBlocked(False))
    r.advance(0.5)
    r.up(f[1])
    r.advance(0.9)
    assert r.layer.pending_bytes == 2 * FS  # a fragment restarted the clock
    r.advance(1.0)
    assert r.layer.pending_bytes == 0 and r.layer.stats["dropped_expired"] == 1
    r.up(f[2])
    assert r.above.messages == [] and r.layer.stats["dropped_fragments"] == 1


def test_a_sender_that_leaves_the_view_keeps_its_stream_until_expiry():
    """UNICAST goes on across views (and NAKACK resumes after a merge): an incomplete
    message of a departed sender may still complete; only expiry drops it."""
    s, r = make(), make(reassembly_timeout_s=10.0)
    s.down(Message(r.local, blob(3 * FS)))
    s.down(Message(r.local, blob(2 * FS, 2)))
    f = frags(s, r.b)
    r.up(f[0])
    v1 = View(ViewId(r.local, 1), (r.local, r.b, r.c))
    v2 = View(ViewId(r.local, 2), (r.local, r.c))
    r.layer.up_event(ViewChange(v1, None))
    r.layer.up_event(ViewChange(v2, v1))  # B left our view
    assert [type(e) for e in r.above.events] == [ViewChange, ViewChange]
    r.up(f[1], f[2])
    assert [m.payload for m in r.above.messages] == [blob(3 * FS)]
    r.up(f[3])  # and the next one stops half way: it expires
    r.advance(20.0)
    assert r.layer.pending_bytes == 0 and r.layer.stats["dropped_expired"] == 1


@pytest.mark.parametrize("hdr", [5, "x", [], [1], [1, 2], [1, 2, 3, 4], ["a", 0, 2],
                                 [0, "0", 2], [0, 0, None], [0, 2, 2], [0, -1, 2], [0, 0, 0],
                                 [0, 0, 1 << 40], {"a": 1}, [1.0, 0, 2]])
def test_malformed_headers_are_counted_never_raised(hdr):
    r = make()
    r.up(Message(None, b"zz", 0, {HEADER: hdr}, r.b), Message(None, b"ok", sender=r.b))
    assert [m.payload for m in r.above.messages] == [b"ok"]
    assert r.layer.stats["malformed_header"] == 1


def test_a_fragment_with_a_non_bytes_payload_is_malformed():
    r = make()
    r.up(Message(None, {"x": 1}, 0, {HEADER: [0, 0, 2]}, r.b))
    assert r.layer.stats["malformed_header"] == 1 and r.layer.pending_bytes == 0


def test_a_changed_count_drops_the_message():
    r = make()
    r.up(Message(None, b"a" * 10, 0, {HEADER: [0, 0, 3]}, r.b))
    r.up(Message(None, b"b" * 10, 0, {HEADER: [0, 1, 2]}, r.b))
    assert r.layer.stats["dropped_inconsistent"] == 1 and r.layer.pending_bytes == 0


# -- the whole stack --------------------------------------------------------------------
def build(**options):
    host = ManualHost()
    return StackConfig.local(**options).build("c", "A", host, random.Random(1))


def test_stack_send_limit_comes_from_frag():
    st = build()
    assert "frag" in [la.name for la in st.layers]
    assert st.max_payload == 256 * 1024 * 1024
    st = build(frag__max_message_size=100_000)
    assert st.max_payload == 100_000
    st.start()
    with pytest.raises(MessageTooLarge):
        st.send(Message(None, b"x" * 100_001))


def test_frag_size_fits_the_transport_bundle_with_auth():
    for opts in ({}, {"cluster_key": b"k"}, {"cluster_key": b"k", "auth_mode": "aesgcm"},
                 {"transport__max_bundle_size": 8000}):
        st = build(**opts)
        st.start()
        frag = st.layer("frag")
        assert frag.frag_size == st.transport.bundler.max_message - HEADER_ROOM
        assert frag.frag_size < st.transport.config.max_bundle_size - 1000
