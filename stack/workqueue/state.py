"""The replicated queue state machine (the Qpid design's MessageHandler and QueueOwnerHandler
state).

Every member applies the same commands in the same order (they arrive in total order,
virtually synchronously), so every member holds the same queues. Nothing here does I/O or
reads a clock: ``apply`` takes one delivered batch and returns one result per command,
``begin_epoch`` applies a new primary view (members that left: their acquisitions are
requeued, their interest and ownership pass on), ``snapshot``/``restore`` move the whole
state to a joiner or a stale member.

The lifecycle (commands of queue level 2, see ``LIFECYCLE_LEVEL``): PURGE drops a queue's
available messages, DELETE removes a queue and everything on it, DECLARE creates one with an
overflow policy (``reject_publish``: QueueFull; ``dead_letter_oldest``: the oldest available
messages go to the alternate, as a reject would move them, until the publish fits) or a
message TTL, and EXPIRE (sent by the epoch's first member with its clock) dead-letters the
available messages older than their queue's TTL. A message's age counts from the timestamp
its publisher put in the ENQUEUE (or, for a message without one, such as one moved to an
alternate, from the first EXPIRE that saw it), never from a replica's own clock. Every
replica applies a lifecycle command only when every member of the epoch announced (LEVEL)
that it knows the lifecycle; otherwise none does (an older build refuses a command it does
not know as malformed, with no effect), so a group in a rolling upgrade stays identical.

Messages are identified by (publisher, sequence) (``mid``) and live on one queue. A queue
holds them in publish order; an acquired message is held by one member and one
acquisition token; a released (or requeued) message goes back to its original position,
so it is the next one delivered. Ownership (the Qpid design's QueueOwnerHandler): ``consumers`` are
the members interested in the queue, ``owner`` the one allowed to acquire; ownership moves
to the next interested member in member order, circularly. At ``CLAIM_LEVEL`` what an
owner's ACQUIRE does not find stands as a claim, and each message that becomes available
later is acquired for the owner by the command that brings it (as a RabbitMQ quorum queue
assigns an enqueue to a consumer with credit): see ``Queue.claim`` and ``_feed``.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import heapq
import math
from typing import Any, Callable, Optional

import msgpack

from .codec import (ACQUIRE, CANCEL, CONSUME, CREATE, DECLARE, DELETE, DEQUEUE, ENQUEUE,
                    EXPIRE, LEVEL, OWNER_RELEASE, PURGE, REJECT, RELEASE)

# result codes (deterministic: every member computes the same one)
(OK, FULL, NO_QUEUE, NOT_OWNER, NOT_ACQUIRED, STALE_EPOCH, RETRY, MALFORMED, TOO_LARGE,
 UNSUPPORTED) = range(10)
CODE_NAMES = ("ok", "full", "no_queue", "not_owner", "not_acquired", "stale_epoch", "retry",
              "malformed", "too_large", "unsupported")
SNAPSHOT_VERSION = 2
"""The snapshot format written when the state holds something version 1 cannot express (an
overflow policy, a TTL, lifecycle counters); version 1 otherwise, which older builds read."""
SNAPSHOT_V1 = 1
MAX_NAME = 255
MAX_CLAIM = 65536
"""Most messages one ACQUIRE takes, or its owner's standing claim holds."""
BASE_LEVEL = 1
"""The queue level of a member that announces none (builds before the lifecycle)."""
LIFECYCLE_LEVEL = 2
"""The queue level that knows PURGE, DELETE, DECLARE, EXPIRE and ENQUEUE's timestamp."""
CLAIM_LEVEL = 4
"""The queue level whose ACQUIRE leaves a standing claim (see ``Queue.claim``). Level 3 is
the replica's (a streamed update) and changes nothing here."""
GATED = (PURGE, DELETE, DECLARE, EXPIRE)
REJECT_PUBLISH, DEAD_LETTER_OLDEST = "reject_publish", "dead_letter_oldest"
OVERFLOWS = (REJECT_PUBLISH, DEAD_LETTER_OLDEST)
# counters: enqueued, acquired, dequeued, rejected, requeued (version 1), then purged,
# expired, overflowed (dead-lettered by dead_letter_oldest), dropped (expired or overflowed
# with no alternate to go to)
N_COUNTERS_V1, N_COUNTERS = 5, 9


