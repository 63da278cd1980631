"""Typed errors of the work queue. Every failed call raises one of these (or the stack's
MessageTooLarge); ``code`` ties each to the result code the state machine returns."""
from __future__ import annotations

from ..errors import NotPrimary, RaygroupsError


class QueueError(RaygroupsError):
    """Base class of the work queue's errors."""


class QueueNotPrimary(NotPrimary, QueueError):
    """This member is not in a primary component (or its queue state is being reconciled
    after a view change and the member cannot serve): the call did not take effect."""


class QueueOutcomeUnknown(QueueNotPrimary):
    """The command was applied here but the member left the primary component before a
    majority confirmed it: it may or may not have taken effect (Jepsen's "info")."""


class QueueFull(QueueError):
    """The queue is at its depth or bytes limit; the publish did not take effect."""


class QueueUnsupported(QueueError):
    """A lifecycle call (purge, delete, a queue with an overflow policy or a TTL) while a
    member of the view does not know the queue lifecycle (an older build, during a rolling
    upgrade): it did not take effect anywhere. Waited ``lifecycle_wait_s`` first."""


class NoSuchQueue(QueueError):
    """No queue of that name was created."""


class StaleEpoch(QueueError):
    """The acquisition belongs to a superseded epoch: the member left the primary lineage
    (partition, exclusion) after acquiring, so the message was requeued and may be held by
    another consumer now. The accept/release/reject did not take effect."""


class NotAcquired(QueueError):
    """The message is not held by this acquisition (already accepted, released or
    rejected)."""


class NotOwner(QueueError):
    """Internal: an acquire from a member that does not own the queue (retried)."""


class AcquireTimeout(QueueError, TimeoutError):
    """No message could be acquired within the timeout."""


class QueueArbitrator(QueueError):
    """A queue call on an arbitrator: it votes in the group and holds no queues."""


class QueueNotDurable(QueueError):
    """A durable queue asked of a member that journals nothing (its group was launched
    without ``durable=True``): its queues live in memory only, so the queue was not
    created as asked. Durability is the member's: every queue of a journaling member is
    durable."""


class QueueClosed(QueueError):
    """The service was closed."""


class QueueDiskError(QueueClosed):
    """This member's journal failed (a full disk, an I/O error, a disk that cannot keep up):
    durable queues cannot go on here, so the member left the group (fail-stop, as a broker
    whose store fails shuts down). Calls not sent did not take effect; calls under way fail
    with QueueOutcomeUnknown. Nothing was acknowledged that is not on a majority's disks."""
