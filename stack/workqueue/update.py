"""A stale member's update, streamed in slices (the Qpid new-cluster design's update of a
joiner, bounded: the donor goes on applying the group's commands while it sends, and the
joiner stays responsive while it receives).

The donor freezes its state as the epoch begins (``QueueState.freeze``: a list of
references per queue, and copy on write of the entries that change afterwards), then sends
it in chunks of about ``update_chunk_bytes`` of message bodies, each queue's messages in
publish order, each chunk encoded once for every stale member, at most ``update_window``
chunks ahead of what the slowest stale member acknowledged. A stale member asks for the
update (``[UPDATE_ACK, view key, 0]``), acknowledges each chunk it loaded (``[UPDATE_ACK,
view key, chunks loaded]``) and assembles the state apart from its own, which stays its
position for any view that comes meanwhile; the last chunk swaps it in. Chunks:
``[UPDATE, view key, number, last, head or None, [[queue meta or None, rows], ...]]``, the
head (``QueueState.head``) in chunk 0, a queue's meta in the chunk where its rows begin.

A stale member that does not ask within ``update_ask_s`` (a build before the streamed
update, which waits for the whole snapshot) gets the whole frozen state in one ``SNAP``,
built then. A view change ends an update on both sides: the next view reconciles again.
"""
from __future__ import annotations

from typing import Any, Optional

from . import codec
from .codec import SNAP, UPDATE
from .state import SNAPSHOT_VERSION, QueueState, no_collection, pack, row

ROW_OVERHEAD = 48
"""Bytes a chunk's budget counts per message beyond its body (ids, position, holder)."""


class Outgoing:
    """The donor's side: one frozen state streamed to the stale members of one view."""

    def __init__(self, state: QueueState, key: list, stale: dict, now: float,
                 chunk_bytes: int, window: int):
        self.frozen = state.freeze()
        self.key = key
        self.stale = dict(stale)                     # uid -> Address, not served yet
        self.acked: dict = {}                        # uid -> chunks it loaded (asked)
        self.sent: dict = {}                         # uid -> chunks sent to it
        self.chunks: dict = {}                       # number -> payload, still needed
        self.built = 0
        self.last: Optional[int] = None              # number of the last chunk, once built
        self.since = now
        self.chunk_bytes, self.window = chunk_bytes, window
        self.qi, self.at = 0, 0                      # the next row: queue index, entry index

    @property
    def over(self) -> bool:
        return not self.stale

    def close(self) -> None:
        QueueState.thaw(self.frozen)
        self.stale, self.chunks = {}, {}

    def on_ack(self, uid: bytes, loaded: int) -> list:
        """A stale member loaded ``loaded`` chunks (0: it asks): [(Address, payload)] to send
        now. Acks out of range are ignored."""
        if uid not in self.stale or loaded < self.acked.get(uid, 0) or loaded > self.built:
            return []
        self.acked[uid] = loaded
        self.sent.setdefault(uid, loaded)
        if self.last is not None and loaded > self.last:
            del self.stale[uid]  # it has everything
            self.acked.pop(uid)
            self.sent.pop(uid)
        return self._pump()

    def overdue(self, now: float, ask_s: float) -> list:
        """[(Address, payload)]: the whole frozen state, in one SNAP, to each stale member
        that has not asked within ``ask_s`` (an older build)."""
        if now - self.since < ask_s:
            return []
        late = [uid for uid in self.stale if uid not in self.acked]
        if not late:
            return []
        snap = codec.encode([SNAP, self.key, self.whole()])
        out = [(self.stale.pop(uid), snap) for uid in late]
        return out + self._pump()

    def whole(self) -> bytes:
        """The frozen state as one snapshot, as ``QueueState.snapshot`` made it then."""
        head, queues = self.frozen
        v2 = head[0] == SNAPSHOT_VERSION
        with no_collection():
            return pack(head, ((m, [row(e, q.kept.get(e.pos), v2) for e in entries])
                               for q, m, entries in queues))

    def _pump(self) -> list:
        if not self.stale:
            self.close()
            return []
        # every stale member's progress holds the window, those that have not asked too
        low = min(self.acked.get(uid, 0) for uid in self.stale)
        for n in [n for n in self.chunks if n < low]:
            del self.chunks[n]
        while self.last is None and self.built < low + self.window:
            self.chunks[self.built] = self._build(self.built)
            self.built += 1
        out = []
        for uid, loaded in self.acked.items():
            top = min(self.built, loaded + self.window)
            for n in range(self.sent[uid], top):
                out.append((self.stale[uid], self.chunks[n]))
            self.sent[uid] = max(self.sent[uid], top)
        return out

    def _build(self, n: int) -> bytes:
        head, queues = self.frozen
        v2 = head[0] == SNAPSHOT_VERSION
        items, budget = [], self.chunk_bytes
        with no_collection():
            while self.qi < len(queues) and budget > 0:
                q, m, entries = queues[self.qi]
                kept, start = q.kept, self.at
                rows = []
                while self.at < len(entries) and budget > 0:
                    e = entries[self.at]
                    rows.append(row(e, kept.get(e.pos), v2))
                    budget -= len(e.body) + ROW_OVERHEAD
                    self.at += 1
                items.append([m if start == 0 else None, rows])
                if self.at == len(entries):
                    self.qi, self.at = self.qi + 1, 0
        last = self.qi == len(queues)
        if last:
            self.last = n
        return codec.encode([UPDATE, self.key, n, last, head if n == 0 else None, items])


class Incoming:
    """The stale member's side: chunks from its donor, loaded into a state apart."""

    def __init__(self, key: list, donor: Any, fresh: QueueState):
        self.key, self.donor, self.state = key, donor, fresh
        self.loaded = 0
        self.queue = None

    def load(self, n: int, last: bool, head: Optional[list], items: list) -> bool:
        """Chunk ``n``, loaded: True when it was the last. ValueError (malformed, or out of
        order: nothing loaded from it) otherwise."""
        if type(n) is not int or n != self.loaded or (n == 0) != (head is not None) \
                or type(items) is not list:
            raise ValueError(f"update chunk {n!r} where {self.loaded} was due")
        with no_collection():
            if head is not None:
                self.state.begin_restore(head)
            for m, rows in items:
                if m is not None:
                    self.queue = self.state.add_queue(m)
                elif self.queue is None:
                    raise ValueError("update rows before their queue")
                self.queue.load(rows)
        self.loaded += 1
        return bool(last)
