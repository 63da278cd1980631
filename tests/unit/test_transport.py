"""The transport in a sandwich: packing, bundling per destination, loopback, fan-out, and
validation of what arrives (drop and count, never raise)."""
import msgpack
import pytest

from raygroups.stack import wire
from raygroups.stack.address import Address
from raygroups.stack.errors import MessageTooLarge
from raygroups.stack.events import AddPhysical, EmitTo, GetPhysical, ViewInstalled
from raygroups.stack.layer import MCAST
from raygroups.stack.message import NO_LOOPBACK, Message
from raygroups.stack.transport import Transport, TransportConfig
from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich

CLUSTER = "test"
PB, PC = ("10.0.0.2", 7800), ("10.0.0.3", 7800)


def make(**cfg):
    s = Sandwich(Transport(TransportConfig(**cfg)), cluster=CLUSTER)
    s.b, s.c = s.addr("B"), s.addr("C")
    s.down_event(AddPhysical(s.b, PB))
    s.down_event(AddPhysical(s.c, PC))
    return s


def emitted(s):
    """[(dest, [[dest_uid, flags, headers, payload], ...])] decoded."""
    out = []
    for dest, data in s.host.emitted:
        sender, msgs = wire.decode(data, CLUSTER)
        assert sender == s.local.uid
        out.append((dest, msgs))
    return out


def packet(sender_uid, msgs, cluster=CLUSTER, max_size=60_000):
    b = wire.Bundler(cluster, sender_uid, max_size)
    for m in msgs:
        b.add("x", wire.encode_message(*m))
    [(_, data)] = list(b.drain())
    return data


def dropped(s):
    return sum(v for k, v in s.layer.stats.items() if k.startswith("dropped_"))


def test_one_bundle_per_destination_per_flush():
    s = make()
    s.down(Message(None, b"m1", 0, {2: [0, 1]}))
    s.down(Message(s.b, b"u1", 0, {3: [0, 1, 1]}))
    s.down(Message(None, b"m2"))
    s.down(Message(s.b, b"u2"))
    s.down(Message(s.c, b"u3"))
    assert s.host.emitted == []  # nothing before the loop turn ends
    s.advance(0)
    got = emitted(s)
    assert [d for d, _ in got] == [MCAST, PB, PC]
    assert got[0][1] == [[None, 0, {2: [0, 1]}, b"m1"], [None, 0, {}, b"m2"]]
    assert got[1][1] == [[s.b.uid, 0, {3: [0, 1, 1]}, b"u1"], [s.b.uid, 0, {}, b"u2"]]
    assert got[2][1] == [[s.c.uid, 0, {}, b"u3"]]
    st = s.layer.stats
    assert st["sent_msgs"] == 5 and st["sent_packets"] == 3
    assert st["sent_bytes"] == sum(len(d) for _, d in s.host.emitted)
    s.advance(1.0)
    assert len(s.host.emitted) == 3  # nothing is sent twice


def test_multicasts_loop_back_in_one_batch_after_the_flush():
    s = make()
    s.down(Message(None, b"m1"))
    s.down(Message(None, b"quiet", NO_LOOPBACK))
    s.down(Message(s.local, b"to self"))
    s.down(Message(None, b"m2"))
    assert s.above.batches == []
    s.advance(0)
    [batch] = s.above.batches
    assert [m.payload for m in batch] == [b"m1", b"to self", b"m2"]
    assert all(m.sender == s.local for m in batch)
    assert [d for d, _ in emitted(s)] == [MCAST]  # the message to self is not emitted
    assert [m[3] for m in emitted(s)[0][1]] == [b"m1", b"quiet", b"m2"]


def test_unicast_without_route_is_dropped_and_counted():
    s = make()
    s.down(Message(Address(b"\x01" * 16, "nowhere"), b"x"))
    s.advance(0)
    assert s.host.emitted == [] and s.layer.stats["no_route"] == 1


def test_message_too_large_raises():
    # larger than a bundle is fragmented (below); larger than max_message_size raises
    s = make(max_bundle_size=1000, max_message_size=5000)
    s.down(Message(None, b"x" * (s.layer.bundler.max_message - 40)))
    with pytest.raises(MessageTooLarge):
        s.down(Message(None, b"x" * 5000))
    s.advance(0)
    assert len(s.host.emitted) == 1


def test_bundles_are_cut_at_max_bundle_size():
    s = make(max_bundle_size=1000)
    for i in range(20):
        s.down(Message(s.b, bytes([i]) * 200))
    s.advance(0)
    assert len(s.host.emitted) > 1
    assert all(len(d) <= 1000 for _, d in s.host.emitted)
    payloads = [m[3] for _, msgs in emitted(s) for m in msgs]
    assert payloads == [bytes([i]) * 200 for i in range(20)]


def test_fan_out_sends_one_copy_per_view_member():
    s = make(kind="tcp")
    d = s.addr("D")  # in the view, but no known address
    s.down_event(ViewInstalled(View(ViewId(s.local, 1), (s.local, s.b, s.c, d))))
    s.down(Message(None, b"m"))
    s.advance(0)
    got = emitted(s)
    assert sorted(dest for dest, _ in got) == sorted([PB, PC])
    assert all(msgs == [[None, 0, {}, b"m"]] for _, msgs in got)
    assert [m.payload for m in s.above.messages] == [b"m"]


