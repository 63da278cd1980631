"""Fuzzing authenticated traffic, and authenticated groups in the simulator.

Tampered bytes, wrong keys, replays, unsealed packets (JOIN requests and discovery pings
included) fed to a keyed member are dropped and counted, never raised, never delivered; a
group whose members hold the key forms and works, a member with a wrong key (or none) cannot
join it; key rings in every step of a rotation form one group. Hypothesis runs derandomized.
"""
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raygroups.stack import wire
from raygroups.stack.auth import Auth
from raygroups.stack.config import StackConfig
from raygroups.stack.gms import JOIN_REQ
from raygroups.stack.message import CONTROL
from raygroups.stack.sim import Simulation, SimOptions

CLUSTER = "authfuzz"
KEY = b"the cluster key"
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


class RecordingSim(Simulation):
    def __init__(self, seed, options=None):
        super().__init__(seed, options)
        self.wire = []

    def _transmit(self, src, dest, data):
        self.wire.append((src, dest, data))
        super()._transmit(src, dest, data)


def cfg(key=KEY, mode="hmac", **kw):
    return StackConfig.local(cluster_key=key, auth_mode=mode, **kw)


def formed(ms, n):
    return all(m.view is not None and len(m.view) == n for m in ms) and \
        len({m.view.view_id for m in ms}) == 1


_groups = {}


def keyed_group(mode):
    """A 3-member keyed group (built once per mode) with some traffic recorded."""
    if mode not in _groups:
        sim = RecordingSim(11)
        ms = [sim.add_member(CLUSTER, n, cfg(mode=mode)) for n in "ABC"]
        sim.run_until(lambda: formed(ms, 3), 10, "keyed group")
        for i in range(6):
            ms[i % 3].send(b"app%d" % i)
        sim.run_for(0.3)
        _groups[mode] = (sim, ms)
    return _groups[mode]


def dropped(m):
    return sum(v for k, v in m.stack.transport.stats.items() if k.startswith("dropped_"))


