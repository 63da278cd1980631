"""One member's replica of the work queues: sans-IO (a clock function in, messages out).

The driver (the asyncio service in stack/runtime/workqueue.py, or the simulator driver in
stack/workqueue/sim.py) feeds it every view change and every delivered message, in
delivery order and synchronously, and sends what ``take_outgoing()`` returns. API calls
(``publish``, ``acquire``, ``settle``, ``create``) return a ``Request`` whose ``callback``
runs when it completes.

Epochs and reconciliation. Every view's state exchange (the primary component's round,
stack/primary.py) carries each member's queue position: (epoch, batches applied in it,
the epoch's members), answered by ``exchange_data()`` once every delivery of the previous
view was applied here. The driver hands every member's position to ``on_exchange()``
just before the view, so every member of a primary view decides the same, at once and in
the same round as the primary component itself (a second round would leave a window in
which a crash strands the queue while the group is primary): the most advanced state
(highest epoch, then most batches applied in it; every member's state is a prefix of the
same epoch's total order, so the longest contains every other) and its first holder in
view order, the donor. Members holding it apply the view (``begin_epoch``: what members
that left had acquired is requeued, their interest and ownership pass on) and go on; the
donor sends the state to the others (joiners too), who hold later deliveries until it
came. Commands carrying another epoch are refused whole, and their senders send them
again in the new epoch. So a member that was in a minority, or whose last primary view
ended before it received everything, is brought back exactly, and a merge after a
partition keeps the primary side's state. When a majority of the most advanced state's
epoch members is missing, another component may have moved on from it: the queue waits.

Completion. A command's result is known when its batch is applied here; the call completes
when a majority of the epoch's members reported (APPLIED, to the senders of what they
applied) that they applied it too (or at
once with ``ack="local"``). Since the next primary component holds a majority of this
one's members, a completed call survives partitions. A member that drops out of the
primary component fails its calls: not yet sent -> QueueNotPrimary (they never take
effect); sent, or applied but not confirmed -> QueueOutcomeUnknown (the primary side may
have ordered and applied what this member never received).

Queue ownership (the Qpid design's QueueOwnerHandler): a member with waiting consumers multicasts
CONSUME (interested); the owner acquires for its consumers, in batches; it passes the
queue on (OWNER_RELEASE) when its time slice ran out and others are interested, and
CANCELs when its consumers are gone (after ``interest_linger_s``).
"""
from __future__ import annotations

import collections
import enum
from typing import Any, Callable, NamedTuple, Optional

from ..errors import MessageTooLarge
from . import codec
from . import durable as journaling
from . import ties
from .codec import (ACQUIRE, APPLIED, BATCH, CANCEL, CONSUME, CREATE, DECLARE, DELETE,
                    DEQUEUE, ENQUEUE, EXPIRE, LEVEL, OWNER_RELEASE, PROMISED, PURGE, REJECT,
                    RELEASE, SNAP, UPDATE, UPDATE_ACK)
from .config import ACK_LOCAL, WorkQueueConfig
from .errors import (NoSuchQueue, NotAcquired, QueueArbitrator, QueueClosed, QueueError,
                     QueueFull, QueueNotPrimary, QueueOutcomeUnknown, QueueUnsupported,
                     StaleEpoch)
from .state import (CLAIM_LEVEL, FULL, LIFECYCLE_LEVEL, NO_QUEUE, NOT_ACQUIRED, NOT_OWNER,
                    OK, OVERFLOWS, REJECT_PUBLISH, RETRY, STALE_EPOCH, TOO_LARGE, UNSUPPORTED,
                    QueueState)
from .update import Incoming, Outgoing


class Phase(enum.Enum):
    IDLE = "idle"                      # no view yet
    NOT_PRIMARY = "not_primary"        # non-primary view, excluded, or no quorum of epochs
    PROMISE = "promise"                # durable: waiting for most disks to promise the epoch
    AWAIT_SNAPSHOT = "await_snapshot"  # our state was behind: waiting for the donor's
    ACTIVE = "active"
    ARBITER = "arbiter"                # an arbitrator in a primary view: votes, holds nothing
    CLOSED = "closed"


NEW, SENT, APPLIED_, DONE = range(4)
ARBITER = -1
"""An arbitrator's "batches applied" in its queue position: it holds no state."""
SETTLE_OPS = {"accept": DEQUEUE, "release": RELEASE, "reject": REJECT}
GATED_KINDS = {"purge": PURGE, "delete": DELETE, "declare": DECLARE}
"""Calls that wait for every member of the epoch to announce the lifecycle's queue level."""


class Delivery:
    """A message acquired for a consumer of this member: settle it with accept (dequeue),
    release or reject. ``token`` = (epoch, number) of the acquisition, checked by every
    member when it is settled."""
    __slots__ = ("queue", "mid", "body", "token", "redelivered")

    def __init__(self, queue: str, mid: tuple, body: bytes, token: tuple, redelivered: bool):
        self.queue, self.mid, self.body, self.token = queue, mid, body, token
        self.redelivered = redelivered

    @property
    def publisher(self) -> bytes:
        return self.mid[0]

    @property
    def seq(self) -> int:
        return self.mid[1]

    def __repr__(self) -> str:
        return (f"Delivery({self.queue!r}, seq={self.mid[1]}, token={self.token}, "
                f"redelivered={self.redelivered}, {len(self.body)} bytes)")


class Request:
    """One call in progress. ``result`` (a list of Delivery for acquire) or ``error`` is set
    when ``done``; ``callback(request)`` runs then."""
    __slots__ = ("kind", "queue", "args", "status", "cseq", "pos", "epoch", "result",
                 "error", "callback", "want", "got", "many", "delivery", "cancelled",
                 "deadline", "stamp", "refusal")

    def __init__(self, kind: str, queue: str, args: list,
                 callback: Optional[Callable[["Request"], None]]):
        self.kind, self.queue, self.args, self.callback = kind, queue, args, callback
        self.status = NEW
        self.cseq = 0
        self.pos = 0
        self.epoch = 0
        self.result: Any = None
        self.error: Optional[Exception] = None
        self.want = 0
        self.got: list = []
        self.many = False
        self.delivery: Optional[Delivery] = None
        self.cancelled = False
        self.deadline: Optional[float] = None  # a gated call: when it gives up waiting
        self.stamp: Optional[float] = None     # a publish: its wall-clock time (TTL)
        self.refusal: Optional[Exception] = None  # refused where applied: once confirmed

    @property
    def done(self) -> bool:
        return self.status == DONE

    def __repr__(self) -> str:
        return f"Request({self.kind} {self.queue!r} status={self.status} error={self.error!r})"


class _Local:
    """This member's side of one queue: waiting consumers, acquisitions in flight,
    interest and ownership decisions."""
    __slots__ = ("waiters", "inflight", "undurable", "consume_sent", "cancel_sent",
                 "release_sent", "owned_since", "last_interest", "ready")

    def __init__(self) -> None:
        self.waiters: collections.deque = collections.deque()
        self.inflight = 0            # messages asked for by ACQUIREs not applied yet
        self.undurable = 0           # acquired, waiting for the majority
        # acquired and confirmed, come when no consumer waited (a standing claim's, between
        # a consumer's calls): the next waiter's first, released once interest lapses
        self.ready: collections.deque = collections.deque()
        self.consume_sent = False
        self.cancel_sent = False
        self.release_sent = False
        self.owned_since: Optional[float] = None
        self.last_interest = float("-inf")


