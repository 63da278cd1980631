"""The replicated queue state machine (the Qpid design's MessageHandler and QueueOwnerHandler
state).

Every member applies the same commands in the same order (they arrive in total order,
virtually synchronously), so every member holds the same queues. Nothing here does I/O or
reads a clock: ``apply`` takes one delivered batch and returns one result per command,
``begin_epoch`` applies a new primary view (members that left: their acquisitions are
requeued, their interest and ownership pass on), ``snapshot``/``restore`` move the whole
state to a joiner or a stale member.

Messages are identified by (publisher, sequence) (``mid``) and live on one queue. A queue
holds them in publish order; an acquired message is held by one member and one
acquisition token; a released (or requeued) message goes back to its original position,
so it is the next one delivered. Ownership (the Qpid design's QueueOwnerHandler): ``consumers`` are
the members interested in the queue, ``owner`` the one allowed to acquire; ownership moves
to the next interested member in member order, circularly.
"""
from __future__ import annotations

import hashlib
import heapq
from typing import Any, Callable, Optional

import msgpack

from .codec import (ACQUIRE, CANCEL, CONSUME, CREATE, DEQUEUE, ENQUEUE, OWNER_RELEASE,
                    REJECT, RELEASE)

# result codes (deterministic: every member computes the same one)
OK, FULL, NO_QUEUE, NOT_OWNER, NOT_ACQUIRED, STALE_EPOCH, RETRY, MALFORMED, TOO_LARGE = range(9)
CODE_NAMES = ("ok", "full", "no_queue", "not_owner", "not_acquired", "stale_epoch", "retry",
              "malformed", "too_large")
SNAPSHOT_VERSION = 1
MAX_NAME = 255


class Entry:
    """One message on one queue."""
    __slots__ = ("mid", "body", "pos", "holder", "tok", "tepoch", "deliveries")

    def __init__(self, mid: tuple, body: bytes, pos: int):
        self.mid = mid
        self.body = body
        self.pos = pos
        self.holder: Optional[bytes] = None   # member uid that acquired it
        self.tok = 0                          # acquisition token (unique, replicated)
        self.tepoch = 0                       # epoch of that acquisition
        self.deliveries = 0                   # times acquired (redelivered when > 1)


class Queue:
    __slots__ = ("name", "alternate", "max_depth", "max_bytes", "msgs", "avail", "heap",
                 "acquired", "next_pos", "bytes", "consumers", "owner", "counters")

    def __init__(self, name: str, alternate: Optional[str], max_depth: int, max_bytes: int):
        self.name = name
        self.alternate = alternate
        self.max_depth = max_depth
        self.max_bytes = max_bytes
        self.msgs: dict = {}        # mid -> Entry: everything on the queue
        self.avail: dict = {}       # pos -> Entry: available (not acquired)
        self.heap: list = []        # positions of available entries (lazy deletion)
        self.acquired: dict = {}    # mid -> Entry: acquired, not yet settled
        self.next_pos = 0
        self.bytes = 0
        self.consumers: list = []   # interested member uids, in the order they came
        self.owner: Optional[bytes] = None
        self.counters = [0, 0, 0, 0, 0]  # enqueued, acquired, dequeued, rejected, requeued

    # -- primitives -----------------------------------------------------------------------
    def push(self, e: Entry) -> None:
        self.msgs[e.mid] = e
        self.bytes += len(e.body)
        self.avail[e.pos] = e
        self.heap.append(e.pos)  # positions only grow: a fresh one is the largest

    def make_available(self, e: Entry) -> None:
        self.acquired.pop(e.mid, None)
        e.holder = None
        self.avail[e.pos] = e
        heapq.heappush(self.heap, e.pos)

    def take(self) -> Optional[Entry]:
        """The available message with the lowest position (publish order; requeued ones
        go back to where they were)."""
        heap, avail = self.heap, self.avail
        while heap:
            pos = heapq.heappop(heap)
            e = avail.pop(pos, None)
            if e is not None:
                return e
        return None

    def remove(self, e: Entry) -> None:
        del self.msgs[e.mid]
        self.acquired.pop(e.mid, None)
        if self.avail.get(e.pos) is e:
            del self.avail[e.pos]
        self.bytes -= len(e.body)

    @property
    def depth(self) -> int:
        return len(self.msgs)

    @property
    def available(self) -> int:
        return len(self.avail)


def next_owner(order: list, after: Optional[bytes], interested, skip: Optional[bytes] = None):
    """The next member after ``after`` in ``order``, circularly, that is ``interested``
    (and not ``skip``); ``after`` itself comes last. None when nobody is."""
    n = len(order)
    if not n:
        return None
    try:
        i = order.index(after)
    except ValueError:
        i = -1
    for k in range(1, n + 1):
        c = order[(i + k) % n]
        if c in interested and c != skip:
            return c
    return None


