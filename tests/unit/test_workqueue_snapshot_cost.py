"""A snapshot or restore of a large queue state runs with Python's cycle collector off
(stack/workqueue/state.py): the lists and entries it makes would otherwise set off
collections that each walk every object of the member's process, which turned a donor's
snapshot of 1,000,000 messages from 0.66 s into 13.4 s, a stall for the whole group. The
collector's own callbacks count the collections that start meanwhile."""
import gc

import pytest

from raygroups.stack.workqueue.codec import CREATE, ENQUEUE
from raygroups.stack.workqueue.state import QueueState

from .test_workqueue_state import A, run


@pytest.fixture
def collections():
    started = []

    def cb(phase, info):
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(cb)
    yield started
    gc.callbacks.remove(cb)


def big_state(n: int = 30_000) -> QueueState:
    s = QueueState()
    s.begin_epoch(1, [A])
    run(s, A, [CREATE, "q", None, None, None])
    for j in range(0, n, 1000):
        run(s, A, *[[ENQUEUE, "q", k, b"m%d" % k] for k in range(j, j + 1000)])
    return s


def test_no_collection_runs_during_a_snapshot_or_a_restore(collections):
    s = big_state()
    t = QueueState()
    # at most the one that entering can set off before the collector is off (without the
    # pause: a collection every 700 new containers, dozens here)
    collections.clear()  # those that building them set off
    data = s.snapshot()
    assert len(collections) <= 1, collections
    collections.clear()
    t.restore(data)
    assert len(collections) <= 1, collections
    assert gc.isenabled()
    assert t.digest() == s.digest() and t.queues["q"].depth == 30_000


def test_the_collector_stays_off_if_it_was_off(collections):
    s = big_state(2000)
    gc.disable()
    try:
        s.snapshot()
        assert not gc.isenabled()
    finally:
        gc.enable()
