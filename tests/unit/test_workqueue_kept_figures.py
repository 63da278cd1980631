"""The figures the queue state keeps as it goes instead of recomputing them per command
(stack/workqueue/state.py): the epoch's queue level (the lowest any member announced), each
queue's bytes held by consumers (what ``dead_letter_oldest`` can never move), and the ages of
a TTL queue's available messages (EXPIRE pops the old ones instead of scanning the queue).
Random command sequences, from a printed seed, compare them with a recomputation (or with a
state that scans) after every step, through acquisitions, settles, purges, overflow, expiry,
epochs that drop a member and restores."""
import random

import pytest

from raygroups.stack.workqueue.codec import (ACQUIRE, CONSUME, DECLARE, DEQUEUE, ENQUEUE,
                                             EXPIRE, LEVEL, PURGE, REJECT, RELEASE)
from raygroups.stack.workqueue.state import BASE_LEVEL, LIFECYCLE_LEVEL, QueueState

from .test_workqueue_state import A, B, C, D, run


def recomputed_level(s: QueueState) -> int:
    return min((s.levels.get(m, BASE_LEVEL) for m in s.members), default=BASE_LEVEL)


def check(s: QueueState, where: str) -> None:
    assert s.level() == recomputed_level(s), where
    for q in s.queues.values():
        held = sum(len(e.body) for e in q.acquired.values())
        assert q.held_bytes == held, f"{where}: {q.name} keeps {q.held_bytes}, holds {held}"


@pytest.mark.parametrize("seed", range(20))
def test_kept_level_and_held_bytes_match_a_recomputation(seed):
    print(f"seed {seed}")
    rnd = random.Random(seed)
    members = [A, B, C, D]
    s = QueueState()
    s.begin_epoch(1, members[:3])
    epoch, pseq = 1, 0
    for m in members[:3]:
        run(s, m, [LEVEL, rnd.choice((BASE_LEVEL, LIFECYCLE_LEVEL))])
    run(s, A, [LEVEL, LIFECYCLE_LEVEL], [LEVEL, LIFECYCLE_LEVEL])
    for name, overflow in (("q", "dead_letter_oldest"), ("r", "reject_publish")):
        run(s, A, [DECLARE, name, "dead", 12, 600, overflow, None])
    held: list = []  # (member, queue, mid, token)
    for step in range(300):
        where = f"seed {seed} step {step}"
        op = rnd.random()
        live = s.members
        m = rnd.choice(live)
        name = rnd.choice(("q", "r"))
        if op < 0.35:
            pseq += 1
            run(s, m, [ENQUEUE, name, pseq, b"x" * rnd.randint(0, 120)])
        elif op < 0.55:
            run(s, m, [CONSUME, name])
            [(_, got)] = run(s, m, [ACQUIRE, name, rnd.randint(1, 4)])
            held += [(m, name, e.mid, (e.tepoch, e.tok)) for e in got or ()]
        elif op < 0.75 and held:
            who, qn, mid, tok = held.pop(rnd.randrange(len(held)))
            run(s, who, [rnd.choice((RELEASE, DEQUEUE, REJECT)), qn, mid[0], mid[1], *tok])
        elif op < 0.8:
            run(s, m, [PURGE, name])
        elif op < 0.88:
            run(s, m, [LEVEL, rnd.choice((BASE_LEVEL, LIFECYCLE_LEVEL))])
        elif op < 0.95:
            epoch += 1
            s.begin_epoch(epoch, sorted(rnd.sample(members, rnd.randint(1, 4))))
            held = [h for h in held if h[0] in s.members]
        else:
            t = QueueState()
            t.restore(s.snapshot())
            assert t.digest() == s.digest(), where
            s = t
        check(s, where)


def test_a_level_announced_after_an_epoch_began_counts_only_for_its_members():
    s = QueueState()
    s.begin_epoch(1, [A, B])
    assert s.level() == BASE_LEVEL
    run(s, A, [LEVEL, LIFECYCLE_LEVEL])
    assert s.level() == BASE_LEVEL  # B has not announced
    run(s, C, [LEVEL, LIFECYCLE_LEVEL])  # not a member: ignored
    assert s.level() == BASE_LEVEL
    run(s, B, [LEVEL, LIFECYCLE_LEVEL])
    assert s.level() == LIFECYCLE_LEVEL
    s.begin_epoch(2, [A, B])
    assert s.level() == BASE_LEVEL  # every epoch announces again


