"""Configuration of the replicated work queue: one dataclass, every field with its unit,
default and trade-off. ``WorkQueueConfig(time_slice_s=0.05)`` overrides a field."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ACK_MAJORITY, ACK_LOCAL = "majority", "local"


@dataclass
class WorkQueueConfig:
    max_depth: int = 100_000
    """Messages one queue holds (available plus acquired) by default; a publish beyond it
    fails with QueueFull, or, on a queue created with ``overflow="dead_letter_oldest"``,
    moves the oldest available messages to the alternate queue until it fits. Overridden
    per queue at creation (``max_depth=``)."""
    max_bytes: int = 256 * 1024 * 1024
    """Body bytes one queue holds by default; beyond it, as for ``max_depth``. Overridden
    per queue at creation (``max_bytes=``)."""
    max_message_size: int = 64 * 1024 * 1024
    """Largest body a publish accepts, in bytes (MessageTooLarge above it). Bodies larger
    than a datagram travel through the stack's FRAG layer; receivers need
    ``frag__max_pending_per_sender`` at least this large."""
    time_slice_s: float = 0.1
    """How long a member keeps a queue's ownership while other members are interested
    (the Qpid design: the owner releases when its time slice expires and others wait). Shorter:
    fairer sharing between members' consumers; longer: fewer ownership moves (each one is
    an ordered multicast and a pause of a round trip)."""
    interest_linger_s: float = 0.05
    """A member stays interested in a queue, and an owner keeps it while others wait, this
    long after its last consumer stopped waiting, so a consumer that acquires in a loop (or
    re-acquires after a timeout) does not cost a CONSUME/OWNER_RELEASE/CANCEL round per
    call. 0: lose interest at once (seed behaviour)."""
    ack: str = ACK_MAJORITY
    """When a call completes. "majority" (default): once a majority of the epoch's members
    applied the command (they report what they applied), so a completed call survives any
    partition that leaves a primary component: the next primary holds a majority of this
    one's members. "local": as soon as this member applied it (delivered in total order);
    faster by about one multicast, but the tail of a primary view can be lost when this
    member ends up in a minority (the new primary never saw it)."""
    batch_max_bytes: int = 48 * 1024
    """Queue commands issued in the same loop turn travel in one ordered multicast, up to
    this many bytes (the Qpid design's TODO: batch many small events into larger multicasts). A
    body larger than this travels alone."""
    batch_max_commands: int = 1024
    """Most commands in one batch."""
    max_acquire_batch: int = 256
    """Most messages one ACQUIRE command takes for this member's consumers."""
    tick_s: float = 0.01
    """How often the driver calls ``Replica.tick`` (time slices, lingering interest)."""
    expire_interval_s: float = 1.0
    """How often, in seconds, the epoch's first member multicasts EXPIRE (with its wall
    clock) while a queue with a TTL (``ttl_s=``) holds available messages; every member
    expires the same messages when it applies it. A message outlives its TTL by up to this
    long (and by the clock difference between its publisher and that member). Shorter:
    closer to the TTL, one ordered multicast more per interval."""
    lifecycle_wait_s: float = 5.0
    """How long, in seconds, a lifecycle call (purge, delete, a queue created with an
    overflow policy or a TTL) waits for every member of the view to announce that it knows
    the lifecycle (each does once per view, right after it); then it fails with
    QueueUnsupported, as it does while an older build is in the view (a rolling upgrade).
    0: fail at once."""
    arbitrator: bool = False
    """This member is an arbitrator (Galera's garbd): it takes part in every view's vote and
    in the epochs' majorities, and holds no queue, so that two data members (or two zones)
    plus a light third keep a primary component when one side is lost. Its calls raise
    QueueArbitrator. Calls complete once a majority of the epoch's other members applied
    them. Not with the stack's ``primary__tie_breaker="store"`` (the two would decide one
    split twice; a view holding exactly half of the epoch with an arbitrator is never
    primary for the queue)."""
    tie_retry_s: float = 0.5
    """A durable view holding exactly half of its last epoch's members, with the stack's
    ``primary__tie_breaker="store"``, asks the discovery store which half holds that
    epoch's tie (ties.py) before it serves; when the store fails, it asks again after this
    many seconds, for as long as the view lasts."""
    update_chunk_bytes: int = 256 * 1024
    """A stale member's update (a joiner's, or one back from a minority) streams from its
    donor in chunks of about this many bytes of message bodies (the Qpid new-cluster
    design's update, bounded). Each chunk is built by the donor and loaded by the stale
    member in one go, between deliveries: smaller chunks keep both more responsive (the
    others' publish-to-accept gap while a member joins), larger ones cost fewer round
    trips."""
    update_window: int = 8
    """Chunks the donor sends ahead of what the slowest stale member has loaded: the
    update's buffer at both ends (about ``update_window * update_chunk_bytes``). Keep that
    below flow control's ``max_credits`` (4 MiB): then the update's unicasts never wait for
    credits, and nothing the donor sends after them waits behind them."""
    update_ask_s: float = 2.0
    """How long, in seconds, the donor waits for a stale member to ask for the streamed
    update; one that does not (a build before it) then gets the whole state in one
    snapshot, as that build expects. Only mixed groups (a rolling upgrade) ever wait it."""
    journal_compact_bytes: int = 64 * 1024 * 1024
    """A durable replica (its member journals, ``durable.py``) writes its whole state to the
    journal as a snapshot, and the journal drops the records it covers, once this many
    bytes were journaled since the last snapshot and at least twice that snapshot's size
    (so the cost of compaction stays proportional to what was journaled). Larger: fewer
    snapshots, a longer replay at restart. A snapshot is built in one go on the member's
    loop: its pause grows with the state's size."""
    journal_idle_sync_s: Optional[float] = 0.001
    """A durable member's journal syncs on a thread of its own, in groups: whatever the
    member wrote while the last fdatasync ran goes in the next one. A write that comes
    after the journal was idle this many seconds (none in between) has no group to join:
    it is synced at once on the member's loop instead, which waits for that one fdatasync
    (0.2 to 0.4 ms here) but saves the hand-off to the thread and back (about 0.2 ms of a
    call's latency, measured on a 2-core machine). Larger: only quieter journals sync on
    the loop; smaller: busier ones too (0: every write that finds the thread asleep); None:
    every sync is on the thread."""
