"""FAULTS alone between a recording transport and a recording upper layer, on a manual clock:
each fault, the counters, loopback protection, runtime control and determinism."""
import heapq
import random

import pytest

from raygroups.stack.address import Address
from raygroups.stack.events import EmitTo, GetPhysical
from raygroups.stack.faults import FaultConfig, Faults
from raygroups.stack.layer import MCAST, Context, Layer
from raygroups.stack.message import NO_LOOPBACK, Message


class _Timer:
    cancelled = False

    def cancel(self):
        self.cancelled = True


class Host:
    """Manual clock and timer heap."""

    def __init__(self):
        self.t, self.seq, self.heap = 0.0, 0, []
        self.local_phys = ("10.0.0.1", 7800)

    def now(self):
        return self.t

    def call_later(self, delay, fn):
        timer = _Timer()
        self.seq += 1
        heapq.heappush(self.heap, (self.t + delay, self.seq, fn, timer))
        return timer

    def run(self, until=float("inf")):
        while self.heap and self.heap[0][0] <= until:
            self.t, _, fn, timer = heapq.heappop(self.heap)
            if not timer.cancelled:
                fn()
        self.t = max(self.t, until) if until != float("inf") else self.t


class Below(Layer):
    def __init__(self):
        super().__init__()
        self.sent, self.events = [], []  # (time, msg), (time, event)

    def down(self, msg):
        self.sent.append((self.ctx.now(), msg))

    def down_event(self, ev):
        self.events.append((self.ctx.now(), ev))
        return "phys" if type(ev) is GetPhysical else None


class Above(Layer):
    def __init__(self):
        super().__init__()
        self.batches = []  # (time, batch)

    def up(self, batch):
        assert type(batch) is list and batch, "empty or non-list batch passed up"
        self.batches.append((self.ctx.now(), batch))

    @property
    def got(self):
        return [m for _, b in self.batches for m in b]


class Sandwich:
    def __init__(self, seed=1, **cfg):
        self.host = Host()
        self.local, self.b, self.c = (Address(bytes([i]) * 16, n) for i, n in ((1, "A"), (2, "B"),
                                                                                (3, "C")))
        self.rng = random.Random(seed)
        self.ctx = Context(self.host, self.local, "cl", self.rng, lambda text: None)
        self.faults, self.below, self.above = Faults(FaultConfig(**cfg)), Below(), Above()
        self.faults.below, self.faults.above = self.below, self.above
        self.below.above = self.above.below = self.faults
        for layer in (self.below, self.faults, self.above):
            layer.init(self.ctx)

    def up(self, *msgs):
        self.faults.up(list(msgs))

    def run(self, until=float("inf")):
        self.host.run(until)

    @property
    def stats(self):
        return dict(self.faults.stats)


def msg(sender, payload, dest=None, flags=0):
    return Message(dest, payload, flags, {2: [0, payload]}, sender)


def payloads(msgs):
    return [m.payload for m in msgs]


# -- no faults ------------------------------------------------------------------------------
def test_defaults_pass_everything_unchanged_without_touching_the_rng():
    s = Sandwich()
    state = s.rng.getstate()
    batch = [msg(s.b, i) for i in range(5)]
    s.faults.up(batch)
    m = Message(s.c, b"u")
    s.faults.down(m)
    s.faults.down(Message(None, b"mc"))
    s.run()
    assert s.above.batches == [(0.0, batch)]
    assert [x for _, x in s.below.sent][0] is m and len(s.below.sent) == 2
    assert s.rng.getstate() == state and s.stats == {}


def test_other_events_pass_with_their_answer():
    s = Sandwich(drop_down=1.0)
    assert s.faults.down_event(GetPhysical()) == "phys"


# -- drops ----------------------------------------------------------------------------------
def test_drop_up_by_probability_counts_and_never_passes_empty_batches():
    s = Sandwich(seed=3, drop_up=0.3)
    for i in range(200):
        s.up(msg(s.b, 2 * i), msg(s.c, 2 * i + 1))
    got = len(s.above.got)
    assert s.stats["dropped_up"] == 400 - got
    assert 220 < got < 340
    s = Sandwich(drop_up=1.0)
    s.up(msg(s.b, 1), msg(s.c, 2))
    assert s.above.batches == [] and s.stats == {"dropped_up": 2}