class QueueState:
    """The replicated state. ``epoch`` is the primary view-id of the view whose
    reconciliation round this state went through last; ``applied`` counts the ordered
    batches applied since; ``members`` are that view's members (uids, view order)."""

    def __init__(self, max_depth: int = 100_000, max_bytes: int = 256 * 1024 * 1024,
                 max_message_size: int = 64 * 1024 * 1024):
        self.default_depth = max_depth
        self.default_bytes = max_bytes
        self.max_message_size = max_message_size
        self.epoch = 0
        self.applied = 0
        self.members: list = []
        self.queues: dict = {}
        self.next_tok = 0
        self.listener: Optional[Callable[[tuple], None]] = None
        """Called with every event (the Qpid design's names): ("enqueue", q, mid, publisher),
        ("acquire", q, mid, member, token), ("release", q, mid, member),
        ("dequeue", q, mid, member), ("reject", q, mid, member), ("rejected", alt, mid),
        ("requeue", q, mid, member) (the member left), ("owner", q, member or None)."""
        self.touched: set = set()
        """Queues whose messages or ownership changed since the replica last looked."""

    # -- the epoch ------------------------------------------------------------------------
    def begin_epoch(self, epoch: int, members: list) -> None:
        """A primary view (its reconciliation round completed): members that are not in it
        lost their acquisitions (requeued), their interest and their ownership."""
        keep = set(members)
        old_order = self.members
        emit = self.listener
        for q in self.queues.values():
            gone = [e for e in q.acquired.values() if e.holder not in keep]
            for e in sorted(gone, key=lambda e: e.pos):
                holder = e.holder
                q.make_available(e)
                q.counters[4] += 1
                if emit:
                    emit(("requeue", q.name, e.mid, holder))
            if gone:
                self.touched.add(q.name)
            if any(c not in keep for c in q.consumers):
                q.consumers = [c for c in q.consumers if c in keep]
            if q.owner is not None and q.owner not in keep:
                new = next_owner(old_order, q.owner, set(q.consumers))
                if new is None:
                    new = next_owner(list(members), None, set(q.consumers))
                self._set_owner(q, new)
            elif q.owner is None and q.consumers:
                self._set_owner(q, q.consumers[0])
        self.epoch = epoch
        self.applied = 0
        self.members = list(members)

    def _set_owner(self, q: Queue, owner: Optional[bytes]) -> None:
        if owner != q.owner:
            q.owner = owner
            self.touched.add(q.name)
            if self.listener:
                self.listener(("owner", q.name, owner))

    # -- commands -------------------------------------------------------------------------
    def apply(self, sender: bytes, epoch: int, cmds: Any) -> list:
        """Apply one delivered batch of ``sender``'s commands. Returns [(cseq, code, data)]
        for the commands (data: the acquired entries for ACQUIRE). A batch from another
        epoch is refused whole (RETRY): its sender resends it in the current epoch."""
        self.applied += 1
        if epoch != self.epoch:
            return [(c[0] if type(c) is list and c else None, RETRY, None)
                    for c in (cmds if type(cmds) is list else ())]
        out = []
        for c in cmds if type(cmds) is list else ():
            try:
                code, data = self._one(sender, c)
            except (TypeError, ValueError, IndexError, KeyError, OverflowError,
                    AttributeError):
                code, data = MALFORMED, None
            out.append((c[0] if type(c) is list and c else None, code, data))
        return out

    def _queue(self, name: Any) -> Optional[Queue]:
        return self.queues.get(name) if type(name) is str else None

    def _one(self, sender: bytes, c: list) -> tuple:
        op = c[1]
        if op == ENQUEUE:
            _, _, name, pseq, body = c
            q = self._queue(name)
            if q is None:
                return NO_QUEUE, None
            if type(body) is not bytes or type(pseq) is not int:
                return MALFORMED, None
            if len(body) > self.max_message_size:
                return TOO_LARGE, None
            if len(q.msgs) >= q.max_depth or q.bytes + len(body) > q.max_bytes:
                return FULL, None
            mid = (sender, pseq)
            if mid in q.msgs:
                return OK, None  # the same message again: once only
            e = Entry(mid, body, q.next_pos)
            q.next_pos += 1
            q.push(e)
            q.counters[0] += 1
            self.touched.add(name)
            if self.listener:
                self.listener(("enqueue", name, mid, sender))
            return OK, None
        if op == ACQUIRE:
            _, _, name, n = c
            q = self._queue(name)
            if q is None:
                return NO_QUEUE, None
            if q.owner != sender:
                return NOT_OWNER, None
            got = []
            for _ in range(max(0, min(int(n), 65536))):
                e = q.take()
                if e is None:
                    break
                self.next_tok += 1
                e.holder, e.tok, e.tepoch = sender, self.next_tok, self.epoch
                e.deliveries += 1
                q.acquired[e.mid] = e
                q.counters[1] += 1
                got.append(e)
                if self.listener:
                    self.listener(("acquire", name, e.mid, sender, (e.tepoch, e.tok)))
            if got:
                self.touched.add(name)
            return OK, got
        if op in (RELEASE, DEQUEUE, REJECT):
            _, _, name, pub, pseq, tepoch, tok = c
            q = self._queue(name)
            if q is None:
                return NO_QUEUE, None
            e = q.msgs.get((pub, pseq))
            if e is None or e.holder != sender or e.tok != tok:
                return (STALE_EPOCH if type(tepoch) is int and tepoch < self.epoch
                        else NOT_ACQUIRED), None
            self.touched.add(name)
            emit = self.listener
            if op == RELEASE:
                q.make_available(e)
                if emit:
                    emit(("release", name, e.mid, sender))
            elif op == DEQUEUE:
                q.remove(e)
                q.counters[2] += 1
                if emit:
                    emit(("dequeue", name, e.mid, sender))
            else:
                q.remove(e)
                q.counters[3] += 1
                if emit:
                    emit(("reject", name, e.mid, sender))
                alt = self.queues.get(q.alternate) if q.alternate else None
                if alt is not None and e.mid not in alt.msgs:
                    # a move, not new data: the alternate takes it beyond its limits
                    moved = Entry(e.mid, e.body, alt.next_pos)
                    alt.next_pos += 1
                    alt.push(moved)
                    alt.counters[0] += 1
                    self.touched.add(alt.name)
                    if emit:
                        emit(("rejected", alt.name, e.mid))
            return OK, None
        if op == CREATE:
            _, _, name, alternate, depth, nbytes = c
            if type(name) is not str or not name or len(name) > MAX_NAME or \
                    (alternate is not None and (type(alternate) is not str or not alternate
                                                or len(alternate) > MAX_NAME)):
                return MALFORMED, None
            self._create(name, alternate, depth, nbytes)
            if alternate is not None and alternate != name:
                self._create(alternate, None, None, None)
            return OK, None
        if op in (CONSUME, CANCEL, OWNER_RELEASE):
            q = self._queue(c[2])
            if q is None:
                return NO_QUEUE, None
            if op == CONSUME:
                if sender not in q.consumers:
                    q.consumers.append(sender)
                    self.touched.add(q.name)
                if q.owner is None:
                    self._set_owner(q, sender)
            elif op == CANCEL:
                if sender in q.consumers:
                    q.consumers.remove(sender)
                    self.touched.add(q.name)
                if q.owner == sender:
                    self._set_owner(q, next_owner(self.members, sender, set(q.consumers),
                                                  skip=sender))
            else:
                if q.owner == sender:  # the next interested member in member order
                    new = next_owner(self.members, sender, set(q.consumers), skip=sender)
                    if new is None and sender in q.consumers:
                        new = sender
                    self._set_owner(q, new)
                    self.touched.add(q.name)
            return OK, None
        return MALFORMED, None

    def _create(self, name: str, alternate: Optional[str], depth: Any, nbytes: Any) -> None:
        if name in self.queues:
            return  # the first creation wins; creating again is harmless
        depth = depth if type(depth) is int and depth > 0 else self.default_depth
        nbytes = nbytes if type(nbytes) is int and nbytes > 0 else self.default_bytes
        self.queues[name] = Queue(name, alternate, depth, nbytes)
        self.touched.add(name)

    # -- snapshots ------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The whole state, canonical: equal states give equal bytes."""
        queues = []
        for q in self.queues.values():
            msgs = [[e.mid[0], e.mid[1], e.body, e.pos, e.holder, e.tok, e.tepoch, e.deliveries]
                    for e in sorted(q.msgs.values(), key=lambda e: e.pos)]
            queues.append([q.name, q.alternate, q.max_depth, q.max_bytes, q.next_pos, q.owner,
                           list(q.consumers), list(q.counters), msgs])
        return msgpack.packb([SNAPSHOT_VERSION, self.epoch, self.applied, self.members,
                              self.next_tok, queues], use_bin_type=True)

    def restore(self, data: bytes) -> None:
        v, epoch, applied, members, next_tok, queues = msgpack.unpackb(
            data, raw=False, use_list=True, strict_map_key=False)
        if v != SNAPSHOT_VERSION:
            raise ValueError(f"snapshot version {v}")
        self.epoch, self.applied, self.members, self.next_tok = epoch, applied, members, next_tok
        self.queues = {}
        for name, alt, depth, nbytes, next_pos, owner, consumers, counters, msgs in queues:
            q = Queue(name, alt, depth, nbytes)
            q.next_pos, q.owner, q.consumers, q.counters = next_pos, owner, consumers, counters
            for pub, pseq, body, pos, holder, tok, tepoch, deliveries in msgs:
                e = Entry((pub, pseq), body, pos)
                e.tok, e.tepoch, e.deliveries = tok, tepoch, deliveries
                q.msgs[e.mid] = e
                q.bytes += len(body)
                if holder is None:
                    q.avail[pos] = e
                    q.heap.append(pos)
                else:
                    e.holder = holder
                    q.acquired[e.mid] = e
            heapq.heapify(q.heap)
            self.queues[name] = q
        self.touched = set(self.queues)

    def digest(self) -> str:
        """A short hash of the canonical snapshot (replicas compare it)."""
        return hashlib.sha256(self.snapshot()).hexdigest()[:16]

    def content(self) -> dict:
        """{queue: {mid: holder}} (tests and debugging)."""
        return {q.name: {e.mid: e.holder for e in q.msgs.values()} for q in self.queues.values()}
