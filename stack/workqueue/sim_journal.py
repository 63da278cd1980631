"""A member's journal in the simulator, for durable queues (``SimQueues(journal=...)``): it
outlives the member's incarnations, and a crash keeps exactly what was synced, as a kill -9
or a power cut keeps what was fsynced.

Group commit as stack/runtime/journal.py does it: ``append`` takes a record into memory;
one sync at a time takes ``sync_s`` of simulated time and makes durable everything appended
before it began (what is appended meanwhile waits for the next). A snapshot waits until the
record it covers is durable, is written when a sync completes (``snapshot_s`` more), and
then drops the records it covers (compaction). ``crash()`` loses every record not synced
and every snapshot not written.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from .durable import Tracker


class SimJournal:
    def __init__(self, sync_s: float = 0.002, snapshot_s: float = 0.005):
        self.sync_s, self.snapshot_s = sync_s, snapshot_s
        self.records: list = []         # (number, bytes), durable, after the snapshot
        self.snapshot: Optional[tuple] = None  # (upto, image), durable
        self.pending: list = []         # (number, bytes) appended, not synced
        self.snaps: list = []           # (upto, image, adopt) waiting to be written
        self.next = 1
        self.durable = 0
        self.busy = False
        self.life = 0                   # one per crash: a sync under way at a crash is lost
        self.tracker = Tracker()
        self.syncs = 0
        self.on_durable: Callable[[tuple], None] = lambda pos: None

    # -- the replica's entries ------------------------------------------------------------
    def write(self, entries: list, member: Any) -> None:
        self.snaps += self.tracker.route(entries, self._append, lambda: self.next - 1)
        self._sync(member)

    def _append(self, data: bytes) -> int:
        n = self.next
        self.next += 1
        self.pending.append((n, data))
        return n

    def _sync(self, member: Any) -> None:
        if self.busy or not (self.pending or self._ready()):
            return
        self.busy = True
        batch, self.pending = self.pending, []
        life = self.life
        ready = self._ready()

        def done() -> None:
            if life != self.life:
                return  # crashed meanwhile: the batch was never on disk
            self.busy = False
            if batch:
                self.records.extend(batch)
                self.durable = batch[-1][0]
                self.syncs += 1
            for upto, img, _adopt in ready:
                self.snaps.remove((upto, img, _adopt))
                if self.snapshot is None or upto >= self.snapshot[0]:
                    self.snapshot = (upto, img)
                    self.records = [r for r in self.records if r[0] > upto]
            pos = self.tracker.durable(self.durable, (u for u, _i, a in ready if a))
            if pos is not None:
                self.on_durable(pos)
            self._sync(member)
        member.call_later(self.sync_s + (self.snapshot_s if ready else 0.0), done)

    def _ready(self) -> list:
        return [s for s in self.snaps if s[0] <= self.durable]

    # -- crash and recovery -----------------------------------------------------------------
    def crash(self) -> None:
        self.life += 1
        self.busy = False
        self.pending, self.snaps = [], []
        self.next = self.durable + 1
        self.tracker = Tracker()

    def recovered(self) -> tuple:
        """(snapshot image or None, [record bytes after it]) as a restart reads them."""
        return (self.snapshot[1] if self.snapshot else None,
                [data for _n, data in self.records])

    def restart_snapshot(self, image: bytes) -> None:
        """A recovery that stopped at an adoption's marker: the recovered state, written
        at once over everything (the records after the marker go)."""
        self.snapshot = (self.durable, image)
        self.records = []
