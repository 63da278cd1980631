"""``QueueBatch`` and ``QueueSource`` (integration/queue_source.py) settling through the real
queue handle against stand-in members (no Ray, no Spark): a settle that fails other than by
the member's "not held" answer (QueueNotPrimary in a view change, QueueOutcomeUnknown, a
call that timed out or did not get through) is owed by the handle and made again before the
next batch while the member is in the group; one the member answers NotAcquired or
StaleEpoch, or whose member left the group, is not. Found by the campaign across Ray hosts
with long holds: a refused accept left 20 jobs held by their member, leased to the
still-running pipeline, and its queue never drained."""
import pytest

from raygroups.actors import queue_lease
from raygroups.integration.queue_source import QueueBatch, QueueSource
from raygroups.stack.errors import GroupClosed
from raygroups.stack.workqueue import QueueNotPrimary, QueueOutcomeUnknown, StaleEpoch

from .fake_queue_group import FakeGroup, FakeMember, QuietRenewer, deliveries, handle


@pytest.fixture(autouse=True)
def renewer(monkeypatch):
    r = QuietRenewer()
    monkeypatch.setattr(queue_lease, "KEEPER", r)
    return r


def test_a_settle_that_failed_for_now_is_pending_and_made_again():
    a = FakeMember("a", tokens=[(1, 1), (1, 2)],
                   script=["refuse", QueueOutcomeUnknown("?"),
                           GroupClosed("member a is gone (ActorUnavailableError)"), None])
    b = FakeMember("b", tokens=[(1, 3)])
    h = handle(FakeGroup(a, b))
    batch = QueueBatch(deliveries(h, "a", 1, 2) + deliveries(h, "b", 3), None, h)
    assert batch.commit() == 1 and batch.unsettled == 0
    assert [d.id for d in batch.pending] == [("p", 1), ("p", 2)]
    assert batch.retry() == 0 and len(batch.pending) == 2   # unknown: still pending
    assert batch.retry() == 0 and len(batch.pending) == 2   # not reached: still pending
    assert batch.retry() == 2 and batch.pending == [] and batch.unsettled == 0
    assert b.settled + a.settled == [("accept", (1, 3)), ("accept", (1, 1)),
                                     ("accept", (1, 2))]


def test_what_the_member_holds_no_more_or_a_member_that_left_is_not_asked_again():
    a = FakeMember("a", tokens=[])                           # settled already: NotAcquired
    b = FakeMember("b", tokens=[(1, 2)], script=[StaleEpoch("requeued")])
    c = FakeMember("c", tokens=[(1, 3)], script=[TimeoutError("slow")])
    g = FakeGroup(a, b, c)
    g.in_group = ["a", "b"]
    h = handle(g)
    batch = QueueBatch(deliveries(h, "a", 1) + deliveries(h, "b", 2) +
                       deliveries(h, "c", 3), None, h)
    assert batch.commit() == 0 and batch.unsettled == 2 and len(batch.pending) == 1
    assert batch.retry() == 0 and batch.pending == [] and batch.unsettled == 3  # c left
    assert len(batch.errors) == 3 and len(c.calls) == 1
    assert h.owed()["gone"] == 1


def test_the_source_settles_what_earlier_batches_left_before_its_next_batch():
    a = FakeMember("a", tokens=[(1, 1), (1, 2)], script=[QueueNotPrimary("view change")])
    h = handle(FakeGroup(a))
    src = QueueSource.__new__(QueueSource)   # its settling only: no Spark, no group
    src.handle = h
    first = QueueBatch(deliveries(h, "a", 1, 2), None, h)
    assert first.commit() == 0 and len(first.pending) == 2
    assert src._retry() == 2 and first.pending == []
    assert a.settled == [("accept", (1, 1)), ("accept", (1, 2))]
