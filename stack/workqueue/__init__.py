"""The replicated work queue (the Qpid new-cluster design): a sans-IO state machine driven by
totally
ordered, virtually synchronous delivery, so every member holds the same queues.

- ``state.QueueState``: the replicated state and its commands (create, enqueue, acquire,
  release, dequeue/accept, reject -> rejected, consume/cancel/owner_release, member-left,
  and the lifecycle: purge, delete, declare (overflow policy, TTL), expire)
- ``replica.Replica``: one member's side: epochs and reconciliation after each primary
  view, batching, majority completion of calls, queue ownership decisions
- ``update``: a stale member's update, streamed from its donor in bounded chunks
- ``sim.SimQueues``: a replica in the simulator; ``raygroups.stack.runtime.workqueue``: on a
  real Channel (asyncio)
"""
from .config import WorkQueueConfig
from .errors import (AcquireTimeout, NoSuchQueue, NotAcquired, QueueArbitrator, QueueClosed,
                     QueueDiskError, QueueError, QueueFull, QueueNotDurable, QueueNotPrimary,
                     QueueOutcomeUnknown, QueueUnsupported, StaleEpoch)
from .replica import Delivery, Phase, Replica, Request
from .state import QueueState

__all__ = ["AcquireTimeout", "Delivery", "NoSuchQueue", "NotAcquired", "Phase",
           "QueueArbitrator", "QueueClosed", "QueueDiskError",
           "QueueError", "QueueFull", "QueueNotDurable", "QueueNotPrimary",
           "QueueOutcomeUnknown", "QueueState",
           "QueueUnsupported", "Replica", "Request", "StaleEpoch", "WorkQueueConfig"]
