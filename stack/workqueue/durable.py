"""Durable queues: what a replica writes to its member's journal, and how its state comes
back from the journal after every member restarted (the Qpid new-cluster design's
persistent cluster). Sans-IO: the replica hands out ``Entry``s (``Replica.take_journal``),
the driver appends them to its journal (stack/runtime/journal.py, or the simulator's), syncs
in groups, and tells the replica what became durable (``Replica.on_durable``) through a
``Tracker``.

Records, in the order the replica applied what they hold (codec-encoded lists):

* ``[J_EPOCH, epoch, members, arbitrators, me]``: a primary view's epoch began from this
  member's own state (``QueueState.begin_epoch``); ``me`` is the uid of the incarnation
  that wrote it.
* ``[J_BATCH, sender, payload]``: one ordered BATCH as delivered (its wire bytes: nothing
  is encoded twice), applied or refused whole (either way it counts in ``applied``).
* ``[J_ADOPT, epoch, applied]``: this member took a donor's state (a snapshot or a streamed
  update); the state itself goes into the journal's next snapshot, written with ``upto``
  this record. Replay that meets the marker (its snapshot never completed) stops there:
  the records after it belong to the adopted state, which is not on disk.

A journal snapshot (an ``image``) is ``[QueueState.snapshot(), levels, arbitrators, me]``:
the two fields a state snapshot leaves out (they are the epoch's, set again at the next
epoch, but batches applied after a mid-epoch compaction depend on them).

Durability: a position (epoch, batches applied) is durable once every record up to it is
synced and, after an adoption, the snapshot holding the adopted state is written
(``Tracker``). The replica reports as applied, and counts for itself, only durable
positions, so a call completes once a majority has it on disk.
"""
from __future__ import annotations

import collections
from typing import Iterable, NamedTuple, Optional

import msgpack

from . import codec
from .state import QueueState

J_EPOCH, J_BATCH, J_ADOPT = 0, 1, 2
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


def epoch_record(epoch: int, members: list, arbitrators, me: bytes) -> bytes:
    return codec.encode([J_EPOCH, epoch, list(members), sorted(arbitrators), me])


def batch_record(sender: bytes, payload: bytes) -> bytes:
    return codec.encode([J_BATCH, sender, bytes(payload)])


def adopt_record(epoch: int, applied: int) -> bytes:
    return codec.encode([J_ADOPT, epoch, applied])


def image(state: QueueState, me: bytes) -> bytes:
    return msgpack.packb([state.snapshot(), dict(state.levels), sorted(state.arbiters), me],
                         use_bin_type=True)


class Replayed(NamedTuple):
    was: Optional[bytes]
    """The uid of the incarnation whose state this is (it wrote the last epoch or image)."""
    records: int
    """Records applied after the snapshot."""
    cut: bool
    """Replay stopped at an adoption whose snapshot never completed: the records after it
    are not part of the state; the driver writes a snapshot before appending anything."""


def replay(state: QueueState, snapshot: Optional[bytes], records: Iterable[bytes]) -> Replayed:
    """Bring ``state`` (new, empty, no listener) to what the journal holds. Raises
    ValueError on a record this build cannot read (the journal is not a work queue's)."""
    was = None
    if snapshot is not None:
        snap, levels, arbs, was = msgpack.unpackb(snapshot, raw=False, use_list=True,
                                                  strict_map_key=False)
        state.restore(snap)
        state.set_arbiters(arbs)
        state.levels = dict(levels)
        state._relevel()
    n = 0
    for rec in records:
        obj = codec.decode(rec)
        kind = obj[0]
        if kind == J_BATCH:
            _, sender, payload = obj
            _b, epoch, cmds = codec.decode(payload)
            state.apply(sender, epoch, cmds)
        elif kind == J_EPOCH:
            _, epoch, members, arbs, was = obj
            state.begin_epoch(epoch, members, arbs)
        elif kind == J_ADOPT:
            return Replayed(was, n, True)
        else:
            raise ValueError(f"journal record of kind {kind!r}: not a work queue's")
        n += 1
    state.touched = set()
    return Replayed(was, n, False)


class Tracker:
    """Journal record numbers -> queue positions: the driver calls ``appended`` for each
    record (``adopt``: an adoption marker, whose positions wait for its snapshot),
    ``snapshot_written`` when an adoption's snapshot is on disk, and ``durable`` with the
    journal's durable record number: the newest position wholly on disk, or None when
    nothing new is. Holds one small tuple per record not yet durable."""

    def __init__(self) -> None:
        self.pending: collections.deque = collections.deque()  # (number, pos, adopt)
        self.snapshots = 0            # the highest adoption marker whose snapshot is written

    def appended(self, number: int, pos: tuple, adopt: bool = False) -> None:
        self.pending.append((number, pos, adopt))

    def snapshot_written(self, upto: int) -> None:
        self.snapshots = max(self.snapshots, upto)

    def durable(self, synced: int) -> Optional[tuple]:
        p = self.pending
        out = None
        while p and p[0][0] <= synced and (not p[0][2] or p[0][0] <= self.snapshots):
            out = p.popleft()[1]
        return out
