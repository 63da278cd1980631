"""Durable queues: what a replica writes to its member's journal, and how its state comes
back from the journal after every member restarted (the Qpid new-cluster design's
persistent cluster). Sans-IO: the replica hands out ``Entry``s (``Replica.take_journal``),
the driver appends them to its journal (stack/runtime/journal.py, or the simulator's), syncs
in groups, and tells the replica what became durable (``Replica.on_durable``) through a
``Tracker``.

Records, in the order the replica applied what they hold (codec-encoded lists):

* ``[J_EPOCH, epoch, members, arbitrators, me, info]``: a primary view's epoch began from
  this member's own state (``QueueState.begin_epoch``); ``me`` is the uid of the
  incarnation that wrote it; ``info`` is [joint, base, key] (below).
* ``[J_BATCH, sender, payload]``: one ordered BATCH as delivered (its wire bytes: nothing
  is encoded twice), applied or refused whole (either way it counts in ``applied``).
* ``[J_ADOPT, epoch, applied]``: this member took a donor's state (a snapshot or a streamed
  update); the state itself goes into the journal's next snapshot, written with ``upto``
  this record. Replay that meets the marker (its snapshot never completed) stops there:
  the records after it belong to the adopted state, which is not on disk.
* ``[J_ME, uid]``: an incarnation of the member began on this journal (its first record).
* ``[J_SEAL, epoch]``: the epoch is established (below).
* ``[J_PROMISE, epoch]``: this member promised the formation of that epoch number (below).

A journal snapshot (an ``image``) is ``[QueueState.snapshot(), levels, arbitrators,
incarnations, info, claims]``: the fields a state snapshot leaves out (levels, arbitrators
and the owners' standing claims are the epoch's, set again at the next epoch, but batches
applied after a mid-epoch compaction depend on them; claims came later: an image without
them had none), the incarnations that used the journal, and [joint, base, key, promised]
(below).

Establishment. A member restarted from its journal counts for the epoch its journal holds,
but its incarnation may have gone on, in memory only, into a later epoch (it began it or
took its state, and crashed before that reached the disk). Three members {1,2,3} form B;
4 and 5 join (E); 1, 4 and 5 go on (F); a publish completes in F on 1, 4 and 5's disks;
every member loses power; 2 and 3 restart on journals at B: a majority of B, they would
form the queue from B without the publish. So each epoch carries ``joint``, the member
lists of the epochs it came from since the last established one: it is established once
most members of each list have it on disk (their reports of what is on disk, counted
through the incarnations each stands for; the view's arbitrators count, as they hold no
disk and a restarted arbitrator stands for nobody). Until then no call completes in it,
and a view whose most advanced epoch is not established needs most members of each of
those lists too (``J_SEAL`` journals the establishment; past ``MAX_JOINT`` lists the queue
waits). Then every majority of any of those epochs holds a member whose disk has the later
epoch, so a restart never forms the queue from an epoch something later moved on from.

The ballot (Paxos's promise). Establishment orders an epoch after the ones it came from,
not after an epoch formed apart from the same state: a view of a, b and c begins an
epoch, only a's disk gets it (with batches) before every member loses power; b and c
restart, form an epoch from the same state and, not knowing the first, give it the same
number; a call completes there, and b crashes before it hears that the epoch is
established. a and b restarted hold two epochs of one number from one state, ranked
alike, and a's would win without the call. So every durable member of a view journals
``[J_PROMISE, epoch]`` for the epoch the view would form and announces it once synced
(``PROMISED``); the epoch leaves no trace (its record, an adopted state, a batch) on any
disk until most members of each of its lists (``joint``) promised it, and every member
announces the highest number it promised in the state exchange, so a later formation
from the same state, which needs most of those members too, numbers itself above it.

Ties. With the stack's even-split tie-breaker and a store that outlives the group, "most
members of a list" in all of the above is more than half, or exactly the half that holds
the list's tie in the store (ties.py): any two such quorums of a list still intersect.

Incarnations. Every incarnation that used a journal acknowledged only what it synced there,
so the journal stands for each of them: a member restarted from it announces them all
(the last ``MAX_INCARNATIONS``) and counts for any of them in an epoch's majority, also for
an incarnation that was in an epoch whose state never reached this disk (it adopted that
state and crashed before the snapshot: it acknowledged nothing of it).

Durability: a position (epoch, batches applied) is durable once every record up to it is
synced and, after an adoption, the snapshot holding the adopted state is written
(``Tracker``). The replica reports as applied, and counts for itself, only durable
positions, so a call completes once a majority has it on disk.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Iterable, NamedTuple, Optional

import msgpack

from . import codec
from .state import QueueState

J_EPOCH, J_BATCH, J_ADOPT, J_ME, J_SEAL, J_PROMISE = 0, 1, 2, 3, 4, 5
MAX_JOINT = 8
"""Epochs in a row formed before the one they came from was established: past this the
queue waits (a view change per fsync, for ever, is not a group that gets work done)."""
MAX_INCARNATIONS = 16
"""The incarnations a journal remembers (the newest): one that restarted more often than
this counts for its oldest incarnations no longer, which may keep a queue waiting, never
loses anything."""
REC, ADOPT, SNAP = "record", "adopt", "snapshot"


class Entry(NamedTuple):
    """One thing for the journal. ``kind``: REC (append ``data``), ADOPT (append ``data``,
    the marker, then write ``image`` as a snapshot upto it) or SNAP (write ``image`` as a
    snapshot upto the last record appended: compaction). ``pos``: the queue position the
    state reaches with it (None for SNAP)."""
    kind: str
    data: Optional[bytes]
    pos: Optional[tuple]
    image: Optional[bytes] = None


def epoch_record(epoch: int, members: list, arbitrators, me: bytes, info: list) -> bytes:
    return codec.encode([J_EPOCH, epoch, list(members), sorted(arbitrators), me, info])


def seal_record(epoch: int) -> bytes:
    return codec.encode([J_SEAL, epoch])


def promise_record(epoch: int) -> bytes:
    return codec.encode([J_PROMISE, epoch])


def batch_record(sender: bytes, payload: bytes) -> bytes:
    return codec.encode([J_BATCH, sender, bytes(payload)])


def adopt_record(epoch: int, applied: int) -> bytes:
    return codec.encode([J_ADOPT, epoch, applied])


def me_record(uid: bytes) -> bytes:
    return codec.encode([J_ME, uid])


def image(state: QueueState, incarnations: list, info: list) -> bytes:
    return msgpack.packb([state.snapshot(), dict(state.levels), sorted(state.arbiters),
                          list(incarnations), info, state.standing()], use_bin_type=True)


def remember(incarnations: list, uid: bytes) -> list:
    """``incarnations`` with ``uid`` last, at most ``MAX_INCARNATIONS``."""
    out = [u for u in incarnations if u != uid] + [uid]
    return out[-MAX_INCARNATIONS:]


class Recovered(NamedTuple):
    """What a member's journal gives back (``replay``), for ``Replica(recovered=...)``."""
    state: QueueState
    incarnations: list
    """The uids of the incarnations that used the journal, oldest first."""
    joint: list
    """The member lists the state's epoch was still to be established at (none: it was)."""
    base: list
    """[epoch, applied]: the established position a provisional epoch came from."""
    key: list
    """The view key of the formation of the state's epoch."""
    cut: bool
    """Replay stopped at an adoption whose snapshot never completed: the records after it
    are not part of the state; the driver writes ``image()`` as a snapshot before anything."""
    promised: int
    """The highest epoch number the journal promised (the ballot)."""

    def image(self) -> bytes:
        return image(self.state, self.incarnations,
                     [self.joint, self.base, self.key, self.promised])


