"""Transport fragmentation (stack/transport_frag.py): a packed message longer than a bundle
- a VIEW or JOIN_RSP of a thousand members, below FRAG - goes out as fragments that each
fit one datagram and comes back whole at the receiver, exactly as sent; duplicates,
reordering, loss (the whole message is lost, for the reliability layer to resend),
expiry, memory caps and malformed fragments are handled, counted and never raised."""
import random

import msgpack
import pytest

from raygroups.stack import wire
from raygroups.stack.address import Address
from raygroups.stack.events import AddPhysical, EmitTo, ViewInstalled
from raygroups.stack.message import INTERNAL, Message
from raygroups.stack.transport import Transport, TransportConfig
from raygroups.stack.transport_frag import FRAG_HEADER
from raygroups.stack.view import View, ViewId, view_to_wire

from .sandwich import Sandwich

CLUSTER = "test"
PA, PB = ("10.0.0.1", 7800), ("10.0.0.2", 7800)


def pair(seed=0, **cfg):
    """Two transports, A and B, that know each other's physical address."""
    a = Sandwich(Transport(TransportConfig(**cfg)), name="A", seed=seed, cluster=CLUSTER)
    b = Sandwich(Transport(TransportConfig(**cfg)), name="B", seed=seed + 1, cluster=CLUSTER)
    a.down_event(AddPhysical(a.ctx.book.add(b.local), PB))
    b.down_event(AddPhysical(b.ctx.book.add(a.local), PA))
    return a, b


def big_view(n: int, rng: random.Random) -> list:
    members = tuple(Address.random(f"m{i}", rng) for i in range(n))
    return view_to_wire(View(ViewId(members[0], 7), members))


def test_a_view_of_1000_members_goes_out_in_datagrams_and_comes_back_whole():
    rng = random.Random(1)
    a, b = pair()
    view = big_view(1000, rng)  # a JOIN_RSP: the view, a digest, every member's address
    hdr = [1, view, [[uid, 1000 + i] for i, (uid, _) in enumerate(view[2])],
           [[uid, f"10.0.{i // 256}.{i % 256}", 7800] for i, (uid, _) in enumerate(view[2])]]
    a.down(Message(b.local, b"", INTERNAL, {5: hdr}))
    a.advance(0)
    sizes = [len(d) for _, d in a.host.emitted]
    assert len(sizes) >= 2 and max(sizes) <= 60_000  # more than one datagram, each fits
    assert a.layer.stats["frag_messages"] == 1
    for _, data in a.host.emitted:
        b.layer.receive(data, PA)
    [m] = b.above.messages
    assert m.headers == {5: hdr} and m.flags == INTERNAL and m.dest == b.local
    assert m.sender == a.local
    assert b.layer.stats["frag_reassembled"] == 1 and b.layer.pending_frag_bytes == 0


@pytest.mark.parametrize("seed", range(5))
def test_reordered_and_duplicated_fragments_deliver_once_in_place(seed):
    print(f"seed {seed}")
    rng = random.Random(seed)
    a, b = pair(seed, max_bundle_size=1200)
    payload = bytes(rng.getrandbits(8) for _ in range(7000))
    a.down(Message(None, b"before"))
    a.down(Message(None, payload, 0, {2: [0, 9, 1]}))
    a.down(Message(None, b"after"))
    a.advance(0)
    packets = [d for _, d in a.host.emitted]
    assert len(packets) >= 6 and all(len(d) <= 1200 for d in packets)
    # fragments arrive shuffled and some twice: one delivery, at the last fragment
    order = packets + rng.sample(packets, 3)
    rng.shuffle(order)
    for data in order:
        b.layer.receive(data, PA)
    got = [m for m in b.above.messages if len(m.payload) > 100]
    # (the small messages may come twice: duplicates are NAKACK's to drop, not ours)
    assert [(m.payload, m.headers) for m in got] == [(payload, {2: [0, 9, 1]})]
    assert b.layer.stats["frag_duplicates"] >= 1 and b.layer.pending_frag_bytes == 0


def test_fan_out_sends_every_fragment_to_every_member():
    rng = random.Random(2)
    a = Sandwich(Transport(TransportConfig(kind="tcp", max_bundle_size=1000)), cluster=CLUSTER)
    others = [a.addr(f"o{i}") for i in range(3)]
    for i, o in enumerate(others):
        a.down_event(AddPhysical(o, ("10.0.1.%d" % i, 7800)))
    a.down_event(ViewInstalled(View(ViewId(a.local, 1), (a.local, *others)), None))
    a.down(Message(None, rng.randbytes(3000), INTERNAL))
    a.advance(0)
    per_dest = {}
    for dest, data in a.host.emitted:
        per_dest[dest] = per_dest.get(dest, 0) + 1
    assert len(per_dest) == 3 and len(set(per_dest.values())) == 1
    assert next(iter(per_dest.values())) >= 4
    assert len(a.above.messages) == 1  # the local copy loops back whole