def test_drop_down_by_probability_and_own_multicast_still_loops_back():
    s = Sandwich(drop_down=1.0)
    s.faults.down(Message(s.b, b"u"))
    mc = Message(None, b"mc")
    s.faults.down(mc)
    s.faults.down(Message(None, b"no-loop", NO_LOOPBACK))
    to_self = Message(s.local, b"self")
    s.faults.down(to_self)
    s.faults.down_event(EmitTo(MCAST, Message(None, b"ping")))
    s.run()
    assert [x for _, x in s.below.sent] == [to_self] and s.below.events == []
    assert s.above.got == [mc] and mc.sender == s.local
    assert s.stats == {"dropped_down": 4}


def test_drop_down_probability_applies_per_message():
    s = Sandwich(seed=5, drop_down=0.25)
    for i in range(400):
        s.faults.down(Message(s.b, i))
    assert 60 < s.stats["dropped_down"] < 140
    assert len(s.below.sent) == 400 - s.stats["dropped_down"]


def test_drop_from_cuts_one_peer_never_loopback_and_heal_restores():
    s = Sandwich()
    s.faults.drop_from(s.b)
    s.up(msg(s.b, 1), msg(s.c, 2))
    s.up(msg(s.local, 3))
    assert payloads(s.above.got) == [2, 3] and s.stats == {"dropped_up": 1}
    s.faults.heal()
    s.up(msg(s.b, 4))
    assert payloads(s.above.got) == [2, 3, 4]


def test_drop_to_cuts_unicasts_only():
    s = Sandwich()
    s.faults.drop_to(s.b, s.c)
    s.faults.down(Message(s.b, b"to b"))
    s.faults.down(Message(s.c, b"to c"))
    s.faults.down(Message(None, b"mc"))
    assert payloads(x for _, x in s.below.sent) == [b"mc"]
    assert s.stats == {"dropped_down": 2}
    s.faults.heal()
    s.faults.down(Message(s.b, b"again"))
    assert payloads(x for _, x in s.below.sent) == [b"mc", b"again"]


def test_isolate_drops_all_but_loopback_and_heal_restores():
    s = Sandwich()
    s.faults.isolate()
    s.up(msg(s.b, 1), msg(s.c, 2))
    s.up(msg(s.local, 3))
    s.faults.down(Message(s.b, b"u"))
    s.faults.down(Message(None, b"mc"))
    s.faults.down(Message(s.local, b"self"))
    s.faults.down_event(EmitTo(("10.0.0.2", 7800), Message(None, b"ping")))
    s.run()
    assert payloads(s.above.got) == [3, b"mc"]
    assert payloads(x for _, x in s.below.sent) == [b"self"] and s.below.events == []
    assert s.stats == {"dropped_up": 2, "dropped_down": 3}
    s.faults.heal()
    s.up(msg(s.b, 4))
    s.faults.down(Message(s.b, b"u2"))
    s.faults.down_event(EmitTo(MCAST, Message(None, b"ping2")))
    assert payloads(s.above.got)[-1] == 4
    assert payloads(x for _, x in s.below.sent)[-1] == b"u2"
    assert [(t, e.phys, e.msg.payload) for t, e in s.below.events] == [(0.0, MCAST, b"ping2")]


def test_cuts_act_at_once_on_already_delayed_messages():
    s = Sandwich(delay_up_s=(1.0, 2.0), delay_down_s=(1.0, 2.0))
    s.up(msg(s.b, 1), msg(s.c, 2))
    s.faults.down(Message(s.b, b"u"))
    s.faults.down(Message(None, b"mc"))
    s.faults.drop_from(s.b)
    s.faults.isolate()
    s.run()
    assert payloads(s.above.got) == [b"mc"]  # the multicast's local copy only
    assert s.below.sent == []
    assert s.stats == {"delayed": 4, "dropped_up": 2, "dropped_down": 2}


# -- delay, duplication, reordering ---------------------------------------------------------
def test_delay_up_delivers_each_message_alone_within_the_range_and_lets_them_overtake():
    s = Sandwich(seed=7, delay_up_s=(0.1, 0.5))
    s.faults.up([msg(s.b, i) for i in range(50)])
    assert s.above.batches == []
    s.run()
    assert all(len(b) == 1 and 0.1 <= t <= 0.5 for t, b in s.above.batches)
    got = payloads(s.above.got)
    assert sorted(got) == list(range(50)) and got != list(range(50))
    assert s.stats == {"delayed": 50}