class Entry:
    """One message on one queue."""
    __slots__ = ("mid", "body", "pos", "holder", "tok", "tepoch", "deliveries", "ts")

    def __init__(self, mid: tuple, body: bytes, pos: int, ts: Optional[float] = None):
        self.mid = mid
        self.body = body
        self.pos = pos
        self.ts = ts                          # publisher's timestamp (TTL); None: unknown
        self.holder: Optional[bytes] = None   # member uid that acquired it
        self.tok = 0                          # acquisition token (unique, replicated)
        self.tepoch = 0                       # epoch of that acquisition
        self.deliveries = 0                   # times acquired (redelivered when > 1)


class Queue:
    __slots__ = ("name", "alternate", "max_depth", "max_bytes", "msgs", "avail", "heap",
                 "acquired", "next_pos", "bytes", "held_bytes", "consumers", "owner", "counters",
                 "overflow", "ttl_s", "ages", "unstamped", "kept", "cut", "claim")

    def __init__(self, name: str, alternate: Optional[str], max_depth: int, max_bytes: int,
                 overflow: str = REJECT_PUBLISH, ttl_s: Optional[float] = None):
        self.name = name
        self.alternate = alternate
        self.max_depth = max_depth
        self.max_bytes = max_bytes
        self.overflow = overflow
        self.ttl_s = ttl_s
        self.msgs: dict = {}        # mid -> Entry: everything on the queue
        self.avail: dict = {}       # pos -> Entry: available (not acquired)
        self.heap: list = []        # positions of available entries (lazy deletion)
        self.acquired: dict = {}    # mid -> Entry: acquired, not yet settled
        self.next_pos = 0
        self.bytes = 0
        self.held_bytes = 0         # bytes of the acquired entries
        self.consumers: list = []   # interested member uids, in the order they came
        self.owner: Optional[bytes] = None
        # the owner's standing claim (``CLAIM_LEVEL``): how many more messages it takes as
        # they become available, in the same command, with no ACQUIRE of its own; ends
        # when ownership moves, when the owner releases a message, and as an epoch begins.
        # Like ``QueueState.levels`` the epoch's, not in snapshots (``standing``)
        self.claim = 0
        self.counters = [0] * N_COUNTERS  # see N_COUNTERS
        # a queue with a TTL: (timestamp, position) of its available entries, oldest first
        # (lazy deletion, like ``heap``), and the entries with no timestamp yet
        self.ages: list = []
        self.unstamped: list = []
        # while a streamed update is sent (see ``freeze``): {position: the image of an entry
        # below ``cut`` as the update began}, taken at its first change after that
        self.kept: Optional[dict] = None
        self.cut = 0

    # -- primitives -----------------------------------------------------------------------
    def push(self, e: Entry) -> None:
        self.msgs[e.mid] = e
        self.bytes += len(e.body)
        self.avail[e.pos] = e
        self.heap.append(e.pos)  # positions only grow: a fresh one is the largest
        if self.ttl_s is not None:
            self.age(e)

    def age(self, e: Entry) -> None:
        """``e`` joins the TTL bookkeeping (a queue with a TTL)."""
        if e.ts is None:
            self.unstamped.append(e)
        else:
            heapq.heappush(self.ages, (e.ts, e.pos))

    def keep(self, e: Entry) -> None:
        """Called before ``e``'s holder, acquisition or timestamp changes: while an update
        is streamed, its image as the update began is kept (copy on write)."""
        kept = self.kept
        if kept is not None and e.pos < self.cut and e.pos not in kept:
            kept[e.pos] = image(e)

    def hold(self, e: Entry, holder: bytes) -> None:
        """``e`` (just taken, and kept) is acquired by ``holder``."""
        e.holder = holder
        self.acquired[e.mid] = e
        self.held_bytes += len(e.body)

    def make_available(self, e: Entry) -> None:
        self.keep(e)
        if self.acquired.pop(e.mid, None) is not None:
            self.held_bytes -= len(e.body)
        e.holder = None
        self.avail[e.pos] = e
        heapq.heappush(self.heap, e.pos)
        if self.ttl_s is not None and e.ts is not None:
            heapq.heappush(self.ages, (e.ts, e.pos))
            self._compact()

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
        if self.acquired.pop(e.mid, None) is not None:
            self.held_bytes -= len(e.body)
        if self.avail.get(e.pos) is e:
            del self.avail[e.pos]
        self.bytes -= len(e.body)
        self._compact()

    def _compact(self) -> None:
        """Drop the stale entries of the lazy heaps once they are most of them: entries
        taken off without being popped (expired, overflowed, settled while in ``ages``)
        would otherwise pile up on a queue nobody consumes from."""
        bound = 2 * len(self.avail) + 64
        if len(self.heap) > bound:
            self.heap = list(self.avail)
            heapq.heapify(self.heap)
        if len(self.ages) > bound:
            self.ages = [(e.ts, e.pos) for e in self.avail.values() if e.ts is not None]
            heapq.heapify(self.ages)
        if len(self.unstamped) > 2 * len(self.msgs) + 64:
            self.unstamped = [e for e in self.unstamped
                              if e.ts is None and self.msgs.get(e.mid) is e]

    def load(self, rows: list) -> None:
        """Messages of a snapshot (``row``s, in publish order) added to this queue."""
        heap, avail, msgs, ttl = self.heap, self.avail, self.msgs, self.ttl_s is not None
        last = heap[-1] if heap else -1
        ordered = True
        for pub, pseq, body, pos, holder, tok, tepoch, deliveries, *ts in rows:
            e = Entry((pub, pseq), body, pos, ts[0] if ts else None)
            e.tok, e.tepoch, e.deliveries = tok, tepoch, deliveries
            msgs[e.mid] = e
            self.bytes += len(body)
            if holder is None:
                avail[pos] = e
                ordered = ordered and pos > last
                last = pos
                heap.append(pos)
            else:
                self.hold(e, holder)
            if ttl:
                self.age(e)
        if not ordered:  # rows in publish order append to a sorted list, already a heap
            heapq.heapify(heap)

    @property
    def depth(self) -> int:
        return len(self.msgs)

    def v1(self) -> bool:
        """Nothing here that snapshot version 1 cannot express."""
        return self.overflow == REJECT_PUBLISH and self.ttl_s is None and \
            not any(self.counters[N_COUNTERS_V1:])

    def info(self) -> dict:
        """The queue's figures and limits (``g.queues()``, ``q.info()``)."""
        c = self.counters
        return {"depth": self.depth, "available": self.available,
                "acquired": len(self.acquired), "bytes": self.bytes,
                "max_depth": self.max_depth, "max_bytes": self.max_bytes,
                "overflow": self.overflow, "ttl_s": self.ttl_s, "alternate": self.alternate,
                "owner": self.owner.hex()[:8] if self.owner else None,
                "consumers": len(self.consumers), "enqueued": c[0], "dequeued": c[2],
                "rejected": c[3], "requeued": c[4], "purged": c[5], "expired": c[6],
                "overflowed": c[7], "dropped": c[8]}

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
        ("requeue", q, mid, member) (the member left), ("owner", q, member or None); the
        lifecycle's ("purge", q, mid), ("delete", q, mid) then ("deleted", q),
        ("expire", q, mid) and ("overflow", q, mid) (each then "rejected" to the alternate
        or ("dropped", q, mid)); and ("epoch", epoch, from epoch, batches applied in it)
        when a primary view's epoch begins from this state."""
        self.touched: set = set()
        """Queues whose messages or ownership changed since the replica last looked."""
        self.levels: dict = {}
        """{member uid: queue level} announced (LEVEL) in this epoch, in total order; a
        member that announced nothing is at ``BASE_LEVEL``. Not in snapshots: a snapshot is
        taken as an epoch begins, when nobody announced yet."""
        self._level = BASE_LEVEL  # level(), kept as ``levels`` and ``members`` change
        self.arbiters: frozenset = frozenset()
        """The epoch's members that are arbitrators (they vote and hold nothing): not in
        the level nor in the majorities of applied batches. Set as each epoch begins, from
        its state exchange, like ``levels`` not in snapshots."""
        self._holders: list = self.members  # holders(), kept by _relevel
        self.claimed: list = []
        """[(queue, owner, [Entry])] taken by standing claims in the last ``apply``."""

    # -- the epoch ------------------------------------------------------------------------
    def begin_epoch(self, epoch: int, members: list, arbiters: Any = ()) -> None:
        """A primary view (its reconciliation round completed): members that are not in it
        lost their acquisitions (requeued), their interest and their ownership.
        ``arbiters``: those of ``members`` that are arbitrators."""
        keep = set(members)
        old_order = self.members
        emit = self.listener
        for q in self.queues.values():
            q.claim = 0
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
        if emit:
            emit(("epoch", epoch, self.epoch, self.applied))
        self.epoch = epoch
        self.applied = 0
        self.members = list(members)
        self.arbiters = frozenset(arbiters)
        self.levels = {}
        self._relevel()

    def holders(self) -> list:
        """The epoch's members that hold the queues (all but its arbitrators)."""
        return self._holders

    def level(self) -> int:
        """The queue level every member of the epoch announced (the lowest)."""
        return self._level

    def _relevel(self) -> None:
        """``holders()`` and ``level()``, kept as ``members``, ``arbiters`` and ``levels``
        change (every place that sets one calls this)."""
        arb = self.arbiters
        self._holders = [m for m in self.members if m not in arb] if arb else self.members
        self._level = min((self.levels.get(m, BASE_LEVEL) for m in self._holders),
                          default=BASE_LEVEL)

    def _set_owner(self, q: Queue, owner: Optional[bytes]) -> None:
        if owner != q.owner:
            q.owner = owner
            q.claim = 0
            self.touched.add(q.name)
            if self.listener:
                self.listener(("owner", q.name, owner))

    # -- commands -------------------------------------------------------------------------
    def apply(self, sender: bytes, epoch: int, cmds: Any) -> list:
        """Apply one delivered batch of ``sender``'s commands. Returns [(cseq, code, data)]
        for the commands (data: the acquired entries for ACQUIRE). A batch from another
        epoch is refused whole (RETRY): its sender resends it in the current epoch."""
        self.applied += 1
        self.claimed = []
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

    def _feed(self, q: Queue) -> None:
        """``q``'s standing claim takes what just became available there (a publish, a
        release, a message moved from another queue), lowest position first, in the
        command that brought it (every member alike). Called where a message becomes
        available; a claim stands only while nothing is (``claim`` > 0: ``avail`` empty
        until then)."""
        got = self._take(q, q.owner, q.claim)
        q.claim -= len(got)
        self.claimed.append((q.name, q.owner, got))

    def _take(self, q: Queue, holder: bytes, n: int) -> list:
        """Up to ``n`` available messages of ``q``, acquired by ``holder``."""
        got = []
        for _ in range(n):
            e = q.take()
            if e is None:
                break
            q.keep(e)
            self.next_tok += 1
            e.tok, e.tepoch = self.next_tok, self.epoch
            e.deliveries += 1
            q.hold(e, holder)
            q.counters[1] += 1
            got.append(e)
            if self.listener:
                self.listener(("acquire", q.name, e.mid, holder, (e.tepoch, e.tok)))
        return got

    def _queue(self, name: Any) -> Optional[Queue]:
        return self.queues.get(name) if type(name) is str else None

    def _one(self, sender: bytes, c: list) -> tuple:
        op = c[1]
        if op == ENQUEUE:
            _, _, name, pseq, body, *stamp = c
            q = self._queue(name)
            if q is None:
                return NO_QUEUE, None
            if type(body) is not bytes or type(pseq) is not int or len(stamp) > 1:
                return MALFORMED, None
            ts = None
            if stamp:  # the publisher's timestamp: level 2 only, like the lifecycle
                if self.level() < LIFECYCLE_LEVEL:
                    return UNSUPPORTED, None
                ts = _time(stamp[0])
            if len(body) > self.max_message_size:
                return TOO_LARGE, None
            mid = (sender, pseq)
            if mid in q.msgs:
                return OK, None  # the same message again (a retry): once only, never FULL
            if len(q.msgs) >= q.max_depth or q.bytes + len(body) > q.max_bytes:
                if q.overflow != DEAD_LETTER_OLDEST or not self._make_room(q, len(body)):
                    return FULL, None
            e = Entry(mid, body, q.next_pos, ts)
            q.next_pos += 1
            q.push(e)
            q.counters[0] += 1
            self.touched.add(name)
            if self.listener:
                self.listener(("enqueue", name, mid, sender))
            if q.claim:
                self._feed(q)
            return OK, None
        if op == ACQUIRE:
            _, _, name, n = c
            q = self._queue(name)
            if q is None:
                return NO_QUEUE, None
            if q.owner != sender:
                return NOT_OWNER, None
            n = max(0, min(int(n), MAX_CLAIM))
            got = self._take(q, sender, n)
            if got:
                self.touched.add(name)
            if len(got) < n and self.level() >= CLAIM_LEVEL:
                # the rest stands: taken as it comes (``_feed``), in the command that brings it
                q.claim = min(q.claim + n - len(got), MAX_CLAIM)
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
                if sender == q.owner:
                    q.claim = 0  # else the claim would take it straight back
                q.make_available(e)
                if emit:
                    emit(("release", name, e.mid, sender))
                if q.claim:
                    self._feed(q)  # a former owner's
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
                self._to_alternate(q, e)
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
        if op == LEVEL:
            level = c[2]
            if type(level) is not int or level < BASE_LEVEL:
                return MALFORMED, None
            if sender in self.members:
                self.levels[sender] = level
                self._relevel()
            return OK, None
        if op in GATED:
            if self.level() < LIFECYCLE_LEVEL:
                return UNSUPPORTED, None  # what a member that does not know it does: nothing
            return self._lifecycle(op, c)
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

    def _create(self, name: str, alternate: Optional[str], depth: Any, nbytes: Any,
                overflow: str = REJECT_PUBLISH, ttl_s: Optional[float] = None) -> None:
        if name in self.queues:
            return  # the first creation wins; creating again is harmless
        depth = depth if type(depth) is int and depth > 0 else self.default_depth
        nbytes = nbytes if type(nbytes) is int and nbytes > 0 else self.default_bytes
        self.queues[name] = Queue(name, alternate, depth, nbytes, overflow, ttl_s)
        self.touched.add(name)

    # -- the lifecycle --------------------------------------------------------------------
    def _lifecycle(self, op: int, c: list) -> tuple:
        emit = self.listener
        if op == EXPIRE:
            now = _time(c[2])
            for q in list(self.queues.values()):
                if q.ttl_s is not None and q.avail:
                    self._expire(q, now)
            return OK, None
        if op == DECLARE:
            _, _, name, alternate, depth, nbytes, overflow, ttl_s = c
            if type(name) is not str or not name or len(name) > MAX_NAME or \
                    (alternate is not None and (type(alternate) is not str or not alternate
                                                or len(alternate) > MAX_NAME)) or \
                    overflow not in OVERFLOWS:
                return MALFORMED, None
            ttl_s = None if ttl_s is None else _time(ttl_s)
            if ttl_s is not None and ttl_s <= 0:
                return MALFORMED, None
            self._create(name, alternate, depth, nbytes, overflow, ttl_s)
            if alternate is not None and alternate != name:
                self._create(alternate, None, None, None)
            return OK, None
        q = self._queue(c[2])
        if q is None:
            return NO_QUEUE, None
        self.touched.add(q.name)
        if op == PURGE:  # the available messages; what consumers hold stays theirs
            n = 0
            while True:
                e = q.take()
                if e is None:
                    break
                q.remove(e)
                n += 1
                if emit:
                    emit(("purge", q.name, e.mid))
            q.counters[5] += n
            return OK, n
        # DELETE: the queue and everything on it; what consumers hold can no longer be
        # settled (NoSuchQueue); another queue's alternate that is gone drops its rejects
        del self.queues[q.name]
        if emit:
            for e in sorted(q.msgs.values(), key=lambda e: e.pos):
                emit(("delete", q.name, e.mid))
            emit(("deleted", q.name))
        return OK, len(q.msgs)

    def _expire(self, q: Queue, now: float) -> None:
        """Dead-letter the available messages of ``q`` older than its TTL at ``now``; an
        available message without a timestamp gets ``now`` (its age counts from here).
        Costs the messages stamped or expired, not the queue's depth: ``ages`` holds the
        available ones oldest first."""
        if q.unstamped:
            held = []
            for e in q.unstamped:
                if q.avail.get(e.pos) is e:
                    q.keep(e)
                    e.ts = now
                    heapq.heappush(q.ages, (now, e.pos))
                elif q.msgs.get(e.mid) is e:
                    held.append(e)  # stamped by the first EXPIRE that sees it available
            q.unstamped = held
        old = {}
        ages = q.ages
        while ages and now - ages[0][0] >= q.ttl_s:
            ts, pos = heapq.heappop(ages)
            e = q.avail.get(pos)
            if e is not None and e.ts == ts:  # else gone, or held (aged again on release)
                old[pos] = e
        self._expired(q, old.values())

    def _expired(self, q: Queue, old) -> None:
        """Dead-letter ``old`` (available messages of ``q`` past its TTL), in queue order."""
        for e in sorted(old, key=lambda e: e.pos):
            q.remove(e)
            q.counters[6] += 1
            if self.listener:
                self.listener(("expire", q.name, e.mid))
            self._to_alternate(q, e, dead_letter=True)
        if old:
            self.touched.add(q.name)

    def _make_room(self, q: Queue, size: int) -> bool:
        """dead_letter_oldest: move the oldest available messages to the alternate until
        a message of ``size`` bytes fits; False (nothing moved) when even moving every
        available one would not make room (what consumers hold stays)."""
        if len(q.acquired) + 1 > q.max_depth or q.held_bytes + size > q.max_bytes:
            return False
        while len(q.msgs) >= q.max_depth or q.bytes + size > q.max_bytes:
            e = q.take()
            q.remove(e)
            q.counters[7] += 1
            if self.listener:
                self.listener(("overflow", q.name, e.mid))
            self._to_alternate(q, e, dead_letter=True)
        return True

    def _to_alternate(self, q: Queue, e: Entry, dead_letter: bool = False) -> None:
        """A message taken off ``q`` (rejected, expired or overflowed) goes to the alternate
        queue, a move and not new data, so beyond the alternate's limits; without one (or
        already there) it is dropped, counted when ``dead_letter``. Its age on the
        alternate counts from the next EXPIRE."""
        alt = self.queues.get(q.alternate) if q.alternate else None
        if alt is None or e.mid in alt.msgs or (dead_letter and alt is q):
            if dead_letter:  # (a queue that is its own alternate would never make room)
                q.counters[8] += 1
                if self.listener:
                    self.listener(("dropped", q.name, e.mid))
            return
        moved = Entry(e.mid, e.body, alt.next_pos)
        alt.next_pos += 1
        alt.push(moved)
        alt.counters[0] += 1
        self.touched.add(alt.name)
        if self.listener:
            self.listener(("rejected", alt.name, e.mid))
        if alt.claim:
            self._feed(alt)

    # -- snapshots ------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The whole state as bytes (see ``_snapshot``), built with the collector off."""
        with no_collection():
            return self._snapshot()

    def head(self) -> list:
        """The state's own fields, as a snapshot begins: [version, epoch, applied, members,
        next_tok]. Version 1 (which builds before the lifecycle read) unless a queue has an
        overflow policy, a TTL or lifecycle counters; then version 2: each queue adds its
        overflow policy and TTL, all nine counters, and each message its timestamp (a
        message's timestamp matters only on a queue with a TTL, so version 1 leaves it
        out)."""
        v2 = not all(q.v1() for q in self.queues.values())
        return [SNAPSHOT_VERSION if v2 else SNAPSHOT_V1, self.epoch, self.applied,
                list(self.members), self.next_tok]

    def _snapshot(self) -> bytes:
        """The whole state, canonical: equal states give equal bytes: ``head()``, then every
        queue's ``meta`` and its messages' ``row``s in publish order."""
        head = self.head()
        v2 = head[0] == SNAPSHOT_VERSION
        return pack(head, ((meta(q, v2), [row(e, None, v2) for e in q.msgs.values()])
                           for q in self.queues.values()))

    def restore(self, data: bytes) -> None:
        """A snapshot of either version, restored with the collector off."""
        with no_collection():
            self._restore(data)

    def _restore(self, data: bytes) -> None:
        head = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)
        *head, queues = head
        self.begin_restore(head)
        for *m, msgs in queues:
            self.add_queue(m).load(msgs)

    def begin_restore(self, head: list) -> None:
        """The first step of a restore (whole or streamed): ``head()`` of the snapshot;
        then ``add_queue`` for each queue, in order, and ``load`` for its messages."""
        v, epoch, applied, members, next_tok = head
        if v not in (SNAPSHOT_V1, SNAPSHOT_VERSION):
            raise ValueError(f"snapshot version {v}")
        self.epoch, self.applied, self.members, self.next_tok = epoch, applied, members, next_tok
        self.levels = {}
        self.arbiters = frozenset()
        self._relevel()
        self.queues = {}
        self.touched = set()

    def add_queue(self, m: list) -> Queue:
        """A queue from its ``meta`` (either version), empty, added to the state."""
        name, alt, depth, nbytes, next_pos, owner, consumers, counters, *v2 = m
        q = Queue(name, alt, depth, nbytes, *v2)
        q.next_pos, q.owner, q.consumers = next_pos, owner, consumers
        q.counters = counters + [0] * (N_COUNTERS - len(counters))
        self.queues[name] = q
        self.touched.add(name)
        return q

    def standing(self) -> dict:
        """{queue: claim} of the claims that stand: the epoch's, like ``levels`` (not in
        snapshots, which are taken as an epoch begins, when none does), kept beside a
        journal's mid-epoch snapshot (durable.py) for the batches replayed after it."""
        return dict(sorted((n, q.claim) for n, q in self.queues.items() if q.claim))

    def stand(self, claims: dict) -> None:
        """Claims of ``standing``, set again on a restored state."""
        for name, n in claims.items():
            q = self.queues.get(name)
            if q is not None and type(n) is int and n > 0:
                q.claim = min(n, MAX_CLAIM)

    def set_arbiters(self, arbiters: Any) -> None:
        """The epoch's arbitrators, for a state restored from a snapshot (which has none)."""
        self.arbiters = frozenset(arbiters)
        self._relevel()

    def adopt(self, other: "QueueState") -> None:
        """Take ``other``'s replicated state (a streamed update, assembled apart)."""
        self.epoch, self.applied, self.members = other.epoch, other.applied, other.members
        self.next_tok, self.queues = other.next_tok, other.queues
        self.levels = {}
        self.arbiters = frozenset()
        self._relevel()
        self.touched = set(self.queues)

    def freeze(self) -> list:
        """The state as it is now, for an update streamed while it moves on: [``head()``,
        [(queue, its ``meta``, its entries in publish order), ...]]. Each queue keeps, from
        now on, the image of every entry it changes (``Queue.keep``) until ``thaw``; ``row``
        of an entry with its kept image is the entry as it was here. Costs a list of
        references per queue, not a copy of the messages."""
        head = self.head()
        v2 = head[0] == SNAPSHOT_VERSION
        queues = []
        for q in self.queues.values():
            q.kept, q.cut = {}, q.next_pos
            queues.append((q, meta(q, v2), list(q.msgs.values())))
        return [head, queues]

    @staticmethod
    def thaw(frozen: list) -> None:
        """The update of ``freeze`` is over: its queues stop keeping images."""
        for q, _m, _entries in frozen[1]:
            q.kept = None

    def digest(self) -> str:
        """A short hash of the canonical snapshot and the standing claims (replicas compare
        it)."""
        claims = self.standing()  # (none: the bytes an older build hashes)
        extra = msgpack.packb(claims, use_bin_type=True) if claims else b""
        return hashlib.sha256(self.snapshot() + extra).hexdigest()[:16]

    def content(self) -> dict:
        """{queue: {mid: holder}} (tests and debugging)."""
        return {q.name: {e.mid: e.holder for e in q.msgs.values()} for q in self.queues.values()}


