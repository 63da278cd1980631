"""``QueueBatch`` and ``QueueSource`` (integration/queue_source.py) settling against a
stand-in for the work queue handle (no Ray, no Spark): a settle that fails other than by
the member's "not held" answer (QueueNotPrimary in a view change, QueueOutcomeUnknown, a
call that timed out or did not get through) is made again before the next batch while the
member is in the group; one the member answers NotAcquired or StaleEpoch, or whose member
left the group, is not. Found by the campaign across Ray hosts with long holds: a refused
accept left 20 jobs held by their member, leased to the still-running pipeline, and its
queue never drained."""
from types import SimpleNamespace

from raygroups.integration.queue_source import QueueBatch, QueueSource
from raygroups.stack.errors import GroupClosed
from raygroups.stack.workqueue import NotAcquired, QueueNotPrimary, QueueOutcomeUnknown, StaleEpoch


class Handle:
    """Answers settle_many per member from a script of errors (None: settled); the group's
    members are ``members``."""

    def __init__(self, script: dict, members=("a", "b")):
        self.script = script
        self.settled: list = []
        self.group = SimpleNamespace(member_names=lambda: list(members))

    def settle_many(self, op: str, ds: list) -> None:
        err = self.script[ds[0].member].pop(0)
        if err is not None:
            raise err
        self.settled += [(op, d.id) for d in ds]


def deliveries(member: str, *seqs) -> list:
    return [SimpleNamespace(member=member, id=("p", k)) for k in seqs]


def test_a_settle_that_failed_for_now_is_pending_and_made_again():
    h = Handle({"a": [QueueNotPrimary("view change"), QueueOutcomeUnknown("?"),
                      GroupClosed("member a is gone (ActorUnavailableError)"), None],
                "b": [None]})
    b = QueueBatch(deliveries("a", 1, 2) + deliveries("b", 3), None, h)
    assert b.commit() == 1 and b.unsettled == 0
    assert [d.id for d in b.pending] == [("p", 1), ("p", 2)]
    assert b.retry() == 0 and len(b.pending) == 2   # unknown: still pending
    assert b.retry() == 0 and len(b.pending) == 2   # not reached (a partition): still pending
    assert b.retry() == 2 and b.pending == [] and b.unsettled == 0
    assert h.settled == [("accept", ("p", 3)), ("accept", ("p", 1)), ("accept", ("p", 2))]


def test_what_the_member_holds_no_more_or_a_member_that_left_is_not_asked_again():
    h = Handle({"a": [NotAcquired("settled already")], "b": [StaleEpoch("requeued")],
                "c": [TimeoutError("slow")]}, members=("a", "b"))
    b = QueueBatch(deliveries("a", 1) + deliveries("b", 2) + deliveries("c", 3), None, h)
    assert b.commit() == 0 and b.unsettled == 2 and len(b.pending) == 1
    assert b.retry() == 0 and b.pending == [] and b.unsettled == 3  # c left the group
    assert len(b.errors) == 3


def test_the_source_settles_what_earlier_batches_left_before_its_next_batch():
    h = Handle({"a": [QueueNotPrimary("view change"), None]})
    src = QueueSource.__new__(QueueSource)   # its settling only: no Spark, no group
    src.pending = []
    first = QueueBatch(deliveries("a", 1, 2), None, h)
    first.commit()
    src.pending.append(first)
    assert src._retry() == 2 and src.pending == []
    assert h.settled == [("accept", ("p", 1)), ("accept", ("p", 2))]
