"""Simulator campaigns for fragmentation and flow control, under 5% loss, duplication and
reordering.

- Large messages (1-3 MB, multicast and unicast, mixed with small ones) are reassembled
  exactly once, byte for byte, in FIFO order per sender, at every member.
- Flow control with small credits while receivers' applications block and unblock at random:
  no message is lost or duplicated, order is kept, senders do block, and no receiver ever
  holds more than the credits it granted.
- A receiver whose application stalls and which then crashes does not block the others.
"""
import hashlib

import pytest

from raygroups.stack.config import StackConfig
from raygroups.stack.sim import Simulation, SimOptions

LOSSY = SimOptions(loss=0.05, duplicate=0.02, reorder=0.05, delay_s=(0.0005, 0.005))
K = 1024


def agreed(ms):
    return all(m.view is not None and len(m.view) == len(ms) for m in ms) and \
        len({m.view.view_id for m in ms}) == 1


def fail(sim, text):
    raise AssertionError(f"{text}; reproduce with --sim-seed={sim.seed}")


def _key(entry):
    i, d, k, h = entry
    return (i, -1 if d is None else d, k, h)


class Traffic:
    """Numbered messages: payload = sender index (1 byte) + destination index (1 byte, 255 for
    a multicast) + k (4 bytes) + filler; checks exactly-once FIFO per (sender, stream) and
    content by hash."""

    def __init__(self, sim, ms):
        self.sim, self.ms = sim, ms
        self.next = {}
        self.sent = []  # (sender index, dest index or None, k, sha256)

    def send(self, i, size, dest=None):
        m = self.ms[i]
        k = self.next.get((i, dest), 0)
        self.next[(i, dest)] = k + 1
        body = bytes([i, 255 if dest is None else dest]) + k.to_bytes(4, "big")
        payload = body + self.sim.rng.randbytes(max(0, size - len(body)))
        self.sent.append((i, dest, k, hashlib.sha256(payload).digest()))
        m.send(payload, None if dest is None else self.ms[dest].address)

    def expected(self, j):
        return [(i, d, k, h) for i, d, k, h in self.sent if d is None or d == j]

    def got(self, j):
        out = []
        for msg in self.ms[j].delivered:
            # (not msg.dest: NAKACK hands a retransmitted multicast up with dest = us)
            p = msg.payload
            i, d, k = p[0], p[1], int.from_bytes(p[2:6], "big")
            out.append((i, None if d == 255 else d, k, hashlib.sha256(p).digest()))
        return out

    def done(self):
        return all(len(self.ms[j].delivered) >= len(self.expected(j))
                   for j in range(len(self.ms)))

    def check(self):
        for j in range(len(self.ms)):
            got, exp = self.got(j), self.expected(j)
            if sorted(got, key=_key) != sorted(exp, key=_key):
                fail(self.sim, f"{self.ms[j].name} delivered {len(got)} of {len(exp)} "
                               f"(or duplicates/corruption)")
            streams = {}
            for i, d, k, _ in got:
                streams.setdefault((i, d), []).append(k)
            for key, ks in streams.items():
                if ks != list(range(len(ks))):
                    fail(self.sim, f"{self.ms[j].name} stream {key} out of order: {ks[:20]}")
            if self.ms[j].stack.errors:
                fail(self.sim, f"{self.ms[j].name} had internal errors")


@pytest.mark.seeds(50)
def test_large_messages_are_reassembled_exactly_once_in_fifo_order(sim_seed):
    sim = Simulation(sim_seed, LOSSY, buggify=True)
    rng = sim.rng
    cfg = StackConfig.local(flow_control__max_credits=1024 * K)
    ms = [sim.add_member("frag", n, cfg) for n in "ABC"]
    sim.run_until(lambda: agreed(ms), 30, "3 members agree")
    t = Traffic(sim, ms)
    plan = []
    for i in (0, 1):
        for _ in range(3):
            plan.append((i, rng.randint(1024 * K, 3 * 1024 * K), rng.choice([None, None, 2 - i])))
        for _ in range(8):
            plan.append((i, rng.randint(10, 2000), rng.choice([None, 2])))
    rng.shuffle(plan)
    while plan:
        i, size, dest = plan[0]
        if ms[i].writable_to(None if dest is None else ms[dest].address):
            plan.pop(0)
            t.send(i, size, dest)
        sim.run_for(rng.uniform(0, 0.01))
    sim.run_until(t.done, 60, "everything delivered")
    sim.run_for(0.2)  # duplicates, if any, would show up now
    t.check()
    for m in ms:
        frag = m.stack.layer("frag")
        assert frag.pending_bytes == 0 and not frag.pending
        st = frag.stats
        assert not any(st[k] for k in ("dropped_over_limit", "dropped_expired",
                                       "dropped_inconsistent", "malformed_header"))
    assert sum(m.stack.layer("frag").stats["reassembled"] for m in ms) >= 6