def test_udp_without_ip_multicast_fans_out_too():
    s = make(kind="udp", ip_multicast=False)
    s.down_event(ViewInstalled(View(ViewId(s.local, 1), (s.local, s.b))))
    s.down(Message(None, b"m"))
    s.advance(0)
    assert [dest for dest, _ in s.host.emitted] == [PB]


def test_receive_delivers_a_batch_with_sender_and_learns_the_source():
    s = make()
    x = Address(b"\x07" * 16, "")
    data = packet(x.uid, [(None, 0, {2: [0, 1]}, b"m"), (s.local.uid, 8, {}, b"u"),
                          (s.b.uid, 0, {}, b"for B")])
    s.layer.receive(data, ("10.0.0.7", 9000))
    [batch] = s.above.batches
    assert [(m.sender, m.dest, m.flags, m.headers, m.payload) for m in batch] == [
        (x, None, 0, {2: [0, 1]}, b"m"), (x, s.local, 8, {}, b"u")]
    st = s.layer.stats
    assert st["dropped_not_for_me"] == 1
    assert st["recv_packets"] == 1 and st["recv_msgs"] == 2 and st["recv_bytes"] == len(data)
    assert s.down_event(GetPhysical(x)) == ("10.0.0.7", 9000)
    s.down(Message(x, b"reply"))
    s.advance(0)
    assert [d for d, _ in s.host.emitted] == [("10.0.0.7", 9000)]


def test_own_echo_is_dropped_and_counted():
    s = make()
    data = packet(s.local.uid, [(None, 0, {}, b"mine")])
    s.layer.receive(data, ("10.0.0.1", 7800))
    assert s.above.batches == []
    assert s.layer.stats["recv_packets"] == 0
    assert dropped(s) == 1


@pytest.mark.parametrize("data,reason", [
    (b"", "malformed"),
    (b"\xc1", "malformed"),
    (msgpack.packb([wire.VERSION, CLUSTER, b"\x07" * 16]), "malformed"),
    (msgpack.packb([wire.VERSION + 1, CLUSTER, b"\x07" * 16, []]), "wrong_version"),
    (msgpack.packb([wire.VERSION, "other", b"\x07" * 16, []]), "foreign_cluster"),
    (msgpack.packb([wire.VERSION, CLUSTER, b"\x07" * 15, []]), "malformed"),
    (msgpack.packb([wire.VERSION, CLUSTER, b"\x07" * 16, [[None, "0", {}, b""]]]), "malformed"),
    (msgpack.packb([wire.VERSION, CLUSTER, b"\x07" * 16, [[b"short", 0, {}, b""]]]), "malformed"),
    (msgpack.packb([wire.VERSION, CLUSTER, b"\x07" * 16, [[None, 0, [], b""]]]), "malformed"),
    (msgpack.packb([wire.VERSION, CLUSTER, b"\x07" * 16, [[None, 0, {}]]]), "malformed"),
], ids=lambda x: x if type(x) is str else None)
def test_invalid_packets_are_dropped_and_counted(data, reason):
    s = make()
    s.layer.receive(data, ("10.0.0.7", 9000))
    assert s.above.batches == []
    assert s.layer.stats["dropped_" + reason] == 1 and dropped(s) == 1
    assert s.layer.stats["recv_packets"] == 0
    assert s.down_event(GetPhysical(Address(b"\x07" * 16))) is None  # learnt nothing


def test_oversized_packet_dropped_before_unpacking(monkeypatch):
    monkeypatch.setattr(wire, "MAX_PACKET", 100)
    s = make()
    s.layer.receive(packet(b"\x07" * 16, [(None, 0, {}, b"x" * 200)]), None)
    assert s.layer.stats["dropped_oversized"] == 1 and s.above.batches == []


def test_emit_to_bypasses_routing():
    s = make()
    m = Message(None, b"ping", 0, {1: [0]})
    s.down_event(EmitTo(("10.9.9.9", 1), m))
    s.down_event(EmitTo(MCAST, Message(None, b"ping2")))
    s.advance(0)
    assert [d for d, _ in s.host.emitted] == [("10.9.9.9", 1), MCAST]
    assert emitted(s)[0][1] == [[None, 0, {1: [0]}, b"ping"]]
    assert s.above.batches == []  # no loopback for discovery pings


def test_physical_addresses():
    s = make()
    assert s.down_event(GetPhysical()) == s.host.local_phys
    assert s.down_event(GetPhysical(s.b)) == PB
    s.down_event(AddPhysical(s.local, ("1.2.3.4", 5)))  # never route to ourselves by address
    assert s.down_event(GetPhysical(s.local)) is None
    s.down_event(AddPhysical(s.b, ["10.0.0.22", 7800]))
    assert s.down_event(GetPhysical(s.b)) == ("10.0.0.22", 7800)
