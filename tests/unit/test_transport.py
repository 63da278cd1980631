"""The transport in a sandwich: packing, bundling per destination, loopback, fan-out, and
validation of what arrives (drop and count, never raise); wire versions (the view's version
for view traffic, version 1 for the rest, bundles per destination and version)."""
import msgpack
import pytest

from raygroups.stack import StackConfig, wire
from raygroups.stack.address import Address
from raygroups.stack.errors import ConfigError, MessageTooLarge
from raygroups.stack.events import AddPhysical, EmitTo, GetPhysical, ViewInstalled
from raygroups.stack.layer import MCAST
from raygroups.stack.message import NO_LOOPBACK, Message
from raygroups.stack.sim import Simulation
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


# -- wire versions --------------------------------------------------------------------------
def versions_of(s):
    """[(dest, version)] of what was emitted, in order."""
    return [(dest, msgpack.unpackb(data, raw=False)[0]) for dest, data in s.host.emitted]


def v2_packet(sender_uid, msgs):
    b = wire.Bundler(CLUSTER, sender_uid, 60_000, version=2)
    for m in msgs:
        b.add("x", wire.encode_message(*m))
    [(_, data)] = list(b.drain())
    return data


def in_a_view_at_2(**cfg):
    """A (1, 2) transport in view {me, B} where both speak (1, 2); C is outside the view."""
    s = make(wire_versions=(1, 2), **cfg)
    s.down_event(ViewInstalled(View(ViewId(s.local, 3), (s.local, s.b),
                                    versions=((1, 2), (1, 2)))))
    return s


def test_a_version_1_reader_drops_a_version_2_bundle_and_counts_it():
    data = v2_packet(b"\x07" * 16, [(None, 0, {}, b"next")])
    assert msgpack.unpackb(data)[:2] == [2, CLUSTER] and len(msgpack.unpackb(data)) == 5
    old = make()
    old.layer.receive(data, ("10.0.0.7", 9000))
    assert old.above.batches == [] and old.layer.stats["dropped_wrong_version"] == 1
    assert dropped(old) == 1 and old.down_event(GetPhysical(Address(b"\x07" * 16))) is None
    new = make(wire_versions=(1, 2))  # reads both
    new.layer.receive(data, ("10.0.0.7", 9000))
    new.layer.receive(packet(b"\x07" * 16, [(None, 0, {}, b"base")]), ("10.0.0.7", 9000))
    assert [m.payload for m in new.above.messages] == [b"next", b"base"] and dropped(new) == 0
    # (2, 2) still reads version 1, the handshake format; a version-2 frame must be whole
    assert make(wire_versions=(2, 2)).layer.accept == {1, 2}
    bad = msgpack.packb([2, CLUSTER, b"\x07" * 16, []])  # no extensions map
    new.layer.receive(bad, None)
    assert new.layer.stats["dropped_malformed"] == 1


def test_handshake_traffic_is_version_1_and_view_traffic_at_the_views_version():
    s = make(wire_versions=(1, 2))
    s.down(Message(None, b"m"))  # not in a view yet: everything at 1
    s.down(Message(s.b, b"u"))
    s.advance(0)
    assert versions_of(s) == [(MCAST, 1), (PB, 1)] and s.layer.version == 1
    s = in_a_view_at_2()
    assert s.layer.version == 2 and s.layer.stats["version_switches"] == 1
    s.down(Message(None, b"mcast"))
    s.down(Message(s.b, b"to a member"))
    s.down(Message(s.c, b"to an outsider (JOIN_RSP, a merge, a VIEW to the excluded)"))
    s.down_event(EmitTo(("10.9.9.9", 1), Message(None, b"discovery")))
    s.down_event(EmitTo(MCAST, Message(None, b"INFO")))
    s.advance(0)
    got = {(dest, v): [m[3] for m in wire.decode(d, CLUSTER, frozenset({1, 2}))[1]]
           for (dest, v), (_, d) in zip(versions_of(s), s.host.emitted)}
    assert got == {(MCAST, 2): [b"mcast"], (PB, 2): [b"to a member"],
                   (PC, 1): [b"to an outsider (JOIN_RSP, a merge, a VIEW to the excluded)"],
                   (("10.9.9.9", 1), 1): [b"discovery"], (MCAST, 1): [b"INFO"]}


def test_bundles_are_per_destination_and_version():
    s = in_a_view_at_2()
    s.down(Message(s.b, b"u1"))
    s.down_event(EmitTo(PB, Message(None, b"ping")))  # same address, handshake format
    s.down(Message(s.b, b"u2"))
    s.advance(0)
    assert versions_of(s) == [(PB, 1), (PB, 2)]
    assert [[m[3] for m in msgs] for _, msgs in
            ((d, wire.decode(x, CLUSTER, frozenset({1, 2}))[1]) for d, x in s.host.emitted)] == \
        [[b"ping"], [b"u1", b"u2"]]
    assert s.layer.stats["sent_packets"] == 2
    # our own version-2 multicast echoed back is ours, like a version-1 one
    s.layer.receive(v2_packet(s.local.uid, [(None, 0, {}, b"mine")]), None)
    assert s.layer.stats["dropped_own"] == 1 and s.above.batches == []


def test_the_version_follows_the_installed_view():
    s = in_a_view_at_2()
    # an old member joins: the next view is at 1 (the lowest highest of its members)
    s.down_event(ViewInstalled(View(ViewId(s.local, 4), (s.local, s.b, s.c),
                                    versions=((1, 2), (1, 2), (1, 1)))))
    assert s.layer.version == 1
    # a view that drops us is not ours to speak
    s.down_event(ViewInstalled(View(ViewId(s.b, 5), (s.b,), versions=((1, 2),))))
    assert s.layer.version == 1 and s.layer.stats["version_switches"] == 2
    # a view claiming we speak what we do not: counted, we stay at 1 (which everyone reads)
    old = make()
    old.down_event(ViewInstalled(View(ViewId(old.b, 2), (old.b, old.local),
                                      versions=((1, 2), (1, 2)))))
    assert old.layer.version == 1 and old.layer.stats["views_version_unsupported"] == 1


def test_a_message_of_the_largest_size_fits_a_bundle_of_either_version():
    s = in_a_view_at_2(max_bundle_size=1000)
    n = s.layer.max_message - len(wire.encode_message(None, 0, {}, b""))
    assert s.layer.max_message == min(b.max_message for b in s.layer.bundlers.values())
    s.down(Message(None, b"x" * (n - 2)))
    s.down_event(EmitTo(MCAST, Message(None, b"y" * (n - 2))))
    s.advance(0)
    assert sorted(v for _, v in versions_of(s)) == [1, 2]
    assert all(len(d) <= 1000 for _, d in s.host.emitted) and s.layer.stats["frag_messages"] == 0


@pytest.mark.parametrize("bad", [(0, 1), (2, 1), (1, 3), ("1", 2), (True, 2), (1,), 2, None])
def test_nonsense_wire_versions_are_a_config_error(bad):
    with pytest.raises(ConfigError, match="transport.wire_versions must be"):
        StackConfig.local(transport__wire_versions=bad)
    cfg = StackConfig.local()
    cfg.transport.wire_versions = bad  # set directly: refused when the stack is built
    with pytest.raises(ConfigError):
        Simulation(0).add_member("c", "m", cfg)
    assert StackConfig.local(transport__wire_versions=[1, 2]).transport.wire_versions == (1, 2)