@pytest.mark.seeds(50)
def test_flow_control_never_loses_or_duplicates_while_applications_stall(sim_seed):
    sim = Simulation(sim_seed, LOSSY, buggify=True)
    rng = sim.rng
    credits = 64 * K
    cfg = StackConfig.local(flow_control__max_credits=credits, flow_control__max_block_s=0.1)
    ms = [sim.add_member("fc", n, cfg) for n in "ABCD"]
    sim.run_until(lambda: agreed(ms), 30, "4 members agree")
    t = Traffic(sim, ms)
    blocked = [False] * 4
    for step in range(400):
        for i in (0, 1, 2):
            dest = rng.choice([None, None, None, (i + 1) % 4])
            if ms[i].writable_to(None if dest is None else ms[dest].address) and \
                    rng.random() < 0.7:
                size = rng.randint(60 * K, 100 * K) if rng.random() < 0.05 else \
                    rng.randint(100, 8 * K)  # some are fragmented
                t.send(i, size, dest)
        for j in range(4):
            if rng.random() < 0.05:
                blocked[j] = not blocked[j]
                assert ms[j].stack.set_app_blocked(blocked[j]) is True
        sim.run_for(rng.uniform(0, 0.01))
        for m in ms:  # never more held than granted
            fc = m.stack.layer("flow_control")
            for sender, r in fc.recv.items():  # (multicasts and unicasts: credits each)
                if r.mheld > credits or r.uheld > credits:
                    fail(sim, f"{m.name} holds {r.mheld} + {r.uheld} bytes of {sender}")
    for j in range(4):
        ms[j].stack.set_app_blocked(False)
    sim.run_until(t.done, 60, "everything delivered")
    sim.run_for(0.2)
    t.check()
    stats = [m.stack.layer("flow_control").stats for m in ms]
    assert all(st["dropped_over_credit"] == 0 for st in stats)
    assert sum(st["blocked"] for st in stats) > 0  # the senders did wait for credits
    assert all(not m.stack.layer("flow_control").held for m in ms)
    assert all(m.writable for m in ms)


@pytest.mark.seeds(10)
@pytest.mark.regressions(15100480)  # a refutation seen before its member was ours: live A excluded
def test_a_stalled_receiver_that_crashes_does_not_block_the_others(sim_seed):
    sim = Simulation(sim_seed, LOSSY, buggify=True)
    cfg = StackConfig.local(flow_control__max_credits=32 * K)
    ms = [sim.add_member("fc", n, cfg) for n in "ABC"]
    sim.run_until(lambda: agreed(ms), 30, "3 members agree")
    a, b, c = ms
    c.stack.set_app_blocked(True)
    t = Traffic(sim, ms)
    while a.writable:
        t.send(0, 4 * K)
        sim.run_for(0.002)
    sim.run_for(0.5)
    assert not a.writable  # blocked on C
    sim.crash(c)
    sim.run_until(lambda: a.writable and len(a.view) == 2, 30, "C excluded, A unblocked")
    for _ in range(20):
        sim.run_until(lambda: a.writable, 10, "A writable")
        t.send(0, 4 * K)
    t.ms = [a, b]
    sim.run_until(t.done, 30, "A and B got everything")
    t.check()


@pytest.mark.seeds(20)
@pytest.mark.regressions(15300059)  # a flush that overtook its view's VIEW: live A excluded
def test_flow_control_across_joins_and_leaves(sim_seed):
    """Members join and leave while senders run on small credits and applications stall: no
    sender stays blocked, the members that stay get everything once, in order; a joiner gets
    a gap-free suffix of each sender's stream."""
    sim = Simulation(sim_seed, LOSSY, buggify=True)
    rng = sim.rng
    cfg = StackConfig.local(flow_control__max_credits=48 * K, flow_control__max_block_s=0.1)
    ms = [sim.add_member("fcv", n, cfg) for n in "ABCE"]
    sim.run_until(lambda: agreed(ms), 30, "4 members agree")
    t = Traffic(sim, ms)
    a, b, c, e = ms
    d = None
    for step in range(300):
        for i in (0, 1):
            if ms[i].writable and rng.random() < 0.8:
                t.send(i, rng.randint(100, 6 * K))
        if step == 60:
            d = sim.add_member("fcv", "D", cfg)
        if step == 120:
            e.leave()
        if rng.random() < 0.05:
            x = rng.choice([a, b, c] + ([d] if d is not None and d.alive else []))
            x.stack.set_app_blocked(True)
            sim.run_for(rng.uniform(0, 0.05))
            x.stack.set_app_blocked(False)
        sim.run_for(rng.uniform(0, 0.01))
    stay = [a, b, c, d]
    sim.run_until(lambda: e.left is not None and agreed(stay), 30, "D in, E out")
    for k in range(40):  # D is in the view by now (its join may have outlasted the above)
        sim.run_until(lambda: a.writable and b.writable, 10, "A and B writable")
        t.send(k % 2, rng.randint(100, 6 * K))
        sim.run_for(0.002)
    t.ms = [a, b, c]
    sim.run_until(t.done, 60, "A, B, C got everything")
    t.check()
    assert a.writable and b.writable
    # the joiner: per sender, a gap-free run ending at the last message

    def streams():
        out = {}
        for msg in d.delivered:
            out.setdefault(msg.payload[0], []).append(int.from_bytes(msg.payload[2:6], "big"))
        return out
    sim.run_until(lambda: all(streams().get(i, [None])[-1] == t.next[(i, None)] - 1
                              for i in (0, 1)), 30, "D got the last ones")
    streams = streams()
    for i in (0, 1):
        ks = streams[i]
        last = t.next[(i, None)] - 1
        if ks != list(range(ks[0], last + 1)):
            fail(sim, f"D got {ks[:3]}..{ks[-3:]} of sender {i} (last {last})")
    assert all(m.stack.errors == 0 for m in stay)
