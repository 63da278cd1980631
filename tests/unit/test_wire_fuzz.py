"""Fuzzing the receive path of a live 3-member group (simulator) and the wire format.

Garbage (random bytes, random msgpack objects, mutated real bundles, garbage headers) is
fed to one member's ``Stack.receive``. It must never raise, never count a layer error
(``stack.errors``), never break a timer afterwards, and be accounted for: the transport
counts what it drops (``dropped_*``), a layer counts a header it cannot parse.
All randomness comes from hypothesis (derandomized) or fixed simulator seeds.
"""
import logging
from collections import Counter

import msgpack
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from raygroups.stack import wire
from raygroups.stack.layer import MCAST
from raygroups.stack.sim import Simulation

CLUSTER = "fuzz"
FOREIGN = ("192.0.2.1", 9)
FUZZ = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
# for the big-input tests: report the failing example as found (shrinking rebuilds a whole
# simulated group per step: slow while a bug is open)
FUZZ_NO_SHRINK = settings(FUZZ, phases=[Phase.explicit, Phase.generate])


class RecordingSim(Simulation):
    """Keeps every packet put on the network: valid bundles to mutate."""

    def __init__(self, seed):
        super().__init__(seed)
        self.wire = []

    def _transmit(self, src, dest, data):
        self.wire.append((src, dest, data))
        super()._transmit(src, dest, data)


def group(seed=7):
    sim = RecordingSim(seed)
    ms = [sim.add_member(CLUSTER, n) for n in "ABC"]
    sim.run_until(lambda: all(m.view is not None and len(m.view) == 3 for m in ms), 10, "group")
    for i, m in enumerate(ms * 3):
        m.send(b"app%d" % i)
        m.send(b"uni%d" % i, dest=ms[(i + 1) % 3].address)
    sim.run_for(0.3)
    assert all(m.stack.errors == 0 for m in ms)
    return sim, ms