def test_emit_to_is_fragmented_too():
    a, b = pair(max_bundle_size=1000)
    a.down_event(EmitTo(PB, Message(None, b"z" * 2500, 0, {1: [0]})))
    a.advance(0)
    assert len(a.host.emitted) >= 3
    for _, data in a.host.emitted:
        b.layer.receive(data, PA)
    [m] = b.above.messages
    assert m.payload == b"z" * 2500 and m.headers == {1: [0]}


def test_a_lost_fragment_loses_the_message_which_expires_and_a_resend_arrives():
    a, b = pair(max_bundle_size=1000, frag_timeout_s=5.0)
    msg = Message(b.local, b"q" * 3000, INTERNAL, {3: [0, 1, 1]})
    a.down(msg)
    a.advance(0)
    first = [d for _, d in a.host.emitted]
    for data in first[1:]:  # the first fragment is lost
        b.layer.receive(data, PA)
    assert b.above.messages == [] and b.layer.pending_frag_bytes > 0
    # the reliability layer resends the message whole: new fragments, a new id
    a.host.emitted.clear()
    a.down(Message(b.local, b"q" * 3000, INTERNAL, {3: [0, 1, 1]}))
    a.advance(0)
    b.host.advance(6.0)
    for _, data in a.host.emitted:
        b.layer.receive(data, PA)
    [m] = b.above.messages
    assert m.payload == b"q" * 3000
    # the incomplete first copy expired as the resend arrived: nothing is left behind
    assert b.layer.stats["frag_dropped_expired"] == 1 and b.layer.pending_frag_bytes == 0


def test_reassembly_memory_is_bounded_per_sender_and_in_total():
    rng = random.Random(3)
    a, b = pair(max_bundle_size=1000, max_message_size=4000, frag_pending_total=5000)
    # per sender: incomplete messages of one sender beyond max_message_size are dropped
    for _ in range(3):
        a.down(Message(b.local, rng.randbytes(3000)))
    a.advance(0)
    frags = [d for _, d in a.host.emitted]
    by_msg = {}
    for data in frags:
        _, [(_, _, h, _)] = wire.decode(data, CLUSTER)
        by_msg.setdefault(h[FRAG_HEADER][0], []).append(data)
    for fid, datas in by_msg.items():
        for data in datas[:-1]:  # every message misses its last fragment
            b.layer.receive(data, PA)
    st = b.layer.stats
    assert b.layer.pending_frag_bytes <= 4000
    assert st["frag_dropped_over_limit"] >= 1
    # in total: a second sender's fragments evict the oldest incomplete message
    c = Sandwich(Transport(TransportConfig(max_bundle_size=1000)), name="C", seed=9,
                 cluster=CLUSTER)
    c.down_event(AddPhysical(c.ctx.book.add(b.local), PB))
    c.down(Message(b.local, rng.randbytes(3500)))
    c.advance(0)
    cf = [d for _, d in c.host.emitted]
    for data in cf[:-1]:
        b.layer.receive(data, ("10.0.0.3", 7800))
    assert b.layer.pending_frag_bytes <= 5000 and st["frag_dropped_evicted"] >= 1
    b.layer.receive(cf[-1], ("10.0.0.3", 7800))
    assert len(b.above.messages) == 1  # the newest message still completes


def frag_packet(sender, header, chunk, dest=None):
    b = wire.Bundler(CLUSTER, sender, 60_000)
    b.add("x", wire.encode_message(dest, 0, {FRAG_HEADER: header}, chunk))
    [(_, data)] = list(b.drain())
    return data


@pytest.mark.parametrize("header,chunk", [
    ([0, 0], b"x"), ([0, 5, 3], b"x"), (["a", 0, 2], b"x"), ([0, 0, 1], b"x"),
    ([0, 0, 10 ** 9], b"x"), ([0, 0, 2], "text"), ([0, -1, 2], b"x"), (None, b"x"),
])
def test_malformed_fragments_are_counted_never_raised(header, chunk):
    _, b = pair()
    b.layer.receive(frag_packet(b"\x07" * 16, header, chunk), PA)
    assert b.above.batches == [] and b.layer.stats["dropped_frag_malformed"] == 1


def test_a_reassembled_message_must_be_one_valid_message():
    _, b = pair()
    for bad in (msgpack.packb([None, 0, {}]), b"\xc1\xc1", msgpack.packb([None, 0, {FRAG_HEADER: [0, 0, 2]}, b""]),
                msgpack.packb([b"short", 0, {}, b""])):
        half = (len(bad) + 1) // 2
        b.layer.receive(frag_packet(b"\x07" * 16, [len(bad), 0, 2], bad[:half]), PA)
        b.layer.receive(frag_packet(b"\x07" * 16, [len(bad), 1, 2], bad[half:]), PA)
    assert b.above.batches == [] and b.layer.stats["dropped_frag_malformed"] == 4
    # a fragment count that changes mid-message drops the message
    b.layer.receive(frag_packet(b"\x08" * 16, [1, 0, 3], b"ab"), PA)
    b.layer.receive(frag_packet(b"\x08" * 16, [1, 1, 4], b"cd"), PA)
    assert b.layer.pending_frag_bytes == 0 and b.layer.stats["frag_dropped_inconsistent"] == 1