class _Raised(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def feed(m, data):
    """Feed one packet to ``m``; return (delivered messages, dropped count) it caused."""
    h = _Raised()
    log = logging.getLogger("raygroups.stack")
    log.addHandler(h)
    try:
        n, d = len(m.delivered), dropped(m)
        m.stack.receive(data, ("192.0.2.1", 9))
    finally:
        log.removeHandler(h)
    assert not h.records and m.stack.errors == 0
    return m.delivered[n:], dropped(m) - d


def packets_to(sim, m):
    """Sealed packets recorded on their way to ``m`` (unicasts to it and multicasts)."""
    return [d for src, dest, d in sim.wire
            if src is not m and (dest == "mcast" or tuple(dest) == m.local_phys)]


# -- fuzz ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["hmac", "aesgcm"])
@FUZZ
@given(data=st.binary(max_size=3000))
def test_random_bytes_are_dropped_and_counted(mode, data):
    _, (a, _, _) = keyed_group(mode)
    got, d = feed(a, data)
    assert got == [] and d == 1


@pytest.mark.parametrize("mode", ["hmac", "aesgcm"])
@FUZZ
@given(pick=st.integers(0, 10 ** 6), edits=st.lists(
    st.tuples(st.sampled_from(["flip", "cut", "add", "set"]), st.integers(0, 10 ** 6),
              st.integers(1, 255)), min_size=1, max_size=4))
def test_tampered_packets_are_dropped(mode, pick, edits):
    sim, (a, b, c) = keyed_group(mode)
    pkts = packets_to(sim, a)
    orig = pkts[pick % len(pkts)]
    data = bytearray(orig)
    for op, pos, val in edits:
        i = pos % max(len(data), 1)
        if op == "flip" and data:
            data[i] ^= val
        elif op == "set" and data:
            data[i] = val
        elif op == "cut":
            del data[i:]
        else:
            data[i:i] = bytes([val])
    data = bytes(data)
    if data == orig:
        return
    got, d = feed(a, data)
    assert got == [] and d == 1


@pytest.mark.parametrize("mode", ["hmac", "aesgcm"])
@FUZZ
@given(key=st.binary(min_size=1, max_size=64), body=st.binary(max_size=200))
def test_any_other_key_is_refused(mode, key, body):
    _, (a, b, _) = keyed_group(mode)
    if key == KEY:
        return
    # a well-formed bundle, sealed as B but with another key
    bundler = wire.Bundler(CLUSTER, b.address.uid, 60_000)
    bundler.add("x", wire.encode_message(None, 0, {}, body))
    [(_, bundle)] = list(bundler.drain())
    forger = Auth(key, mode, b.address.uid)
    forger.counter = 10 ** 9  # far ahead: the window is no excuse
    got, d = feed(a, forger.seal(bundle))
    assert got == [] and d == 1 and a.stack.transport.stats["dropped_auth"] >= 1


@pytest.mark.parametrize("mode", ["hmac", "aesgcm"])
@FUZZ
@given(order=st.lists(st.integers(0, 19), min_size=1, max_size=60))
def test_replays_deliver_each_packet_at_most_once(mode, order):
    sim = Simulation(3)
    a = sim.add_member(CLUSTER, "A", cfg(mode=mode), start=False)
    a._boot()
    sender = Auth(KEY, mode, b"\x42" * 16)
    pkts = []
    for i in range(20):
        bundler = wire.Bundler(CLUSTER, sender.local_uid, 60_000)
        bundler.add("x", wire.encode_message(None, CONTROL, {}, b"p%d" % i))
        [(_, bundle)] = list(bundler.drain())
        pkts.append(sender.seal(bundle))
    tr = a.stack.transport
    seen = set()
    for i in order:
        before = tr.stats["recv_packets"]
        a.stack.receive(pkts[i], ("192.0.2.1", 9))
        opened = tr.stats["recv_packets"] - before
        assert opened == (0 if i in seen else 1)
        seen.add(i)
    assert tr.stats["dropped_replay"] == len(order) - len(seen)
    assert a.stack.errors == 0


# -- unauthenticated JOIN requests and discovery pings ------------------------------------
def join_req_bundle(sim, coord, uid=b"\x33" * 16):
    bundler = wire.Bundler(CLUSTER, uid, 60_000)
    bundler.add("x", wire.encode_message(coord.address.uid, CONTROL,
                                         {5: [JOIN_REQ, "X", ["10.9.9.9", 7800],
                                              coord.stack.layer("gms").config.agreed]}, b""))
    [(_, bundle)] = list(bundler.drain())
    return bundle


@pytest.mark.parametrize("mode", ["hmac", "aesgcm"])
def test_unauthenticated_or_wrongly_keyed_join_requests_are_dropped(mode):
    sim = Simulation(5)
    ms = [sim.add_member(CLUSTER, n, cfg(mode=mode)) for n in "AB"]
    sim.run_until(lambda: formed(ms, 2), 10, "group")
    coord = next(m for m in ms if m.address == m.view.coordinator)
    tr = coord.stack.transport
    bundle = join_req_bundle(sim, coord)
    coord.stack.receive(bundle, ("10.9.9.9", 7800))                    # no seal at all
    coord.stack.receive(Auth(b"wrong", mode, b"\x33" * 16).seal(bundle), ("10.9.9.9", 7800))
    sim.run_for(1.0)
    assert tr.stats["dropped_unauthenticated"] >= 1 and tr.stats["dropped_auth"] >= 1
    assert all(len(m.view) == 2 for m in ms)
    assert coord.stack.layer("gms").stats["views_sent"] == 1  # only the one that formed it
    # the same request sealed with the key is accepted: the packet itself was valid
    coord.stack.receive(Auth(KEY, mode, b"\x33" * 16).seal(bundle), ("10.9.9.9", 7800))
    sim.run_until(lambda: any(len(m.view) == 3 for m in ms), 5, "sealed join accepted")


@pytest.mark.parametrize("intruder_key", [None, b"wrong key"], ids=["no-key", "wrong-key"])
@pytest.mark.parametrize("mode", ["hmac", "aesgcm"])
def test_keyed_group_forms_and_an_intruder_cannot_join(mode, intruder_key):
    sim = Simulation(17, SimOptions(loss=0.02, reorder=0.02))
    ms = [sim.add_member(CLUSTER, n, cfg(mode=mode)) for n in "ABC"]
    sim.run_until(lambda: formed(ms, 3), 20, "keyed group")
    icfg = StackConfig.local() if intruder_key is None else cfg(intruder_key, mode)
    x = sim.add_member(CLUSTER, "X", icfg)
    for i in range(30):
        ms[i % 3].send(b"m%d" % i)
        x.send(b"intruder%d" % i) if x.view is not None else None
        sim.run_for(0.05)
    sim.run_for(3.0)
    assert formed(ms, 3)
    assert x.view is not None and [a.name for a in x.view.members] == ["X"]  # alone
    for m in ms:
        assert x.address not in m.view
        assert sorted(p for p in (mm.payload for mm in m.delivered)) == \
            sorted(b"m%d" % i for i in range(30))
    reason = "dropped_unauthenticated" if intruder_key is None else "dropped_auth"
    assert sum(m.stack.transport.stats[reason] for m in ms) > 0  # its pings, counted
    assert all(m.stack.errors == 0 for m in ms + [x])


def test_members_in_every_step_of_a_key_rotation_form_one_group():
    old, new = b"old cluster key", b"new cluster key"
    sim = Simulation(23, SimOptions(loss=0.02))
    rings = {"A": [old, new], "B": [new, old], "C": [old, new], "D": [new, old]}
    ms = [sim.add_member(CLUSTER, n, cfg(r)) for n, r in rings.items()]
    sim.run_until(lambda: formed(ms, 4), 20, "group across rotation steps")
    for i, m in enumerate(ms):
        m.send(b"r%d" % i)
    sim.run_for(1.0)
    for m in ms:
        assert sorted(x.payload for x in m.delivered) == [b"r0", b"r1", b"r2", b"r3"]


def test_rolling_key_rotation_keeps_the_group_working():
    """The documented procedure, one member at a time (a rolling restart per step):
    [old] -> [old, new] -> [new, old] -> [new]."""
    old, new = b"old cluster key", b"new cluster key"
    sim = Simulation(29)
    ms = [sim.add_member(CLUSTER, n, cfg([old])) for n in "ABC"]
    sim.run_until(lambda: formed(ms, 3), 20, "group")
    tag = 0
    for ring in ([old, new], [new, old], [new]):
        for m in ms:
            m.leave()
            sim.run_until(lambda: not m.alive, 20, f"{m.name} left")
            m.config = cfg(ring)
            m._boot()
            sim.run_until(lambda: formed(ms, 3), 20, f"{m.name} back with {len(ring)} keys")
            tag += 1
            payload = b"tag%d" % tag
            ms[tag % 3].send(payload)
            sim.run_until(lambda: all(any(x.payload == payload for x in mm.delivered[-5:])
                                      for mm in ms), 5, f"{payload!r} everywhere")
    assert all(m.stack.transport.auth.send_id == ms[0].stack.transport.auth.send_id
               for m in ms)
    assert all(len(m.stack.transport.auth.ring) == 1 for m in ms)