class _Raised(logging.Handler):
    """Stack.receive logs (and counts) what a layer raised: keep it to re-raise, so that
    hypothesis tells the distinct bugs apart and shows where each one is."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.errors = []

    def emit(self, record):
        if record.exc_info:
            self.errors.append(record.exc_info[1])


def counters(stack):
    c = Counter()
    for layer in stack.layers:
        for k, v in layer.stats.items():
            c[(layer.name, k)] = v
    return c


def inject(sim, ms, target, data, src=FOREIGN):
    """Feed ``data`` to ``target``; check it was handled and accounted; run timers on."""
    stack = target.stack
    before = counters(stack)
    raised, log = _Raised(), logging.getLogger("raygroups.stack")
    log.addHandler(raised)
    try:
        stack.receive(data, src)
    finally:
        log.removeHandler(raised)
    if raised.errors:
        raise raised.errors[0]  # a layer raised on this packet (stack.errors counted it)
    assert stack.errors == 0, "a layer raised on this packet"
    diff = counters(stack) - before
    try:
        sender, _ = wire.decode(data, CLUSTER)
    except wire.DecodeError as e:
        assert diff[("transport", "dropped_" + e.reason)] == 1
    else:
        if sender != stack.local.uid:
            assert diff[("transport", "recv_packets")] == 1
    sim.run_for(0.3)  # timers must survive whatever the packet did to the state
    assert all(m.stack.errors == 0 for m in ms)
    return diff


# -- strategies ---------------------------------------------------------------------------
scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
           | st.text(max_size=12) | st.binary(max_size=20))
objs = st.recursive(scalars, lambda ch: st.lists(ch, max_size=5)
                    | st.dictionaries(st.integers(-5, 10) | st.text(max_size=4), ch, max_size=4),
                    max_leaves=16)
# header values no layer can parse: not a sequence it could unpack
unparsable = (st.integers(-2**63, 2**64 - 1) | st.floats() | st.booleans()
              | st.dictionaries(st.text(min_size=1, max_size=3), objs, max_size=4))
# header values that look like a layer's header: a type tag, then anything
plausible = st.builds(lambda tag, rest: [tag, *rest], st.integers(0, 12),
                      st.lists(objs, min_size=1, max_size=7))
members = st.integers(0, 2)
# the header ids of the layers a default stack is built from
HEADER_IDS = sorted({lay.header_id for lay in
                     Simulation(0).add_member(CLUSTER, "probe").stack.layers if lay.header_id})


def bundle(sender_uid, msgs, cluster=CLUSTER):
    b = wire.Bundler(cluster, sender_uid, 1 << 20)
    for m in msgs:
        b.add(MCAST, wire.encode_message(*m))
    return b"".join(data for _, data in b.drain())


# -- the receive path ---------------------------------------------------------------------
@FUZZ
@given(data=st.binary(max_size=300), who=members)
def test_random_bytes(data, who):
    sim, ms = group()
    inject(sim, ms, ms[who], data)


@FUZZ
@given(obj=objs, who=members)
def test_random_msgpack_objects(obj, who):
    sim, ms = group()
    inject(sim, ms, ms[who], msgpack.packb(obj, use_bin_type=True))


@FUZZ
@given(msgs=st.lists(st.lists(objs, max_size=5) | objs, max_size=4), version=st.sampled_from(
    [wire.VERSION, wire.VERSION + 1, "1", None]), cluster=st.sampled_from([CLUSTER, "other", 5]),
       who=members, frm=members)
def test_random_bundles_with_a_valid_frame(msgs, version, cluster, who, frm):
    sim, ms = group()
    sender = ms[frm].address.uid if frm != who else b"\x05" * 16
    data = msgpack.packb([version, cluster, sender, msgs], use_bin_type=True)
    inject(sim, ms, ms[who], data)


@FUZZ_NO_SHRINK
@given(st.data())
def test_mutated_real_bundles(data):
    sim, ms = group()
    who = data.draw(members)
    target = ms[who]
    packets = [(src, d) for src, _, d in sim.wire if src is not target]
    src, pkt = data.draw(st.sampled_from(packets))
    pkt = bytearray(pkt)
    how = data.draw(st.sampled_from(["flip", "truncate", "extend", "splice"]))
    if how == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            pkt[data.draw(st.integers(0, len(pkt) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "truncate":
        del pkt[data.draw(st.integers(0, len(pkt) - 1)):]
    elif how == "extend":
        pkt += data.draw(st.binary(min_size=1, max_size=40))
    else:
        at = data.draw(st.integers(0, len(pkt)))
        pkt[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    inject(sim, ms, target, bytes(pkt), src.local_phys)


@FUZZ
@given(hid=st.sampled_from(HEADER_IDS), value=unparsable, who=members, frm=members,
       uni=st.booleans())
def test_unparsable_layer_header_is_counted_as_malformed(hid, value, who, frm, uni):
    sim, ms = group()
    target, sender = ms[who], ms[frm]
    dest = target.address.uid if uni else None
    data = bundle(sender.address.uid, [(dest, 0, {hid: value}, b"junk")])
    diff = inject(sim, ms, target, data, sender.local_phys)
    layer = [lay.name for lay in target.stack.layers if lay.header_id == hid][0]
    if frm == who:
        return  # own echo: dropped by the transport before any layer
    rejected = diff[(layer, "malformed_header")] + diff[(layer, "other_membership")]
    assert rejected == 1, f"{layer} did not count header {value!r}: {dict(diff)}"
    assert all(b"junk" != m.payload for m in target.delivered)


@FUZZ_NO_SHRINK
@given(headers=st.dictionaries(st.sampled_from(HEADER_IDS), plausible, min_size=1, max_size=3),
       flags=st.integers(0, 15), who=members, frm=members, uni=st.booleans(),
       payload=objs)
def test_plausible_garbage_headers_from_a_member(headers, flags, who, frm, uni, payload):
    sim, ms = group()
    target, sender = ms[who], ms[frm]
    dest = target.address.uid if uni else None
    data = bundle(sender.address.uid, [(dest, flags, headers, payload)])
    inject(sim, ms, target, data, sender.local_phys)


@FUZZ_NO_SHRINK
@given(st.data())
def test_nested_garbage_inside_real_headers(data):
    """Decode a real bundle, replace one nested element of one header with garbage."""
    sim, ms = group()
    who = data.draw(members)
    target = ms[who]
    choices = [(src, d) for src, _, d in sim.wire if src is not target]
    src, pkt = data.draw(st.sampled_from(choices))
    sender, msgs = wire.decode(pkt, CLUSTER)
    msgs = [m for m in msgs if m[2]] or msgs
    m = data.draw(st.sampled_from(msgs))
    if m[2]:
        hid = data.draw(st.sampled_from(sorted(m[2])))
        node = m[2]
        key = hid
        while type(node[key]) is list and node[key] and data.draw(st.booleans()):
            node, key = node[key], data.draw(st.integers(0, len(node[key]) - 1))
        node[key] = data.draw(objs)
    inject(sim, ms, target, bundle(sender, [m]), src.local_phys)


# -- the wire format ----------------------------------------------------------------------
finite = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=30) | st.binary(max_size=300),
    lambda ch: st.lists(ch, max_size=6) | st.dictionaries(st.integers(0, 99) | st.text(max_size=6),
                                                          ch, max_size=5),
    max_leaves=30)
messages = st.tuples(st.none() | st.binary(min_size=16, max_size=16), st.integers(0, 2**31),
                     st.dictionaries(st.integers(1, 9), finite, max_size=4), finite)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(msgs=st.lists(st.tuples(st.sampled_from(["a", "b", MCAST]), messages), max_size=25),
       max_size=st.integers(120, 3000), sender=st.binary(min_size=16, max_size=16))
def test_bundler_round_trip_and_size_bound(msgs, max_size, sender):
    b = wire.Bundler(CLUSTER, sender, max_size)
    expected = {}
    for dest, m in msgs:
        packed = wire.encode_message(*m)
        if len(packed) > b.max_message:
            continue  # the transport raises MessageTooLarge for these
        b.add(dest, packed)
        expected.setdefault(dest, []).append(list(m))
    got = {}
    for dest, data in b.drain():
        assert len(data) <= max_size
        uid, decoded = wire.decode(data, CLUSTER)
        assert uid == sender and decoded
        got.setdefault(dest, []).extend(decoded)
    assert got == expected
    for dest in got:  # exact: same types, same bytes
        assert [wire.encode_message(*m) for m in got[dest]] == \
               [wire.encode_message(*m) for m in expected[dest]]
    assert list(b.drain()) == []


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(max_size=st.integers(100, 2000), extra=st.integers(0, 3))
def test_bundler_a_message_of_exactly_max_message_fits(max_size, extra):
    b = wire.Bundler(CLUSTER, b"\x01" * 16, max_size)
    n = b.max_message - len(wire.encode_message(None, 0, {}, b""))
    packed = [wire.encode_message(None, 0, {}, b"x" * max(n - 2, 0)) for _ in range(1 + extra)]
    for p in packed:
        b.add(MCAST, p)
    bundles = list(b.drain())
    assert all(len(d) <= max_size for _, d in bundles)
    assert sum(len(wire.decode(d, CLUSTER)[1]) for _, d in bundles) == 1 + extra
