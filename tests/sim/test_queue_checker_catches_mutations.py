"""The queue history checker can fail: each deliberate mutation of the
work queue's lifecycle (and of the streamed update, and of the journal's acknowledgements) makes ``QueueHistory.check`` report a violation on the lifecycle
campaign's schedule (tests/sim/test_workqueue_lifecycle_sim.py) within a few seeds, while
the same schedules pass unmutated (that campaign's own test)."""
import pytest

from raygroups.stack.workqueue.codec import ENQUEUE, EXPIRE, PURGE
from raygroups.stack.workqueue.replica import Replica
from raygroups.stack.workqueue.state import FULL, OK, Queue, QueueState

from .test_workqueue_lifecycle_sim import lifecycle_history
from . import test_durable_queue_sim as durable_campaign
from . import test_workqueue_sim as queue_campaign

SEEDS = range(6)


def _purge_only_at_its_sender(apply):
    """PURGE applied by the member that sent it and dropped by every other replica."""
    def patched(self, sender, obj, *raw):
        if sender != self.uid and type(obj[2]) is list:
            obj = [obj[0], obj[1], [c for c in obj[2] if not (type(c) is list and len(c) > 1
                                                              and c[1] == PURGE)]]
        apply(self, sender, obj, *raw)
    return patched


def _expire_by_the_local_clock(apply):
    """Every replica expires by its own wall clock when it applies EXPIRE, not by the
    cut-off the command carries."""
    def patched(self, sender, obj, *raw):
        if type(obj[2]) is list:
            obj = [obj[0], obj[1], [[c[0], EXPIRE, self.wall()] if type(c) is list and
                                    len(c) > 1 and c[1] == EXPIRE else c for c in obj[2]]]
        apply(self, sender, obj, *raw)
    return patched


def _limits_before_duplicates(one):
    """ENQUEUE checks the queue's limits before it looks for the same message."""
    def patched(self, sender, c):
        if type(c) is list and len(c) > 4 and c[1] == ENQUEUE:
            q = self.queues.get(c[2])
            if q is not None and type(c[4]) is bytes and \
                    (len(q.msgs) >= q.max_depth or q.bytes + len(c[4]) > q.max_bytes):
                return FULL, None
        return one(self, sender, c)
    return patched


def _purge_reported_not_done(lifecycle):
    """PURGE reports what it removes (its events, its count) and removes nothing."""
    def patched(self, op, c):
        q = self.queues.get(c[2]) if op == PURGE else None
        if q is None:
            return lifecycle(self, op, c)
        gone = sorted(q.avail.values(), key=lambda e: e.pos)
        for e in gone:
            if self.listener:
                self.listener(("purge", q.name, e.mid))
        return OK, len(gone)
    return patched


MUTATIONS = [
    # (what it breaks, what the checker reports, the mutation)
    ("purge on one replica", ("replicas disagree", "although it was purged"),
     lambda mp: mp.setattr(Replica, "_apply", _purge_only_at_its_sender(Replica._apply))),
    ("ttl by the local clock", ("replicas disagree",),
     lambda mp: mp.setattr(Replica, "_apply", _expire_by_the_local_clock(Replica._apply))),
    ("duplicate check after the limits", ("was refused as full",),
     lambda mp: mp.setattr(QueueState, "_one", _limits_before_duplicates(QueueState._one))),
    ("a purge that removes nothing", ("although it was purged",),
     lambda mp: mp.setattr(QueueState, "_lifecycle",
                           _purge_reported_not_done(QueueState._lifecycle))),
]


@pytest.mark.parametrize("what,texts,mutate", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_mutation_of_the_lifecycle_fails_the_queue_checker(monkeypatch, what, texts, mutate):
    mutate(monkeypatch)
    for seed in SEEDS:
        try:
            h, drivers = lifecycle_history(seed)
        except AssertionError:
            continue  # the schedule stalled (no verdict of the checker's): the next seed
        try:
            h.check([d.replica for d in drivers])
        except AssertionError as e:
            assert any(t in str(e) for t in texts), f"{what}: failed otherwise: {e}"
            print(f"{what}: seed {seed}: {str(e)[:200]}")
            return
    raise AssertionError(f"the queue checker missed '{what}' on seeds {SEEDS}")


def test_a_donor_without_copy_on_write_fails_the_queue_campaign(monkeypatch):
    """The streamed update sends the donor's state frozen as the epoch began; a donor that
    keeps no image of the entries it changes meanwhile sends a mix of two states, and the
    main queue campaign test (tests/sim/test_workqueue_sim.py) catches it within a few
    seeds."""
    monkeypatch.setattr(Queue, "keep", lambda self, e: None)
    for seed in range(1000, 1012):
        try:
            queue_campaign.test_work_queue_history(seed)
        except AssertionError as e:
            assert "replicas disagree" in str(e), e
            print(f"seed {seed}: {str(e)[:200]}")
            return
    raise AssertionError("the queue campaign missed a donor without copy on write")


def test_acknowledging_before_the_journal_syncs_fails_the_durable_campaign(monkeypatch):
    """A durable replica that counts and reports what it applied, not what its journal
    synced, acknowledges publishes (and accepts) that a power cut then loses: the durable campaign
    (tests/sim/test_durable_queue_sim.py) catches it within a few seeds."""
    monkeypatch.setattr(Replica, "_mine", lambda self: (self.state.epoch, self.state.applied))
    for seed in range(6):
        try:
            durable_campaign.test_a_durable_queue_loses_no_acknowledged_publish_when_every_member_crashes(seed)
        except AssertionError as e:
            assert "was lost" in str(e) or "accepted 2 times" in str(e), e
            print(f"seed {seed}: {str(e)[:200]}")
            return
    raise AssertionError("the durable campaign missed acknowledgements before the sync")