def _err(code: int, what: str) -> Exception:
    if code == FULL:
        return QueueFull(f"{what}: the queue is at its depth or bytes limit")
    if code == NO_QUEUE:
        return NoSuchQueue(what)
    if code == STALE_EPOCH:
        return StaleEpoch(f"{what}: the acquisition's epoch was superseded (requeued)")
    if code == NOT_ACQUIRED:
        return NotAcquired(f"{what}: not held by this acquisition")
    if code == TOO_LARGE:
        return MessageTooLarge(what)
    if code == UNSUPPORTED:
        return QueueUnsupported(f"{what}: a member of the view does not know the queue "
                                f"lifecycle (an older build)")
    return QueueError(f"{what}: refused ({code})")


STREAM_LEVEL = 3
"""The queue level of a build that streams a stale member's update (update.py)."""


class _Forming(NamedTuple):
    """An epoch a view forms, waiting in PROMISE for most disks to promise its number."""
    epoch: int
    order: list
    donor: bytes
    in_step: set      # the holders whose state is the donor's
    joint: list       # what our announcements say once it takes effect
    base: list
    key: list


class Replica:
    level = CLAIM_LEVEL
    """The queue level of this build, announced in every epoch (LEVEL): it knows the
    lifecycle commands (``LIFECYCLE_LEVEL``; a member announcing less, or nothing, keeps
    every member from applying them), asks for a streamed update when stale
    (``STREAM_LEVEL``; a build below it waits for the whole snapshot, which its donor sends
    when it does not ask), and an owner's ACQUIRE leaves a standing claim
    (``CLAIM_LEVEL``, state.py: while a member below it is in the epoch, none does)."""

    def __init__(self, local: Any, config: Optional[WorkQueueConfig] = None,
                 clock: Callable[[], float] = lambda: 0.0,
                 wall: Optional[Callable[[], float]] = None,
                 durable: bool = False, recovered: Optional[Any] = None,
                 ties: bool = False):
        """``local``: this member's Address (its ``uid`` identifies it in the state).
        ``clock``: seconds, for timeouts and intervals (monotonic); ``wall``: seconds since
        the epoch, comparable across members, for message timestamps and EXPIRE's cut-off
        (default: ``clock``). ``durable``: the driver journals what ``take_journal`` returns
        and reports what is on disk (``on_durable``); ``recovered``: what this member's
        journal gave back (``durable.replay``). ``ties``: durable, the even split's tie
        (ties.py) may make exactly half of a list "most" of it; the driver takes each tie
        ``take_ties`` asks for from a store that outlives the group and reports the holder
        (``on_tie``)."""
        self.config = cfg = config or WorkQueueConfig()
        self.local = local
        self.uid: bytes = local.uid
        self.clock = clock
        self.wall = wall or clock
        self.gated: list = []                 # lifecycle calls waiting for every member's level
        self.next_expire = float("-inf")
        self.state = QueueState(cfg.max_depth, cfg.max_bytes, cfg.max_message_size)
        self.durable = durable and not cfg.arbitrator
        self.before: list = []                # earlier incarnations on our journal
        self.joint: list = []                 # member lists our epoch must be durable at
        self.base: list = []                  # [epoch, applied] it came from, established
        self.key: list = []                   # the view key of our epoch's formation
        self.claims: dict = {}                # uid -> the incarnations it stands for
        self.promised = 0                     # the highest epoch number journaled as promised
        self.forming: Optional[_Forming] = None  # the epoch waiting for its promises
        self.promises: dict = {}              # (view key, epoch) -> members that promised it
        self.early: list = []                 # a SNAP and asks for the update, in PROMISE
        self.diskless: set = set()            # members of the view with no journal
        self.coming: tuple = ([], [], [])     # joint, base, key of the state we await
        self.use_ties = ties and self.durable
        self.ties: dict = {}                  # tie name -> the half the store gave it to
        self.need_tie: Optional[tuple] = None  # (tie name, our half): the forming epoch's
        self.tie_asks: list = []              # (tie name, half) for the driver to ask
        self.tie_failed: dict = {}            # tie name -> when the store last failed us
        self.tie_asking: set = set()          # tie names asked, not answered yet
        if recovered is not None:
            r = recovered
            self.state, self.before = r.state, list(r.incarnations)
            self.joint, self.base, self.key = list(r.joint), list(r.base), list(r.key)
            self.promised = r.promised
        self.synced = (self.state.epoch, self.state.applied)  # on disk (durable)
        self.journal: list = []               # journaling.Entry for the driver
        self.journal_bytes = 0                # journaled since the last image
        self.image_bytes = 0                  # the last image's size
        if self.durable:
            self._journal(journaling.REC, journaling.me_record(self.uid))
        self.phase = Phase.IDLE
        self.view = None
        self.view_key: Optional[list] = None
        self.exchange: Optional[tuple] = None  # (view key, {uid: position}) for the next view
        self.await_key: Optional[list] = None
        self.held: list = []                  # ordered deliveries while awaiting state
        self.incoming: Optional[Incoming] = None  # the update we load, when stale
        self.arbs: set = set()                # the arbitrators of the view's exchange
        self.outgoing: Optional[Outgoing] = None  # the update we stream, as a donor
        self.cseq = 0
        self.pseq = 0
        self.sent: dict = {}                  # cseq -> Request or ("internal", queue, op)
        self.unsent: list = []                # requests waiting for an active epoch
        self.undurable: collections.deque = collections.deque()  # (pos, kind, payload)
        self.acks: dict = {}                  # member uid -> (epoch, applied)
        self.reported: Optional[tuple] = None
        self.report_to: set = set()           # senders of batches applied since we reported
        self.report_all = False
        self.batch: list = []
        self.batch_size = 0
        self.outbox: list = []                # (dest, payload, ordered)
        self.local_queues: dict = {}          # name -> _Local
        self.live: dict = {}                  # token -> Delivery handed to consumers
        self.stats = collections.Counter()
        self.closed_by: Optional[Exception] = None

    # ======================================================================================
    # inputs from the driver
    # ======================================================================================
    def exchange_data(self) -> list:
        """What this member announces in a view's state exchange: [epoch, batches applied
        in it, the epoch's members], and, from a durable member (durable.py): the uids of
        the earlier incarnations that used its journal (it stands for each in an epoch's
        majority); while its epoch is not established, the member lists it must be
        established at and the established position it came from; the view key of the
        epoch's formation (two epochs formed apart may carry one number); whether its disk
        has the epoch; the highest epoch number it promised (the ballot)."""
        s = self.state
        out = [s.epoch, ARBITER if self.config.arbitrator else s.applied, list(s.members)]
        if self.durable:
            out += [list(self.before), [list(x) for x in self.joint], list(self.base),
                    list(self.key), self.synced[0] == s.epoch, max(self.promised, s.epoch)]
        return out

    def on_exchange(self, view_key: list, data: dict) -> None:
        """Every member's announcement ({uid: as ``exchange_data``}) in the state exchange
        of the view delivered next (``view_key``: [coordinator uid, counter])."""
        self.exchange = (list(view_key), data)

    def on_view(self, view: Any) -> None:
        if self.phase is Phase.CLOSED:
            return
        key = [view.view_id.coord.uid, view.view_id.id]
        if key == self.view_key:
            return  # the same view again
        exchange, self.exchange = self.exchange, None
        self.view, self.view_key = view, key
        self.await_key, self.held, self.incoming = None, [], None
        self.forming, self.early, self.need_tie = None, [], None
        self.promises = {k: v for k, v in self.promises.items() if k[0] == tuple(key)}
        self._end_update()
        self._drop_batch()
        if self.local not in view.members or not view.primary:
            self._lose_primary("not in a primary component")
            return
        order = [m.uid for m in view.members]
        positions = _positions(exchange[1], order) \
            if exchange is not None and exchange[0] == key else None
        if positions is None:  # every member decides alike: the same exchange everywhere
            self.stats["positions_missing"] += 1
            self._lose_primary("the state exchange lacks a member's queue position")
            return
        self.stats["rounds"] += 1
        self._reconcile(key, order, positions)

    def on_message(self, msg: Any) -> bool:
        """One delivered message. False: not a work-queue message (the application's)."""
        p = msg.payload
        if not codec.is_queue_payload(p):
            return False
        if self.phase is Phase.CLOSED:
            return True
        try:
            obj = codec.decode(p)
            kind = obj[0]
            sender = msg.sender.uid
            if kind == BATCH:
                if self.phase is Phase.ACTIVE:
                    self._apply(sender, obj, p)
                elif self.phase in (Phase.AWAIT_SNAPSHOT, Phase.PROMISE):
                    self.held.append((sender, obj, p))
                elif self.phase is Phase.ARBITER:
                    self.stats["batches_arbitrated"] += 1  # ordered, not for an arbitrator
                else:
                    self.stats["batches_refused"] += 1  # refused by every member alike
            elif kind == APPLIED and not self.config.arbitrator:
                epoch, applied = obj[1], obj[2]
                # reports go by multicast or unicast, two streams with no order between
                # them: an older report may come after a newer one and must not undo it
                if type(epoch) is int and type(applied) is int and \
                        (epoch, applied) > self.acks.get(sender, (-1, -1)):
                    self.acks[sender] = (epoch, applied)
                    self._check_durable()
            elif kind == PROMISED:
                _, key, epoch = obj
                self._promised_by(sender, key, epoch)
            elif self.phase is Phase.PROMISE and kind in (SNAP, UPDATE_ACK) and \
                    obj[1] == self.view_key and len(self.early) < 2 * len(self.view.members):
                self.early.append((sender, obj))  # for the epoch once most disks promised it
            elif kind == SNAP:
                self._on_snapshot(obj)
            elif kind == UPDATE and self.level >= STREAM_LEVEL:
                self._on_update(sender, obj)
            elif kind == UPDATE_ACK and self.level >= STREAM_LEVEL:
                self._on_update_ack(sender, obj)
            else:
                self.stats["malformed"] += 1
        except (ValueError, TypeError, IndexError, KeyError, AttributeError):
            self.stats["malformed"] += 1
        return True

    def tick(self) -> None:
        """Time slices, lingering interest, the gated calls' deadlines and EXPIRE (the
        driver calls it every ``tick_s``)."""
        if self.phase is Phase.ACTIVE:
            for name in list(self.local_queues):
                self._pump(name)
            self._ungate()
            self._expire()
        if self.outgoing is not None:
            self._send_update(self.outgoing.overdue(self.clock(), self.config.update_ask_s))
        if self.phase is Phase.PROMISE and self.need_tie is not None:
            self._ask_tie()

    def _expire(self) -> None:
        """The epoch's first member multicasts EXPIRE every ``expire_interval_s`` with its
        wall clock, while a queue with a TTL holds available messages: every member applies
        it in total order, so all expire the same messages."""
        s = self.state
        now = self.clock()
        holders = s.holders()
        if not holders or holders[0] != self.uid or now < self.next_expire:
            return
        self.next_expire = now + self.config.expire_interval_s
        if s.level() >= LIFECYCLE_LEVEL and \
                any(q.ttl_s is not None and q.avail for q in s.queues.values()):
            self.stats["expires_sent"] += 1
            self._internal(None, EXPIRE, cmd=[EXPIRE, self.wall()])

    def take_outgoing(self) -> list:
        """[(dest Address or None, payload bytes, ordered)] to send, in this order."""
        self._seal()
        s = self.state
        mine = self._mine()
        if self.phase is Phase.ACTIVE and len(s.holders()) > 1 and mine[0] == s.epoch and \
                self.reported != mine and (self.report_to or self.report_all):
            # what we applied (durable: what is on disk), to the members whose batches it
            # includes (they wait for a majority); to everyone when that is everyone or a
            # new epoch began
            self.reported = mine
            payload = codec.encode([APPLIED, *mine])
            to = self.report_to - {self.uid}
            if self.report_all or len(to) >= len(s.members) - 1:
                self.outbox.append((None, payload, False))
            else:
                for a in self.view.members:
                    if a.uid in to:
                        self.outbox.append((a, payload, False))
            if mine[1] == s.applied:  # else they hear again once the rest is on disk
                self.report_to, self.report_all = set(), False
        out, self.outbox = self.outbox, []
        return out

    def _mine(self) -> tuple:
        """The position this member counts as applied: durable, what its journal holds."""
        s = self.state
        return self.synced if self.durable else (s.epoch, s.applied)

    # -- the even split's tie (ties.py) ------------------------------------------------------
    def take_ties(self) -> list:
        """[(tie name, half)] for the driver to ask the store (``ties.ask``), each once."""
        out, self.tie_asks = self.tie_asks, []
        return out

    def on_tie(self, tie: str, holder: Optional[frozenset]) -> None:
        """The store's answer to a ``take_ties`` ask: the half holding the tie, or None (it
        failed: asked again after ``tie_retry_s``)."""
        self.tie_asking.discard(tie)
        if holder is None:
            self.stats["tie_errors"] += 1
            ties.remember(self.tie_failed, tie, self.clock())
            return
        self.tie_failed.pop(tie, None)
        ties.remember(self.ties, tie, holder)
        if self.need_tie is None or self.need_tie[0] != tie or self.phase is not Phase.PROMISE:
            return
        if holder != self.need_tie[1]:
            self.stats["ties_lost"] += 1
            self._lose_primary("the other half of the last epoch holds its tie")
            return
        self.stats["ties_won"] += 1
        self._check_promises()

    def _ask_tie(self) -> None:
        """Ask for the forming epoch's tie unless known, after a failure again once
        ``tie_retry_s`` passed."""
        tie, half = self.need_tie
        failed = self.tie_failed.get(tie, float("-inf"))
        if tie not in self.ties and tie not in self.tie_asking and \
                self.clock() - failed >= self.config.tie_retry_s:
            self.tie_asking.add(tie)
            self.tie_asks.append((tie, half))

    def _tie_holder(self, joint: list, base: list) -> Optional[frozenset]:
        """The known holder of the tie of a chain's first list (ties.py), if any."""
        if not (self.use_ties and joint and base):
            return None
        return self.ties.get(ties.name(joint[0], base[0]))

    # -- the journal (durable.py) ------------------------------------------------------------
    def take_journal(self) -> list:
        """[journaling.Entry] to write, in this order (a durable replica; else always [])."""
        out, self.journal = self.journal, []
        return out

    def on_durable(self, pos: tuple) -> None:
        """The journal holds everything up to queue position ``pos`` (epoch, applied, the
        highest epoch number promised)."""
        if tuple(pos[:2]) > self.synced:
            self.synced = tuple(pos[:2])
            self._check_durable()
        f = self.forming
        if f is not None and self.phase is Phase.PROMISE and pos[2] >= f.epoch:
            self.outbox.append((None, codec.encode([PROMISED, self.view_key, f.epoch]), False))
            self._promised_by(self.uid, self.view_key, f.epoch)

    def _established(self) -> bool:
        """Our epoch is on the disk of most members of each epoch it came from (``joint``),
        counted through the incarnations each member of the view stands for; arbitrators of
        the view count (they hold no disk; restarted, they stand for nobody). Then it is
        journaled as such and calls in it may complete."""
        s = self.state
        knows = set(self.arbs)
        if self.synced[0] >= s.epoch:
            knows.add(self.uid)
        for m, a in self.acks.items():
            if a[0] >= s.epoch:
                knows.add(m)
        if not ties.most_of_each(self.joint, self._stands_for(knows),
                                 self._tie_holder(self.joint, self.base)):
            return False
        self.joint = []
        self.stats["epochs_established"] += 1
        self._journal(journaling.REC, journaling.seal_record(s.epoch))
        return True

    def _stands_for(self, members) -> set:
        """The incarnations ``members`` of the view stand for (``claims``)."""
        return set().union(*(self.claims.get(m, {m}) for m in members))

    def _image(self) -> bytes:
        return journaling.image(self.state, self._incarnations(),
                                [self.joint, self.base, self.key, self.promised])

    def _incarnations(self) -> list:
        return journaling.remember(self.before, self.uid)

    def _journal(self, kind: str, data: Optional[bytes], image: Optional[bytes] = None) -> None:
        s = self.state
        self.journal.append(journaling.Entry(kind, data, (s.epoch, s.applied, self.promised),
                                             image))
        self.journal_bytes += len(data or b"") + len(image or b"")
        if image is not None:
            self.journal_bytes, self.image_bytes = 0, len(image)
        elif self.journal_bytes > max(self.config.journal_compact_bytes, 2 * self.image_bytes):
            # compaction: the state as it is, beside the log (one pass over its messages;
            # amortized, the log grows twice the state's size first)
            img = self._image()
            self.journal.append(journaling.Entry(journaling.SNAP, None, None, img))
            self.stats["journal_compactions"] += 1
            self.journal_bytes, self.image_bytes = 0, len(img)

    def close(self, error: Optional[QueueClosed] = None) -> None:
        """Fail every call (``error``, default QueueClosed; QueueOutcomeUnknown for those
        under way) and stop; later calls raise ``error`` too."""
        self._end_update()
        err = error or QueueClosed("the work queue service was closed")
        self._fail_all(err, QueueOutcomeUnknown(f"{err} (with the call under way)"))
        self.phase, self.closed_by = Phase.CLOSED, err

    # ======================================================================================
    # API
    # ======================================================================================
    def create(self, name: str, alternate: Optional[str] = None,
               max_depth: Optional[int] = None, max_bytes: Optional[int] = None,
               callback=None, overflow: Optional[str] = None,
               ttl_s: Optional[float] = None) -> Request:
        """Create the queue if it does not exist (the first creation's settings win).
        ``overflow``: "reject_publish" (default: QueueFull) or "dead_letter_oldest";
        ``ttl_s``: messages older than this are dead-lettered. Either one makes it a
        lifecycle call (QueueUnsupported while an older build is in the view)."""
        if overflow is not None and overflow not in OVERFLOWS:
            raise ValueError(f"overflow must be one of {OVERFLOWS}, not {overflow!r}")
        if ttl_s is not None and not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, not {ttl_s!r}")
        if (overflow or REJECT_PUBLISH) == REJECT_PUBLISH and ttl_s is None:
            req = Request("create", name, [name, alternate, max_depth, max_bytes], callback)
            return self._submit(req)
        return self._submit(Request("declare", name, [name, alternate, max_depth, max_bytes,
                                                      overflow or REJECT_PUBLISH, ttl_s],
                                    callback))

    def purge(self, name: str, callback=None) -> Request:
        """Drop every available (not acquired) message of the queue; ``result``: how many."""
        return self._submit(Request("purge", name, [name], callback))

    def delete(self, name: str, callback=None) -> Request:
        """Delete the queue everywhere, with everything on it; ``result``: how many
        messages went. Later calls on it raise NoSuchQueue (until it is created again);
        deliveries held from it can no longer be settled."""
        return self._submit(Request("delete", name, [name], callback))

    def publish(self, queue: str, body: bytes, callback=None) -> Request:
        if not isinstance(body, bytes):
            body = bytes(body)
        if len(body) > self.config.max_message_size:
            raise MessageTooLarge(f"a body of {len(body)} bytes; at most "
                                  f"{self.config.max_message_size} (max_message_size)")
        self.pseq += 1
        req = Request("publish", queue, [queue, self.pseq, body], callback)
        req.stamp = self.wall()
        return self._submit(req)

    def republish(self, queue: str, body: bytes, seq: int, callback=None) -> Request:
        """Publish again the message this replica published as ``seq`` (a retry after an
        unknown outcome): it is stored once, and a retry of a message still on the queue
        succeeds even when the queue is full."""
        if not 0 < seq <= self.pseq:
            raise ValueError(f"sequence {seq} was never published here")
        req = Request("publish", queue, [queue, seq, bytes(body)], callback)
        req.stamp = self.wall()
        return self._submit(req)

    def acquire(self, queue: str, n: int = 1, callback=None, many: bool = False) -> Request:
        """Wait for ``n`` messages (``many``: complete with at least one, as soon as nothing
        more is on its way). The driver cancels it on timeout with ``cancel``."""
        req = Request("acquire", queue, [], callback)
        req.want, req.many = max(1, int(n)), many
        if self.config.arbitrator:
            self._finish(req, error=self._arbitrator())
            return req
        if self.phase is Phase.NOT_PRIMARY or self.phase is Phase.CLOSED:
            self._finish(req, error=self._not_primary() if self.phase is Phase.NOT_PRIMARY
                         else self.closed_by)
            return req
        lq = self._lq(queue)
        lq.waiters.append(req)
        lq.last_interest = self.clock()
        self._pump(queue)
        return req

    def cancel(self, req: Request) -> None:
        """Give up a waiting acquire (timeout): what it already holds goes back (a "many"
        acquire completes with it instead)."""
        if req.kind != "acquire" or req.done:
            return
        req.cancelled = True
        lq = self.local_queues.get(req.queue)
        if lq is not None and req in lq.waiters:
            lq.waiters.remove(req)
        got, req.got = req.got, []
        if req.many and got:
            self._finish(req, result=got)  # keeps what it has
        else:
            for d in got:
                self._orphan(d)
            self._finish(req, error=None, result=[])
        if self.phase is Phase.ACTIVE:
            self._pump(req.queue)

    def settle(self, op: str, delivery: Delivery, callback=None) -> Request:
        """``op``: "accept" (dequeue), "release" or "reject"."""
        code = SETTLE_OPS[op]
        d = delivery
        req = Request(op, d.queue, [code, d.queue, d.mid[0], d.mid[1], d.token[0], d.token[1]],
                      callback)
        req.delivery = d
        return self._submit(req)

    # ======================================================================================
    # sending
    # ======================================================================================
    def _submit(self, req: Request) -> Request:
        if self.phase is Phase.ACTIVE:
            self._dispatch(req)
        elif self.config.arbitrator:
            self._finish(req, error=self._arbitrator())
        elif self.phase in (Phase.AWAIT_SNAPSHOT, Phase.PROMISE, Phase.IDLE):
            self.unsent.append(req)
        elif self.phase is Phase.CLOSED:
            self._finish(req, error=self.closed_by)
        else:
            self._finish(req, error=self._not_primary())
        return req

    def _arbitrator(self) -> Exception:
        return QueueArbitrator(f"member {self.local} is an arbitrator: it holds no queues")

    def _dispatch(self, req: Request) -> None:
        """Send it, or, for a lifecycle call while a member of the epoch has not announced
        the lifecycle's level, wait for that (``lifecycle_wait_s``; then QueueUnsupported)."""
        if req.kind in GATED_KINDS:
            if req.deadline is None:
                req.deadline = self.clock() + self.config.lifecycle_wait_s
            if self.state.level() < LIFECYCLE_LEVEL:
                self.gated.append(req)
                self._ungate()  # at once when the wait is 0
                return
        self._send(req)

    def _ungate(self) -> None:
        if not self.gated or self.phase is not Phase.ACTIVE:
            return
        ready = self.state.level() >= LIFECYCLE_LEVEL
        now = self.clock()
        gated, self.gated = self.gated, []
        for r in gated:
            if r.done:
                continue
            if ready:
                self._send(r)
            elif now >= r.deadline:
                self.stats["lifecycle_unsupported"] += 1
                self._finish(r, error=_err(UNSUPPORTED, f"{r.kind} on {r.queue!r}"))
            else:
                self.gated.append(r)

    def _command(self, req: Request) -> list:
        k = req.kind
        if k == "publish":
            if req.stamp is not None and self.state.level() >= LIFECYCLE_LEVEL:
                return [ENQUEUE, *req.args, req.stamp]  # every member reads the timestamp
            return [ENQUEUE, *req.args]
        if k == "create":
            return [CREATE, *req.args]
        if k in GATED_KINDS:
            return [GATED_KINDS[k], *req.args]
        return list(req.args)  # settle: [op, queue, pub, pseq, tepoch, tok]

    def _send(self, req: Request) -> None:
        self.cseq += 1
        req.cseq, req.status, req.epoch = self.cseq, SENT, self.state.epoch
        self.sent[self.cseq] = req
        self._add([self.cseq, *self._command(req)])

    def _internal(self, queue: Optional[str], op: int, *args, cmd: Optional[list] = None) -> None:
        """A command of the replica's own (``cmd``: when it is not [op, queue, *args])."""
        self.cseq += 1
        self.sent[self.cseq] = ("internal", queue, op, args)
        self._add([self.cseq, *(cmd or (op, queue, *args))])

    def _add(self, cmd: list) -> None:
        size = codec.packed_size(cmd)
        cfg = self.config
        if self.batch and (self.batch_size + size > cfg.batch_max_bytes or
                           len(self.batch) >= cfg.batch_max_commands):
            self._seal()
        self.batch.append(cmd)
        self.batch_size += size
        if size > cfg.batch_max_bytes:
            self._seal()

    def _seal(self) -> None:
        if self.batch:
            self._emit(None, [BATCH, self.state.epoch, self.batch], True)
            self.stats["batches_sent"] += 1
            self.stats["commands_sent"] += len(self.batch)
            self.batch, self.batch_size = [], 0

    def _drop_batch(self) -> None:
        """A view change: unsent commands of the old epoch would be refused anyway."""
        self.batch, self.batch_size = [], 0
        self.outbox = [o for o in self.outbox if not o[2]]

    def _emit(self, dest, obj: list, ordered: bool) -> None:
        if obj[0] != BATCH:
            self._seal()  # keep the order: commands added before go first
        self.outbox.append((dest, codec.encode(obj), ordered))

    # ======================================================================================
    # applying batches
    # ======================================================================================
    def _apply(self, sender: bytes, obj: list, raw: bytes) -> None:
        _, epoch, cmds = obj
        s = self.state
        results = s.apply(sender, epoch, cmds)
        self.stats["batches_applied"] += 1
        if self.durable:
            self._journal(journaling.REC, journaling.batch_record(sender, raw))
        self.report_to.add(sender)
        if sender == self.uid:
            pos = s.applied
            for cseq, code, data in results:
                r = self.sent.pop(cseq, None)
                if r is None:
                    continue  # superseded (resent in this epoch) or malformed
                if type(r) is tuple:
                    self._internal_result(r, code)
                else:
                    self._result(r, code, data, pos)
        for name, owner, got in s.claimed:
            self.report_to.add(owner)  # it waits for a majority of this batch too
            if owner == self.uid:  # our standing claim took these (any member's batch)
                self.stats["claimed"] += len(got)
                self._got(name, got, s.applied)
        if sender == self.uid or s.claimed:
            self._check_durable()
        if s.touched:
            touched, s.touched = s.touched, set()
            for name in sorted(touched):  # one order everywhere (a set of str: hash seeds)
                if name in self.local_queues:
                    self._pump(name)
        if self.gated:
            self._ungate()  # a LEVEL may have opened the gate

    def _result(self, req: Request, code: int, data: Any, pos: int) -> None:
        if code == RETRY:
            if self.phase is Phase.ACTIVE:
                self._send(req)  # (not expected: resends happen at activation)
            else:
                self.sent[req.cseq] = req
            return
        if req.kind == "acquire-cmd":
            self._acquired(req, code, data, pos)
            return
        if req.kind in SETTLE_OPS:
            self.live.pop(req.delivery.token, None)  # settled, or not ours any more
        if code == UNSUPPORTED and self.phase is Phase.ACTIVE and \
                (req.kind == "publish" or req.kind in GATED_KINDS):
            # sent before a view change and resent into an epoch whose members have not
            # all announced the lifecycle yet: wait for them again (a publish goes again
            # without its timestamp); nothing was applied anywhere
            self.stats["lifecycle_regated"] += 1
            req.deadline = None
            self._dispatch(req)
            return
        if code != OK:
            # refused by the state here, which a majority may not have confirmed (a member
            # cut off with what only it and a minority applied): final once it is, as a
            # result is; the epoch lost first, the outcome is unknown
            req.refusal = _err(code, f"{req.kind} on {req.queue!r}")
            if self.config.ack == ACK_LOCAL:
                self._finish(req, error=req.refusal)
                return
        req.status, req.pos = APPLIED_, pos
        if req.refusal is not None:
            self.undurable.append((pos, "req", req))
            return
        if req.kind in GATED_KINDS:
            req.result = data  # purge, delete: how many messages went
        if self.config.ack == ACK_LOCAL:
            self._finish(req)
        else:
            self.undurable.append((pos, "req", req))  # _apply checks once per batch

    def _internal_result(self, r: tuple, code: int) -> None:
        _, name, op, _args = r
        lq = self.local_queues.get(name) if name is not None else None
        if lq is None:
            return
        if op == CONSUME:
            lq.consume_sent = False
        elif op == CANCEL:
            lq.cancel_sent = False
        elif op == OWNER_RELEASE:
            lq.release_sent = False
            lq.owned_since = None
        self._pump(name)

    # -- acquisitions ------------------------------------------------------------------------
    def _acquired(self, req: Request, code: int, data: Any, pos: int) -> None:
        lq = self._lq(req.queue)
        lq.inflight -= req.want
        if code != OK:
            if code == NOT_OWNER:
                self.stats["acquire_not_owner"] += 1
            self._pump(req.queue)
            return
        if not data:
            self._pump(req.queue)
            return
        self._got(req.queue, data, pos)

    def _got(self, name: str, entries: list, pos: int) -> None:
        """Acquired for us in the batch at ``pos``: handed out once a majority applied it
        (durable: has it on disk), the acquisition with it."""
        ds = [Delivery(name, e.mid, e.body, (e.tepoch, e.tok), e.deliveries > 1)
              for e in entries]
        if self.config.ack == ACK_LOCAL:
            self._hand_out(name, ds)
        else:
            self._lq(name).undurable += len(ds)
            self.undurable.append((pos, "acq", (name, ds)))  # _apply checks

    def _hand_out(self, name: str, ds: list) -> None:
        """Durable acquisitions to the waiting consumers, first come first served; what
        nobody waits for any more goes back to the queue."""
        lq = self._lq(name)
        i = 0
        while i < len(ds) and lq.waiters:
            w = lq.waiters[0]
            while i < len(ds) and len(w.got) < w.want:
                w.got.append(ds[i])
                self.live[ds[i].token] = ds[i]
                i += 1
            if len(w.got) >= w.want or (w.many and lq.inflight == 0 and lq.undurable == 0):
                lq.waiters.popleft()
                got, w.got = w.got, []
                self._finish(w, result=got)
        rest = ds[i:]
        if rest and self.phase is Phase.ACTIVE and self._interested(lq, self.clock()):
            lq.ready.extend(rest)  # a consumer here is between two calls
            rest = []
        for d in rest:
            self._orphan(d)
        # a "many" waiter with something in hand completes once nothing else is on its way
        while lq.waiters and lq.waiters[0].many and lq.waiters[0].got and \
                lq.inflight == 0 and lq.undurable == 0:
            w = lq.waiters.popleft()
            got, w.got = w.got, []
            self._finish(w, result=got)
        self._pump(name)

    def _orphan(self, d: Delivery) -> None:
        """Acquired for a consumer that went away: release it (not a user call)."""
        self.live.pop(d.token, None)
        if self.phase is Phase.ACTIVE:
            self.stats["orphans_released"] += 1
            self._internal(d.queue, RELEASE, d.mid[0], d.mid[1], d.token[0], d.token[1])

    # -- completion --------------------------------------------------------------------------
    def _check_durable(self) -> None:
        if self.phase in (Phase.PROMISE, Phase.AWAIT_SNAPSHOT):
            return  # our joint is the coming epoch's, our state not in it yet
        if self.joint and self.phase is not Phase.CLOSED and not self._established():
            return  # a fact about disks: learnt in any phase, it tells the next exchange
        u = self.undurable
        if not u or self.phase is not Phase.ACTIVE:
            return
        s = self.state
        members = s.holders()
        need = len(members) // 2 + 1
        vals = []
        mine = self._mine()
        for m in members:
            if m == self.uid:
                if mine[0] == s.epoch:
                    vals.append(mine[1])
            else:
                a = self.acks.get(m)
                if a is not None and a[0] == s.epoch:
                    vals.append(a[1])
        if len(vals) < need:
            return
        vals.sort(reverse=True)
        upto = vals[need - 1]
        while u and u[0][0] <= upto:
            _, kind, x = u.popleft()
            if kind == "req":
                self._finish(x, error=x.refusal)
            else:
                name, ds = x
                self._lq(name).undurable -= len(ds)
                self._hand_out(name, ds)

    def _finish(self, req: Request, error: Optional[Exception] = None, result: Any = None) -> None:
        if req.status == DONE:
            return
        req.status, req.error = DONE, error
        if result is not None:
            req.result = result
        if req.callback is not None:
            req.callback(req)

    # ======================================================================================
    # ownership and interest (the Qpid design's QueueOwnerHandler), level-triggered
    # ======================================================================================
    def _lq(self, name: str) -> _Local:
        lq = self.local_queues.get(name)
        if lq is None:
            lq = self.local_queues[name] = _Local()
        return lq

    def _interested(self, lq: _Local, now: float) -> bool:
        """A consumer here waits, or waited within ``interest_linger_s``."""
        return bool(lq.waiters) or now - lq.last_interest < self.config.interest_linger_s

    def _pump(self, name: str) -> None:
        if self.phase is not Phase.ACTIVE:
            return
        lq = self.local_queues.get(name)
        q = self.state.queues.get(name)
        if lq is None:
            return
        if q is None:
            lq.ready.clear()  # the queue went, and what it held with it
            while lq.waiters:  # waiting on a queue nobody created
                self._finish(lq.waiters.popleft(), error=NoSuchQueue(name))
            return
        now = self.clock()
        uid = self.uid
        if lq.waiters:
            lq.last_interest = now
        interested = self._interested(lq, now)
        if lq.ready and (lq.waiters or not interested):
            ready, lq.ready = list(lq.ready), collections.deque()
            if lq.waiters:
                self._hand_out(name, ready)  # pumps again
                return
            for d in ready:
                self._orphan(d)  # nobody came for them
        member = uid in q.consumers
        owner = q.owner == uid
        if not owner:
            lq.owned_since = None
        if interested:
            if not member and not lq.consume_sent:
                lq.consume_sent = True
                self._internal(name, CONSUME)
        elif member and not lq.cancel_sent and lq.inflight == 0:
            lq.cancel_sent = True  # CANCEL passes the ownership on too
            self._internal(name, CANCEL)
            return
        if not owner or lq.release_sent or lq.cancel_sent:
            return
        if lq.owned_since is None:
            lq.owned_since = now
        idle = not lq.waiters and now - lq.last_interest >= self.config.interest_linger_s
        if (idle or now - lq.owned_since >= self.config.time_slice_s) and \
                any(c != uid for c in q.consumers):
            lq.release_sent = True  # time slice over, others wait: pass it on
            self.stats["time_slices"] += 1
            self._internal(name, OWNER_RELEASE)
            return
        want = sum(w.want - len(w.got) for w in lq.waiters)
        need = want - lq.inflight - lq.undurable - len(lq.ready)
        if self.state.level() >= CLAIM_LEVEL:
            # what is not acquired yet stands as a claim, taken as messages come; topped
            # up once half of what the waiters want is missing (else one ACQUIRE a message)
            need -= q.claim
            short = min(need, self.config.max_acquire_batch)
            n = short if short >= max(1, want // 2) or (short > 0 and q.available) else 0
        else:
            n = min(need, q.available - lq.inflight, self.config.max_acquire_batch)
        if n > 0:
            req = Request("acquire-cmd", name, [ACQUIRE, name, n], None)
            req.want = n
            lq.inflight += n
            self.stats["acquires_sent"] += 1
            self._send(req)

    # ======================================================================================
    # epochs: reconciliation, snapshots, losing the primary
    # ======================================================================================
    def _reconcile(self, key: list, order: list, positions: dict) -> None:
        arbs = arbitrators(positions)
        holders = [m for m in order if m not in arbs]
        if not holders:
            self._lose_primary("no member of the view holds the queues (arbitrators only)")
            return
        proven = _proven(positions)
        ranks = {m: _rank(positions[m], (positions[m][0], tuple(positions[m][6])) in proven)
                 for m in holders}
        top = max(ranks.values())
        donor = next(m for m in holders if ranks[m] == top)
        best = positions[donor][:2]
        ident = (top, positions[donor][6])  # equal to it: the same state

        def same(m) -> bool:
            return (ranks[m], positions[m][6]) == ident
        claims = {m: {m, *positions[m][3]} for m in order}
        ahead = {m for m in arbs if positions[m][0] > best[0]}
        if any(_may_have_completed(positions[m], claims, positions, arbs) for m in ahead):
            # an arbitrator took part in a later epoch than any holder here, one that may
            # have completed calls: its state is not in this view
            self.stats["no_quorum"] += 1
            self._lose_primary("the last epoch's queues are not in the view")
            return
        best_members = positions[donor][2]
        # a member restarted from its journal stands for the incarnations that used it; an
        # arbitrator that moved on to a later epoch no longer stands for this one
        here = set().union(*(c for m, c in claims.items() if m not in ahead))
        present = sum(1 for m in best_members if m in here)
        # a durable epoch not yet on the disks of most members of the epochs it came from
        # (durable.py, "Establishment"): most of each of those must be here too
        joint = positions[donor][4] if (best[0], tuple(positions[donor][6])) not in proven \
            else []
        new_base = positions[donor][5] if joint else list(best)
        # a durable queue with the even split's tie (ties.py): exactly half of the first list
        # of the chain (the epoch it begins from, numbered by its base) is "most" of it for
        # the half holding that epoch's tie; the epoch forms once the store said the tie is
        # ours (_check_promises), and the queue is not primary here if it is not
        tie, holder = None, None
        first = joint[0] if joint else best_members
        if self.use_ties and not arbs and first:
            holder = ties.half(first, here)
        if holder is not None:
            tie = (ties.name(first, new_base[0]), holder)
            if self.ties.get(tie[0], holder) != holder:
                self.stats["ties_lost"] += 1
                self._lose_primary("the other half of the last epoch holds its tie")
                return
        if not ties.most_of_each(joint, here, holder) or \
                len(joint) >= journaling.MAX_JOINT:
            self.stats["no_quorum"] += 1
            self.stats["no_quorum_joint"] += 1
            self._lose_primary("the last epoch is not on the disks of most members of the "
                               "epochs before it, and most of them are missing")
            return
        pid = self.view.primary_id
        # the primary ids of a group whose every member restarted begin again; its epochs
        # go on from its journals' (every member computes the same from the same exchange)
        epoch = max(pid, max(max(p[0], p[8] or 0) for p in positions.values()) + 1)
        # exactly half of the epoch right before this primary view: primary only by the
        # even-split tie-breaker's lease, the stack's own decision against the same members
        # (the epoch's are the members of its primary view), which no other half can win;
        # an acknowledged publish reached a majority, so a member of any half has it (of
        # the holders: not when an arbitrator is one of the half, whose holders may be
        # fewer than half of the epoch's)
        lease_half = 2 * present == len(best_members) and pid == best[0] + 1 and not arbs
        if best_members and not ties.quorum(best_members, here, None if joint else holder) \
                and not lease_half:
            # the most advanced state we can see belongs to an epoch most of whose members
            # are missing: another component may have moved on from it
            self.stats["no_quorum"] += 1
            self._lose_primary("no majority of the last epoch's members")
            return
        self.arbs = arbs
        self.claims = claims
        new_joint = joint + [list(best_members)] if self.durable and best_members else []
        if self.config.arbitrator:
            self.state.begin_epoch(epoch, order, arbs)  # an empty state: the epoch, for votes
            self.phase, self.acks = Phase.ARBITER, {}
            return
        # what our epoch's announcements say changes once it takes effect (_form)
        self.forming = _Forming(epoch, order, donor, {m for m in holders if same(m)},
                                new_joint, new_base, list(key))
        self.diskless = {m for m in order if positions[m][8] is None}
        if not self.durable:
            self._form()
            return
        # the ballot (durable.py): no trace of the epoch on any disk before most of each of
        # its lists promised its number
        self.phase = Phase.PROMISE
        self.need_tie = tie
        if tie is not None:
            self._ask_tie()
        self.promised = max(self.promised, epoch)
        self._journal(journaling.REC, journaling.promise_record(epoch))
        self.stats["promises"] += 1
        self.promises.setdefault((tuple(key), epoch), set())
        self._check_promises()

    def _promised_by(self, sender: bytes, key: Any, epoch: Any) -> None:
        if type(key) is not list or type(epoch) is not int:
            self.stats["malformed"] += 1
            return
        k = (tuple(key), epoch)
        if k not in self.promises and len(self.promises) >= 4:
            return  # bounded: early promises of the next few views only
        self.promises.setdefault(k, set()).add(sender)
        if self.phase is Phase.PROMISE:
            self._check_promises()

    def _check_promises(self) -> None:
        f = self.forming
        voted = self.promises.get((tuple(self.view_key), f.epoch), set())
        # arbitrators, members without a disk and older builds promise nothing (as for
        # establishment, arbitrators count)
        need = self.need_tie
        if (need is None or self.ties.get(need[0]) == need[1]) and \
                ties.most_of_each(f.joint, self._stands_for(voted) | self.arbs | self.diskless,
                                  self._tie_holder(f.joint, f.base)):
            self._form()

    def _form(self) -> None:
        """The epoch takes effect here: begun from our state, or awaited from the donor."""
        epoch, order, donor, in_step, joint, base, key = self.forming
        self.forming = None
        arbs = self.arbs
        early, self.early = self.early, []
        if self.uid in in_step:
            self.joint, self.base, self.key = joint, base, key
            self.state.begin_epoch(epoch, order, arbs)
            if self.durable:
                self._journal(journaling.REC, journaling.epoch_record(
                    epoch, order, arbs, self.uid, [self.joint, self.base, self.key]))
            stale = [a for a in self.view.members if a.uid not in arbs and a.uid not in in_step]
            if donor == self.uid and stale:
                self.stats["snapshots_sent"] += len(stale)
                if self.level >= STREAM_LEVEL:  # sent as each stale member asks
                    cfg = self.config
                    self.outgoing = Outgoing(self.state, key, {a.uid: a for a in stale},
                                             self.clock(), cfg.update_chunk_bytes,
                                             cfg.update_window)
                    for sender, obj in early:
                        if obj[0] == UPDATE_ACK and obj[2] == 0:
                            self._send_update(self.outgoing.on_ack(sender, 0))
                else:
                    snap = self.state.snapshot()
                    for a in stale:
                        self._emit(a, [SNAP, key, snap], False)
            held, self.held = self.held, []
            self._activate(in_sync=True, held=held)
        else:
            # our announcements stay our state's until we take the donor's
            self.phase, self.coming = Phase.AWAIT_SNAPSHOT, (joint, base, key)
            self.await_key = key
            if self.level >= STREAM_LEVEL:
                cfg = self.config
                donor_addr = next(a for a in self.view.members if a.uid == donor)
                self.incoming = Incoming(key, donor_addr, QueueState(
                    cfg.max_depth, cfg.max_bytes, cfg.max_message_size))
                self._emit(donor_addr, [UPDATE_ACK, key, 0], False)
            for _sender, obj in early:
                if obj[0] == SNAP:
                    self._on_snapshot(obj)

    def _on_snapshot(self, obj: list) -> None:
        _, key, data = obj
        if self.phase is not Phase.AWAIT_SNAPSHOT or key != self.await_key:
            self.stats["stale_snapshots"] += 1
            return
        self.state.restore(data)
        self._updated()

    def _updated(self) -> None:
        s = self.state
        s.set_arbiters(self.arbs)
        self.joint, self.base, self.key = self.coming
        if self.durable:
            self._journal(journaling.ADOPT, journaling.adopt_record(s.epoch, s.applied),
                          self._image())
        self.stats["snapshots_received"] += 1
        self.await_key, self.incoming = None, None
        held, self.held = self.held, []
        self._activate(in_sync=False, held=held)

    def _on_update(self, sender: bytes, obj: list) -> None:
        """A chunk of the streamed update (update.py)."""
        _, key, n, last, head, items = obj
        inc = self.incoming
        if self.phase is not Phase.AWAIT_SNAPSHOT or inc is None or key != inc.key or \
                sender != inc.donor.uid:
            self.stats["stale_snapshots"] += 1
            return
        done = inc.load(n, last, head, items)
        self.stats["update_chunks"] += 1
        self._emit(inc.donor, [UPDATE_ACK, key, inc.loaded], False)
        if done:
            self.state.adopt(inc.state)
            self._updated()

    def _on_update_ack(self, sender: bytes, obj: list) -> None:
        _, key, loaded = obj
        out = self.outgoing
        if out is None or key != out.key or type(loaded) is not int:
            return
        self._send_update(out.on_ack(sender, loaded))

    def _send_update(self, sends: list) -> None:
        if sends:
            self._seal()
        for dest, payload in sends:
            self.outbox.append((dest, payload, False))
        if self.outgoing is not None and self.outgoing.over:
            self.outgoing = None

    def _end_update(self) -> None:
        if self.outgoing is not None:
            self.outgoing.close()
            self.outgoing = None

    def _activate(self, in_sync: bool, held: Optional[list] = None) -> None:
        self.phase = Phase.ACTIVE
        self.reported = None
        self.report_to, self.report_all = set(), True
        s = self.state
        keep = set(s.members)
        self.acks = {m: a for m, a in self.acks.items() if m in keep}  # bounded
        # what was applied in the previous epoch and not confirmed yet
        u, self.undurable = self.undurable, collections.deque()
        for _pos, kind, x in u:
            if kind == "req":
                if in_sync:  # part of the state every member of this epoch starts from
                    self.undurable.append((0, kind, x))
                else:
                    self._finish(x, error=QueueOutcomeUnknown(
                        f"{x.kind} on {x.queue!r}: applied, then our state was replaced"))
            else:
                name, ds = x
                lq = self._lq(name)
                lq.undurable -= len(ds)
                if in_sync:
                    lq.undurable += len(ds)
                    self.undurable.append((0, kind, x))
        for lq in self.local_queues.values():
            lq.consume_sent = lq.cancel_sent = lq.release_sent = False
            lq.inflight = 0
            lq.owned_since = None
            lq.ready.clear()  # released below with what else no consumer holds
        # calls sent in an older epoch and not applied: again, in order, then the new ones
        old = sorted((r for r in self.sent.values() if type(r) is Request),
                     key=lambda r: r.cseq)
        self.sent = {}
        if held:
            for sender, obj, raw in held:  # refused (old epoch) or applied, like everyone
                self._apply(sender, obj, raw)
        if self.level > 1:  # what this build knows, once per epoch, ahead of our calls
            self._internal(None, LEVEL, cmd=[LEVEL, self.level])
        for r in old:
            if r.kind == "acquire-cmd":
                continue  # recomputed by _pump
            if r.status != DONE:
                r.deadline = None  # a lifecycle call waits for the new epoch's levels
                self._dispatch(r)
        unsent, self.unsent = self.unsent, []
        for r in unsent:
            if r.status != DONE:
                self._dispatch(r)
        # acquisitions the state gives us that no consumer of ours holds: back they go
        mine = {d.token for _p, k, x in self.undurable if k == "acq" for d in x[1]}
        for q in s.queues.values():
            for e in list(q.acquired.values()):
                tok = (e.tepoch, e.tok)
                if e.holder == self.uid and tok not in self.live and tok not in mine:
                    self.stats["orphans_released"] += 1
                    self._internal(q.name, RELEASE, e.mid[0], e.mid[1], e.tepoch, e.tok)
        for name in list(self.local_queues):
            self._pump(name)
        self._ungate()
        self._check_durable()

    def _not_primary(self) -> Exception:
        return QueueNotPrimary(f"member {self.local} is not in a primary component")

    def _lose_primary(self, why: str) -> None:
        self.phase = Phase.NOT_PRIMARY
        self._fail_all(QueueNotPrimary(f"{self.local}: {why}"),
                       QueueOutcomeUnknown(f"{self.local}: {why} before a majority confirmed"))

    def _fail_all(self, definite: Exception, unknown: Exception) -> None:
        self._drop_batch()
        for _pos, kind, x in self.undurable:
            if kind == "req":
                self._finish(x, error=unknown)
        self.undurable = collections.deque()
        for r in list(self.sent.values()):
            # sent but not applied here: the sequencer may have ordered it for the others
            # (virtual synchrony only binds the members that move on together with us)
            if type(r) is Request and r.kind != "acquire-cmd":
                self._finish(r, error=unknown)
        self.sent = {}
        unsent, self.unsent = self.unsent + self.gated, []
        self.gated = []
        for r in unsent:
            self._finish(r, error=definite)
        for lq in self.local_queues.values():
            while lq.waiters:
                w = lq.waiters.popleft()
                if w.many and w.got:
                    got, w.got = w.got, []
                    self._finish(w, result=got)
                else:
                    w.got = []
                    self._finish(w, error=definite)
            lq.inflight = lq.undurable = 0
            lq.consume_sent = lq.cancel_sent = lq.release_sent = False
            lq.owned_since = None
            lq.ready.clear()  # the primary side requeues them

    # ======================================================================================
    # reading
    # ======================================================================================
    def depth(self, name: str) -> int:
        q = self.state.queues.get(name)
        return q.depth if q is not None else 0

    def info(self) -> dict:
        s = self.state
        return {"phase": self.phase.value, "epoch": s.epoch, "applied": s.applied,
                "digest": s.digest(),
                "level": s.level(), "queues": self.queues(), "stats": dict(self.stats)}

    def queues(self) -> dict:
        """{name: figures and limits} of every queue, as this member holds them (the same
        at every member once it applied the same commands)."""
        return {q.name: q.info() for q in self.state.queues.values()}


def arbitrators(positions: dict) -> set:
    """The members whose queue position (``exchange_data``) says they are arbitrators."""
    return {m for m, p in positions.items()
            if isinstance(p, (list, tuple)) and len(p) > 1 and p[1] == ARBITER}


def _may_have_completed(arb: tuple, claims: dict, positions: dict, arbs: set) -> bool:
    """Whether the epoch of an arbitrator's position ``arb`` can have completed a call (a
    majority of its holders applied it): not when the members of the view that stand for
    its holders but are in earlier epochs (so never applied anything in it) are at least
    half of them. Its members not in the view count as holders. (A view's state exchange
    can complete at the arbitrator alone, whose epoch then runs ahead of every holder's.)"""
    e, holders = arb[0], set(arb[2]) - arbs
    behind = set().union(*(c for m, c in claims.items() if positions[m][0] < e))
    return 2 * len(holders & behind) < len(holders)


def _rank(p: tuple, proven: bool) -> tuple:
    """How advanced a position is: (epoch, applied) for an established epoch; a durable
    epoch not established yet (``proven``: the exchange shows it is) ranks above every
    position of the epoch it came from (whose positions past its start completed nothing:
    most of that epoch's members moved on with it) and below every later established one
    (durable.py, "Establishment")."""
    if p[4] and not proven:
        return (p[5][0], 1 << 62, p[0], p[1])
    return (p[0], p[1], 0, 0)


def _proven(positions: dict) -> set:
    """The (epoch, key) of durable epochs that some announcements give as not established
    but that are: another member of the same epoch knows it is (establishment belongs to
    the epoch, not to whoever announces it), or members of the view in that epoch whose
    disk has it stand for most members of each of its lists. Without ties (ties.py): every
    member of the view decides the same from the exchange, whatever ties it knows."""
    out = set()
    for e, key, joint in {(p[0], tuple(p[6]), tuple(map(tuple, p[4])))
                          for p in positions.values() if p[4]}:
        same = [(m, p) for m, p in positions.items() if p[0] == e and tuple(p[6]) == key]
        if any(not p[4] for _m, p in same):
            out.add((e, key))
            continue
        stands = set().union(*(set(p[3]) | {m} for m, p in same if p[7]))
        if ties.most_of_each(joint, stands):  # no tie: strictly more than half
            out.add((e, key))
    return out


def _uids(x: Any) -> bool:
    return type(x) is list and all(type(m) is bytes for m in x)


def _positions(data: Any, order: list) -> Optional[dict]:
    """{uid: (epoch, applied, members, earlier incarnations, joint, base, key, on disk,
    promised)} of every member in ``order`` from a state exchange's announcements (the last
    six as in ``exchange_data``, empty from a member that is not durable), or None when one
    is missing or malformed."""
    if type(data) is not dict:
        return None
    out = {}
    for uid in order:
        p = data.get(uid)
        if type(p) is not list or len(p) not in (3, 8, 9):
            return None
        epoch, applied, members, *rest = p
        was, joint, base, key, on_disk = rest[:5] or ([], [], [], [], False)
        # the highest number promised; None from a member that promises nothing: one with no
        # journal, or a durable build before the ballot (a durable view with one goes on
        # without its promise, as that build does: the ballot holds once all run this one)
        promised = rest[5] if len(rest) > 5 else None
        if type(epoch) is not int or type(applied) is not int or not _uids(members) or \
                not _uids(was) or len(was) > journaling.MAX_INCARNATIONS or \
                type(joint) is not list or len(joint) > journaling.MAX_JOINT or \
                not all(_uids(x) for x in joint) or type(key) is not list or \
                not (base == [] or (type(base) is list and len(base) == 2 and
                                    all(type(x) is int for x in base))) or \
                (joint and not base) or type(on_disk) is not bool or \
                (promised is not None and type(promised) is not int):
            return None
        out[uid] = (epoch, applied, members, was, joint, base, key, on_disk, promised)
    return out