def test_delay_down_sends_later_from_the_timer():
    s = Sandwich(seed=8, delay_down_s=(0.2, 0.3))
    for i in range(20):
        s.faults.down(Message(s.b, i))
    s.faults.down_event(EmitTo(MCAST, Message(None, b"ping")))
    assert s.below.sent == [] and s.below.events == []
    s.run()
    assert all(0.2 <= t <= 0.3 for t, _ in s.below.sent + s.below.events)
    assert sorted(payloads(x for _, x in s.below.sent)) == list(range(20))
    assert s.below.events[0][1].msg.payload == b"ping" and s.stats == {"delayed": 21}


def test_duplicate_passes_an_independent_copy_in_both_directions():
    s = Sandwich(duplicate=1.0)
    m = msg(s.b, 1)
    s.up(m)
    (_, (a, b)), = s.above.batches
    assert a is m and b is not m and b.headers is not m.headers
    assert (b.sender, b.dest, b.flags, b.payload, b.headers) == (m.sender, m.dest, m.flags,
                                                                 m.payload, m.headers)
    s.faults.down(Message(s.c, b"u", 0, {3: [0, 1, 1]}))
    (_, x), (_, y) = s.below.sent
    assert x is not y and (y.dest, y.payload, y.headers) == (x.dest, x.payload, x.headers)
    assert s.stats == {"duplicated": 2}


def test_duplicate_by_probability():
    s = Sandwich(seed=11, duplicate=0.1)
    s.faults.up([msg(s.b, i) for i in range(1000)])
    assert 60 < s.stats["duplicated"] < 140
    assert len(s.above.got) == 1000 + s.stats["duplicated"]


def test_shuffle_reorders_a_batch_and_keeps_every_message():
    s = Sandwich(seed=2, shuffle=1.0)
    s.up(msg(s.b, 0))  # a single message: nothing to shuffle, not counted
    s.faults.up([msg(s.b, i) for i in range(1, 21)])
    (_, first), (_, second) = s.above.batches
    assert payloads(first) == [0]
    assert sorted(payloads(second)) == list(range(1, 21)) and payloads(second) != list(range(1, 21))
    assert s.stats == {"reordered": 1}


def test_shuffle_leaves_loopback_alone():
    s = Sandwich(seed=2, shuffle=1.0)
    s.faults.up([msg(s.local, i) for i in range(20)])
    assert payloads(s.above.got) == list(range(20)) and s.stats == {}


def test_hold_back_lets_later_messages_overtake_in_both_directions():
    s = Sandwich(seed=4, hold_back=0.3, hold_back_s=0.05)
    s.faults.up([msg(s.b, i) for i in range(100)])
    for i in range(100):
        s.faults.down(Message(s.c, i))
    held = s.stats["reordered"]
    now_up, now_down = len(s.above.got), len(s.below.sent)
    assert 200 - held == now_up + now_down and 30 < held < 90
    s.run()
    for got in (payloads(s.above.got), payloads(x for _, x in s.below.sent)):
        assert sorted(got) == list(range(100)) and got != list(range(100))
    assert max(t for t, _ in s.above.batches + s.below.sent) <= 0.05
    assert "delayed" not in s.stats


def test_config_changes_act_at_once():
    s = Sandwich()
    s.up(msg(s.b, 1))
    s.faults.config.drop_up = 1.0
    s.up(msg(s.b, 2))
    s.faults.config.drop_up = 0.0
    s.up(msg(s.b, 3))
    assert payloads(s.above.got) == [1, 3]


# -- determinism ----------------------------------------------------------------------------
def trace(seed):
    s = Sandwich(seed=seed, drop_up=0.2, drop_down=0.2, delay_up_s=(0, 0.01),
                 delay_down_s=(0, 0.01), duplicate=0.1, shuffle=0.5, hold_back=0.1)
    for i in range(50):
        s.faults.up([msg(s.b, (i, j)) for j in range(4)])
        s.faults.down(Message(s.c, i))
        s.faults.down(Message(None, -i))
        s.run(s.host.t + 0.002)
    s.run()
    return ([(t, payloads(b)) for t, b in s.above.batches],
            [(t, x.payload) for t, x in s.below.sent], s.stats)


@pytest.mark.parametrize("seed", [0, 1, 99])
def test_same_seed_same_run(seed):
    assert trace(seed) == trace(seed)


def test_different_seeds_differ():
    assert trace(1) != trace(2)