class Scanning(QueueState):
    """The reference: EXPIRE as a scan of every available message."""

    def _expire(self, q, now):
        old = []
        for e in q.avail.values():
            if e.ts is None:
                e.ts = now
            elif now - e.ts >= q.ttl_s:
                old.append(e)
        self._expired(q, old)


@pytest.mark.parametrize("seed", range(30))
def test_expire_by_ages_equals_a_scan_of_every_available_message(seed):
    """The same commands to a state that scans and to one that keeps ``ages``: the same
    state (digest) and the same events after every step, with publishers' timestamps out
    of order, unstamped messages (moved to a queue with a TTL), holds, releases, purges,
    epochs and restores."""
    print(f"seed {seed}")
    rnd = random.Random(seed)
    states = [QueueState(), Scanning()]
    logs: list = [[], []]
    for s, log in zip(states, logs):
        s.listener = log.append
        s.begin_epoch(1, [A, B])
        run(s, A, [LEVEL, LIFECYCLE_LEVEL])
        run(s, B, [LEVEL, LIFECYCLE_LEVEL])
        run(s, A, [DECLARE, "dead", None, None, None, "reject_publish", 3.0])
        run(s, A, [DECLARE, "q", "dead", 40, None, "dead_letter_oldest", 2.0])
    now, pseq, held = 100.0, 0, []
    for step in range(400):
        op = rnd.random()
        m = rnd.choice((A, B))
        name = rnd.choice(("q", "q", "dead"))
        if op < 0.4:
            pseq += 1
            cmd = [ENQUEUE, name, pseq, b"m%d" % pseq] + \
                ([now - rnd.uniform(-0.5, 3.0)] if rnd.random() < 0.8 else [])
            outs = [run(s, m, cmd) for s in states]
        elif op < 0.55:
            n = rnd.randint(1, 3)
            outs = [run(s, m, [CONSUME, name], [ACQUIRE, name, n]) for s in states]
            held += [(m, name, e.mid, (e.tepoch, e.tok)) for e in outs[0][1][1] or ()]
            outs = [[(c, [x.mid for x in d or ()]) for c, d in o] for o in outs]
        elif op < 0.7 and held:
            who, qn, mid, tok = held.pop(rnd.randrange(len(held)))
            cmd = [rnd.choice((RELEASE, RELEASE, DEQUEUE, REJECT)), qn, mid[0], mid[1], *tok]
            outs = [run(s, who, cmd) for s in states]
        elif op < 0.9:
            now += rnd.uniform(0.0, 1.0)
            outs = [run(s, A, [EXPIRE, now]) for s in states]
        elif op < 0.93:
            outs = [run(s, m, [PURGE, name]) for s in states]
        elif op < 0.97:
            for s in states:
                s.begin_epoch(s.epoch + 1, [A, B])
                run(s, A, [LEVEL, LIFECYCLE_LEVEL])
                run(s, B, [LEVEL, LIFECYCLE_LEVEL])
            held, outs = [], [None, None]
        else:
            for i, s in enumerate(states):
                t = type(s)()
                t.restore(s.snapshot())
                t.listener = logs[i].append
                states[i] = t
            outs = [None, None]
        where = f"seed {seed} step {step}"
        assert outs[0] == outs[1], where
        assert states[0].digest() == states[1].digest(), where
        assert logs[0] == logs[1], where
        check(states[0], where)
    assert any(ev[0] == "expire" for ev in logs[0]), "the sequence never expired anything"


def test_the_lazy_heaps_stay_bounded_on_a_queue_nobody_consumes():
    """Messages expired (or overflowed) off a queue with no consumer are never popped from
    its heaps: they are dropped once stale entries are most of them."""
    s = QueueState()
    s.begin_epoch(1, [A])
    run(s, A, [LEVEL, LIFECYCLE_LEVEL])
    run(s, A, [DECLARE, "q", None, 50, None, "dead_letter_oldest", 1.0])
    q = s.queues["q"]
    for i in range(5000):
        run(s, A, [ENQUEUE, "q", i, b"x", float(i)])
        if i % 10 == 0:
            run(s, A, [EXPIRE, float(i)])
        assert len(q.heap) <= 2 * q.available + 64 and len(q.ages) <= 2 * q.available + 64
    assert q.counters[6] > 4000  # expired (dropped: no alternate)
