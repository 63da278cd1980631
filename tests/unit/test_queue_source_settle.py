"""``QueueBatch`` and ``QueueSource`` (integration/queue_source.py) settling against a
stand-in for the work queue handle (no Ray, no Spark): an accept that a live member refuses
for now (QueueNotPrimary during a view change, QueueOutcomeUnknown) is settled again by
the next batch; one whose member is gone or no longer holds the messages is not. Found by
the campaign across Ray hosts: the pipeline's accept was refused once, its member kept the
20 jobs leased to the still-running pipeline, and its queue never drained."""
from types import SimpleNamespace

from raygroups.integration.queue_source import QueueBatch, QueueSource
from raygroups.stack.workqueue import NotAcquired, QueueNotPrimary, QueueOutcomeUnknown


class Handle:
    """Answers settle_many per member from a script of errors (None: settled)."""

    def __init__(self, script: dict):
        self.script = script
        self.settled: list = []

    def settle_many(self, op: str, ds: list) -> None:
        err = self.script[ds[0].member].pop(0)
        if err is not None:
            raise err
        self.settled += [(op, d.id) for d in ds]


def deliveries(member: str, *seqs) -> list:
    return [SimpleNamespace(member=member, id=("p", k)) for k in seqs]


def test_an_accept_refused_for_now_is_pending_and_settled_by_retry():
    h = Handle({"a": [QueueNotPrimary("view change"), QueueOutcomeUnknown("?"),
                      TimeoutError("busy"), None],
                "b": [None]})
    b = QueueBatch(deliveries("a", 1, 2) + deliveries("b", 3), None, h)
    assert b.commit() == 1 and b.unsettled == 0
    assert [d.id for d in b.pending] == [("p", 1), ("p", 2)]
    assert b.retry() == 0 and len(b.pending) == 2   # refused again (unknown): still pending
    assert b.retry() == 0 and len(b.pending) == 2   # the call timed out: still pending
    assert b.retry() == 2 and b.pending == []
    assert h.settled == [("accept", ("p", 3)), ("accept", ("p", 1)), ("accept", ("p", 2))]


def test_a_member_that_holds_them_no_more_is_not_asked_again():
    h = Handle({"a": [RuntimeError("member gone")], "b": [NotAcquired("requeued")]})
    b = QueueBatch(deliveries("a", 1) + deliveries("b", 2), None, h)
    assert b.commit() == 0 and b.unsettled == 2 and b.pending == []
    assert len(b.errors) == 2


def test_the_source_settles_what_earlier_batches_left_before_its_next_batch():
    h = Handle({"a": [QueueNotPrimary("view change"), None]})
    src = QueueSource.__new__(QueueSource)   # its settling only: no Spark, no group
    src.pending = []
    first = QueueBatch(deliveries("a", 1, 2), None, h)
    first.commit()
    src.pending.append(first)
    assert src._retry() == 2 and src.pending == []
    assert h.settled == [("accept", ("p", 1)), ("accept", ("p", 2))]