def image(e: Entry) -> tuple:
    """What of an entry changes after it was published (see ``Queue.keep``)."""
    return e.holder, e.tok, e.tepoch, e.deliveries, e.ts


def pack(head: list, queues: Any) -> bytes:
    """A whole snapshot's bytes: ``head``, then every queue's ``meta`` with its messages'
    ``row``s (``queues`` yields (meta, rows))."""
    return msgpack.packb(head + [[m + [rows] for m, rows in queues]], use_bin_type=True)


def meta(q: Queue, v2: bool) -> list:
    """A queue in a snapshot, without its messages."""
    counters = list(q.counters if v2 else q.counters[:N_COUNTERS_V1])
    return [q.name, q.alternate, q.max_depth, q.max_bytes, q.next_pos, q.owner,
            list(q.consumers), counters] + ([q.overflow, q.ttl_s] if v2 else [])


def row(e: Entry, kept: Optional[tuple], v2: bool) -> list:
    """A message in a snapshot: as it is, or as ``kept`` (its image) says it was."""
    holder, tok, tepoch, deliveries, ts = kept or image(e)
    r = [e.mid[0], e.mid[1], e.body, e.pos, holder, tok, tepoch, deliveries]
    if v2:
        r.append(ts)
    return r


@contextlib.contextmanager
def no_collection():
    """Python's cycle collector off while a snapshot is built or restored: the millions of
    lists and entries made would set off collections that each walk every object of the
    process (a snapshot of 1,000,000 messages took 13.4 s with it, 0.66 s without; its
    restore 5.1 s and 1.2 s). Nothing made here forms a cycle; the collector is back on
    (if it was) right after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _time(x: Any) -> float:
    """A time or duration from a command, in seconds; ValueError (malformed) unless a
    finite number."""
    if type(x) not in (int, float) or not math.isfinite(x):
        raise ValueError(f"not a time: {x!r}")
    return float(x)
