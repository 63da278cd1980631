"""The figures the queue state keeps as it goes instead of recomputing them per command
(stack/workqueue/state.py): the epoch's queue level (the lowest any member announced) and
each queue's bytes held by consumers (what ``dead_letter_oldest`` can never move). Random
command sequences, from a printed seed, compare both with a recomputation after every step,
through acquisitions, settles, purges, overflow, epochs that drop a member and restores."""
import random

import pytest

from raygroups.stack.workqueue.codec import (ACQUIRE, CONSUME, DECLARE, DEQUEUE, ENQUEUE, LEVEL,
                                             PURGE, REJECT, RELEASE)
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