def replay(config: Any, snapshot: Optional[bytes], records: Iterable[bytes]) -> Recovered:
    """The state the journal holds (``config``: the WorkQueueConfig its limits come from).
    Raises ValueError on a record this build cannot read (not a work queue's journal)."""
    state = QueueState(config.max_depth, config.max_bytes, config.max_message_size)
    incs: list = []
    info: list = [[], [], []]
    promised = 0
    if snapshot is not None:
        snap, levels, arbs, incs, info, *claims = msgpack.unpackb(
            snapshot, raw=False, use_list=True, strict_map_key=False)
        state.restore(snap)
        state.levels = dict(levels)
        state.set_arbiters(arbs)
        if claims:
            state.stand(claims[0])
        info, promised = info[:3], (info[3] if len(info) > 3 else 0)
    for rec in records:
        obj = codec.decode(rec)
        kind = obj[0]
        if kind == J_BATCH:
            _, sender, payload = obj
            _b, epoch, cmds = codec.decode(payload)
            state.apply(sender, epoch, cmds)
        elif kind == J_EPOCH:
            _, epoch, members, arbs, me, info = obj
            state.begin_epoch(epoch, members, arbs)
            incs = remember(incs, me)
        elif kind == J_PROMISE:
            promised = max(promised, obj[1])
        elif kind == J_ME:
            incs = remember(incs, obj[1])
        elif kind == J_SEAL:
            if obj[1] == state.epoch:
                info = [[], [], info[2]]
        elif kind == J_ADOPT:
            return Recovered(state, incs, *info, True, max(promised, state.epoch))
        else:
            raise ValueError(f"journal record of kind {kind!r}: not a work queue's")
    state.touched = set()
    return Recovered(state, incs, *info, False, max(promised, state.epoch))


class Tracker:
    """Journal record numbers -> queue positions, for a driver. ``route`` appends the
    replica's entries and says which snapshots to write once their record is durable;
    ``durable`` takes the journal's durable record number (and the adoption snapshots
    written since) and gives the newest position wholly on disk, or None when nothing new
    is. Holds one small tuple per record not yet durable."""

    def __init__(self) -> None:
        self.pending: collections.deque = collections.deque()  # (number, pos, adopt)
        self.snapshots = 0            # the highest adoption marker whose snapshot is written

    def route(self, entries: Iterable[Entry], append: Callable[[bytes], int],
              last: Callable[[], int]) -> list:
        """Append each record (``append`` returns its number; ``last()``: the last number
        appended); return [(upto, image, adoption)] of the snapshots to write, in order,
        each once record ``upto`` is durable."""
        snaps = []
        for e in entries:
            if e.kind == SNAP:
                snaps.append((last(), e.image, False))
                continue
            n = append(e.data)
            self.pending.append((n, e.pos, e.kind == ADOPT))
            if e.kind == ADOPT:
                snaps.append((n, e.image, True))
        return snaps

    def durable(self, synced: int, adopted: Iterable[int] = ()) -> Optional[tuple]:
        """``adopted``: the ``upto`` of adoption snapshots written since the last call."""
        self.snapshots = max(self.snapshots, *adopted, 0)
        p = self.pending
        out = None
        while p and p[0][0] <= synced and (not p[0][2] or p[0][0] <= self.snapshots):
            out = p.popleft()[1]
        return out
