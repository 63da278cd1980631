"""A durable replica's journal on disk (stack/workqueue/durable.py over journal.py): it
recovers the replica's state when the member starts, appends what the replica journals
from the member's loop, and syncs on one worker thread, in groups (one fdatasync for
whatever was appended while the last one ran), then tells the loop what is durable. A small
write to an idle journal (``WorkQueueConfig.journal_idle_sync_s``) is synced at once on the
loop instead: it has no group to join, and the hand-off to the thread and back would cost
about as much as the fdatasync.

    qj = QueueJournal("/tmp/ray/raygroups/journal/orders/m0", "orders", WorkQueueConfig())
    replica = Replica(local, cfg, durable=True, recovered=qj.recovered)
    qj.start(loop, replica.on_durable, on_error)      # then qj.write(replica.take_journal())

Snapshots (an adopted state, a compaction) are written by the same thread once the record
they cover is durable; positions after an adoption are durable only once its snapshot is.
Any journal error (``JournalFull``, ``JournalFailed``, ``JournalBacklog``: the disk does not
keep up) is handed to ``on_error`` once, on the loop, and the journal stops: the member
must stop serving durable queues (WorkQueues leaves the group).
"""
from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Callable, Optional

from ..errors import JournalError
from ..workqueue import durable
from ..workqueue.config import WorkQueueConfig
from ..workqueue.durable import Tracker
from .journal import Journal, JournalConfig

CHUNK = 16 << 20  # a snapshot's chunk (the journal frames each)
INLINE_MAX_BYTES = 256 << 10  # an idle journal's write synced on the loop: this much at most


class QueueJournal:
    def __init__(self, directory: str, group: str, config: WorkQueueConfig,
                 journal_config: Optional[JournalConfig] = None):
        """Opens the journal (``JournalMismatch``: it is another group's; ``JournalCorrupt``)
        and replays it: ``recovered`` (durable.Recovered) for the replica, or None when the
        journal was empty."""
        room = config.max_message_size + (1 << 20)  # one batch holds one body at most
        jc = journal_config or JournalConfig(max_record_bytes=room,
                                             max_unsynced_bytes=max(256 << 20, 2 * room))
        self.journal = Journal(directory, group, jc)
        found = self.journal.open()
        try:
            out = durable.replay(config, found.snapshot_bytes(),
                                 (data for _n, data in found.records()))
            if out.cut:  # an adoption's snapshot never completed: this state, at once
                self.journal.write_snapshot(_chunks(out.image()), found.last)
        except BaseException:
            self.journal.close()
            raise
        self.recovered = out if found.last else None
        self.tracker = Tracker()
        self.idle_sync_s = config.journal_idle_sync_s
        self.last_write = float("-inf")  # time.monotonic() of the last write
        self.busy = False  # the thread is between its wake-up and its report
        self.inline_syncs = 0  # writes synced on the loop (an idle journal)
        self.snaps: collections.deque = collections.deque()  # (upto, image, adopt)
        self.wake = threading.Event()
        self.closed = False
        self.failed: Optional[JournalError] = None
        self.thread: Optional[threading.Thread] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.on_durable: Callable[[tuple], None] = lambda pos: None
        self.on_error: Callable[[JournalError], None] = lambda e: None

    def start(self, loop: asyncio.AbstractEventLoop, on_durable: Callable[[tuple], None],
              on_error: Callable[[JournalError], None]) -> None:
        self.loop, self.on_durable, self.on_error = loop, on_durable, on_error
        self.thread = threading.Thread(target=self._run, name="raygroups-journal", daemon=True)
        self.thread.start()

    # -- on the loop ------------------------------------------------------------------------
    def write(self, entries: list) -> None:
        """The replica's ``take_journal()``, in order."""
        if not entries or self.failed is not None:
            return
        j = self.journal
        now = time.monotonic()
        idle = self.idle_sync_s is not None and now - self.last_write >= self.idle_sync_s
        self.last_write = now
        try:
            self.snaps.extend(self.tracker.route(entries, j.append, lambda: j.last_appended))
        except JournalError as err:
            self._fail(err)
            return
        if not idle or self.snaps or self.busy or self.wake.is_set() \
                or j.unsynced_bytes > INLINE_MAX_BYTES:
            self.wake.set()  # a group forms (or the thread has work): the thread syncs it
            return
        try:
            upto = j.sync()  # the thread sleeps (``busy`` and ``wake`` are checked above)
        except JournalError as err:
            self._fail(err)
            return
        self.inline_syncs += 1
        self._synced(upto, [])

    def _synced(self, upto: int, adopted: list) -> None:
        pos = self.tracker.durable(upto, adopted)
        if pos is not None and self.failed is None:
            self.on_durable(pos)

    def _fail(self, err: JournalError) -> None:
        if self.failed is None:
            self.failed = err
            self.wake.set()
            self.on_error(err)

    # -- the worker thread ------------------------------------------------------------------
    def _run(self) -> None:
        j = self.journal
        while not self.closed and self.failed is None:
            self.wake.wait()
            self.busy = True  # before the clear: the loop sees one of the two set
            self.wake.clear()
            if self.closed or self.failed is not None:
                return
            try:
                upto = j.sync()
                adopted = []
                while self.snaps and self.snaps[0][0] <= upto:
                    n, img, adopt = self.snaps.popleft()
                    j.write_snapshot(_chunks(img), n)
                    if adopt:
                        adopted.append(n)
            except JournalError as err:
                self._call(self._fail, err)
                return
            self._call(self._synced, upto, adopted)
            if j.unsynced_bytes or (self.snaps and self.snaps[0][0] <= j.last_appended):
                self.wake.set()
            self.busy = False

    def _call(self, fn, *args) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closed: nobody waits for it any more

    def close(self) -> None:
        """Sync what was appended (best effort), stop the thread, close the files."""
        self.closed = True
        self.wake.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
        if self.failed is None:
            try:
                self.journal.sync()
            except JournalError:
                pass
        self.journal.close()


def _chunks(img: bytes):
    mv = memoryview(img)
    return [mv[i:i + CHUNK] for i in range(0, len(mv), CHUNK)] or [b""]
