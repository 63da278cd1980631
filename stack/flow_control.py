"""FLOW_CONTROL: credit-based flow control (JGroups MFC + UFC in one layer), right above GMS.

Every member holds, per receiver in its view (itself included), two accounts of
``max_credits`` bytes each, kept apart as JGroups keeps MFC and UFC apart: a multicast
consumes its payload size from every receiver's multicast account and goes out only when the
smallest holds enough; a unicast consumes from its destination's unicast account only. So a
large unicast (a state transfer to a joiner) never holds back the multicasts, and the total
order they carry, while the joiner works through it. A message that does not fit waits in a
send queue of its kind: multicasts in send order, unicasts in send order per destination.
While multicasts wait the stack is not writable (``Writable("flow_control", False)``), so a
Channel's ``send`` waits; while unicasts to a member wait, only sends to that member wait
(``Writable("flow_control", False, dest)``, JGroups UFC's blocking per destination). When
credits come back the queues drain and the stack is writable again. Messages of one kind
never wait behind the other kind's, nor unicasts behind another destination's.

Credits are tied to the *application consuming* messages, not to the stack delivering them:
a receiver counts, per sender, the multicast and the unicast bytes it released to the layers
above (ultimately the application), and sends the sender a cumulative CREDIT ``[epoch, total,
multicast total, unicast total]`` each time another ``min_threshold`` share of
``max_credits`` of either kind was released. (``total``, their sum, is what builds from
before the split read; their ``[epoch, total]`` is taken as one sum, multicast first.) The
application reports that it fell behind with ``Stack.set_app_blocked(True)`` (the Channel
does so when its queue is full): this layer then holds what NAKACK/UNICAST deliver (and the
view changes behind them, in order) instead of passing it up, and releases it on
``set_app_blocked(False)``. Senders run out of credit and block, and the receiver's memory
stays bounded by the credits it granted, while every layer below (acks, probes, views,
retransmissions) keeps running: control traffic never waits behind data. A well-behaved
sender never has more than ``max_credits`` of each kind unreleased at a receiver; a receiver
holds at most twice that per sender and kind and drops (counting
``dropped_over_credit``, and crediting them so nobody deadlocks) what a misbehaving sender
sends beyond.

Totals are cumulative and monotonic, so a lost or reordered CREDIT is harmless; a sender
blocked for ``max_block_s`` asks the receivers it waits for with CREDIT_REQUEST, answered by
the cumulative total. A receiver's totals restart only with a new ``epoch`` (when it forgot
a sender); senders add the reported increase to their account and clamp it to what they
sent, so any over-report (messages a receiver counted that the sender did not charge, e.g.
sent just before a view change) tops an account up to at most ``max_credits``. Members that
leave the view stop counting; new members start with full credit. Unicasts waiting for a
member that leaves go on at the view change, uncharged, as a new send to a non-member does
(UNICAST closes its connection to a departed member after ``conn_expiry_s``), counted as
``unicasts_to_departed``.

What is charged: messages without INTERNAL or NO_RELIABILITY, by payload size (bytes-like
and str payloads by length, other payloads 64 bytes). Both sides count the same rule.
INTERNAL messages pass uncharged (and may overtake queued data).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Optional

from .errors import RaygroupsError
from .events import AppBlocked, Writable
from .frag import HEADER as FRAG_HEADER
from .layer import Layer, MALFORMED
from .message import INTERNAL, NO_RELIABILITY, OOB, Message
from .view import Left, ViewChange, carried

HEADER = 12
CREDIT, CREDIT_REQUEST = 0, 1
UNCHARGED = INTERNAL | NO_RELIABILITY
# CREDIT/CREDIT_REQUEST: best effort and out of band. Not INTERNAL: GMS passes no INTERNAL
# message up to the layers above it (and a lost credit is harmless: totals are cumulative).
FC_CONTROL = NO_RELIABILITY | OOB
OTHER_SIZE = 64
RELEASE_CHUNK = 512  # messages handed up per batch when releasing what was held


class FlowControlFull(RaygroupsError):
    """Too much waits for credits already: the application sends without waiting for the
    stack to be writable (Channel.send waits)."""


@dataclass
class FlowControlConfig:
    max_credits: int = 4 * 1024 * 1024
    """Bytes a sender may have outstanding (sent, not yet released to the application) at
    each receiver. Bounds a slow receiver's memory per sender (at most twice this is ever
    held); larger keeps fast paths busier over high-latency links (bandwidth x RTT)."""
    min_threshold: float = 0.4
    """A receiver sends a CREDIT after releasing this share of ``max_credits`` since the
    last one. Smaller: more CREDIT messages, smoother flow; larger: fewer, burstier."""
    max_block_s: float = 0.5
    """A sender blocked this long (and every such period after) asks the receivers it waits
    for with CREDIT_REQUEST (covers CREDITs lost on the way)."""
    max_queued_bytes: int = 8 * 1024 * 1024
    """Bytes waiting for credits in one send queue (the multicasts', or the unicasts' to one
    member) before a new application message for it is refused with FlowControlFull (a
    message already started, e.g. the fragments of one large payload, is always taken
    whole). Only reached by senders that ignore writability."""


def _continuation(msg: Message) -> bool:
    """A fragment after the first of one FRAG message (which must go out whole)."""
    h = msg.headers.get(FRAG_HEADER)
    return type(h) is list and len(h) == 3 and h[1] != 0


def _size(p: Any) -> int:
    t = type(p)
    if t is bytes or t is str or t is bytearray:
        return len(p)
    if t is memoryview:
        return p.nbytes
    return OTHER_SIZE


class _Account:
    """A sender's view of one receiver: what it charged, and what the receiver released,
    multicast and unicast apart."""
    __slots__ = ("base", "mgranted", "ucast", "ugranted", "epoch", "mtotal", "utotal")

    def __init__(self, base: int):
        self.base = base      # the sender's multicast total when this account opened
        self.mgranted = 0     # multicast bytes released by the receiver (clamped to charged)
        self.ucast = 0        # unicast bytes charged
        self.ugranted = 0     # unicast bytes released by the receiver (clamped to charged)
        self.epoch = 0        # the receiver's epoch for us, and its last totals in it
        self.mtotal = 0
        self.utotal = 0


class _Recv:
    """A receiver's count of one sender's bytes released to the application, multicast
    and unicast apart."""
    __slots__ = ("epoch", "mreleased", "ureleased", "mreported", "ureported", "mheld", "uheld")

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.mreleased = self.ureleased = 0
        self.mreported = self.ureported = 0
        self.mheld = self.uheld = 0  # charged bytes held while the application is blocked


class _Waiting(deque):
    """A send queue: (message, size) in send order, and their bytes."""
    __slots__ = ("bytes",)

    def __init__(self):
        super().__init__()
        self.bytes = 0


class FlowControl(Layer):
    name = "flow_control"
    header_id = HEADER

    def __init__(self, config: Optional[FlowControlConfig] = None):
        super().__init__(config or FlowControlConfig())
        c = self.config
        self.max = c.max_credits
        self.threshold = max(1, int(c.max_credits * c.min_threshold))
        # sender side
        self.accounts: dict = {}
        self.mcast = 0            # total multicast bytes charged
        self.min_avail = self.max  # lower bound of the smallest multicast account's credit
        self.dirty = False         # credits came back since min_avail was computed
        self.queue = _Waiting()  # multicasts waiting for credit, in send order
        self.uqueues: dict = {}  # destination -> its unicasts waiting (_Waiting), in send order
        self.queued_bytes = 0    # in all of them
        self.blocked = False
        self.block_timer = None
        # receiver side
        self.recv: dict = {}
        self.epochs = 0
        self.app_blocked = False
        self.held: deque = deque()
        self.releasing = False
        self.view = None

    # -- sender side --------------------------------------------------------------------
    def _avail(self, a: _Account) -> int:
        """Multicast credit at one receiver."""
        return self.max - (self.mcast - a.base - a.mgranted)

    def _uavail(self, a: _Account) -> int:
        """Unicast credit at one receiver."""
        return self.max - (a.ucast - a.ugranted)

    def _recompute(self) -> int:
        self.dirty = False
        if not self.accounts:
            self.min_avail = self.max
        else:
            self.min_avail = min(self._avail(a) for a in self.accounts.values())
        return self.min_avail

    def _fits(self, msg: Message, size: int) -> bool:
        dest = msg.dest
        if dest is None:
            if size <= self.min_avail:
                return True
            if self.dirty:
                self._recompute()
            return size <= self.min_avail or self.min_avail >= self.max
        a = self.accounts.get(dest)
        if a is None:
            return True  # not a member: nothing to charge
        avail = self._uavail(a)
        return size <= avail or avail >= self.max

    def _charge(self, msg: Message, size: int) -> None:
        dest = msg.dest
        if dest is None:
            self.mcast += size
            self.min_avail -= size
        else:
            a = self.accounts.get(dest)
            if a is not None:
                a.ucast += size

    def down(self, msg: Message) -> None:
        if msg.flags & UNCHARGED:
            self.below.down(msg)
            return
        p = msg.payload
        size = len(p) if type(p) is bytes else _size(p)
        dest = msg.dest
        q = self.queue if dest is None else (self.uqueues.get(dest) if self.uqueues else None)
        if q:  # after what waits of its kind (multicasts; unicasts to this destination)
            if q.bytes >= self.config.max_queued_bytes and not _continuation(msg):
                raise FlowControlFull(f"{q.bytes} bytes wait for credits")
            self._enqueue(msg, size)
            return
        common = dest is None and size <= self.min_avail  # a multicast with credit
        if common or self._fits(msg, size):
            try:
                self.below.down(msg)  # may raise: nothing sent, nothing charged
            except RaygroupsError:
                if not _continuation(msg):
                    raise
                self._enqueue(msg, size)  # never leave a fragmented message half sent
                return
            if common:
                self.mcast += size
                self.min_avail -= size
            else:
                self._charge(msg, size)
        else:
            self._enqueue(msg, size)

    def _enqueue(self, msg: Message, size: int) -> None:
        dest = msg.dest
        if dest is None:
            q = self.queue
            if not self.blocked:
                self.blocked = True
                self.stats["blocked"] += 1
                self.above.up_event(Writable(self.name, False))
        else:
            q = self.uqueues.get(dest)
            if q is None:
                q = self.uqueues[dest] = _Waiting()
                self.stats["blocked_unicast"] += 1
                self.above.up_event(Writable(self.name, False, dest))
        q.append((msg, size))
        q.bytes += size
        self.queued_bytes += size
        self.stats["queued"] += 1
        self._arm_timer()

    def _drain(self) -> None:
        """Send what now fits, multicasts and each destination's unicasts independently
        (until a layer below refuses: then the rest waits for the next drain)."""
        ok = self._drain_one(self.queue)
        uq = self.uqueues
        for dest in list(uq):
            q = uq.get(dest)
            if q is None:
                continue
            if ok:
                n = len(q)
                ok = self._drain_one(q)
                if dest not in self.accounts:  # it left the view: they went on uncharged
                    self.stats["unicasts_to_departed"] += n - len(q)
            if not q:
                del uq[dest]
                self.above.up_event(Writable(self.name, True, dest))
        if not self.queue and self.blocked:
            self.blocked = False
            self.above.up_event(Writable(self.name, True))
        if not self.queue and not uq and self.block_timer is not None:
            self.block_timer.cancel()
            self.block_timer = None

    def _drain_one(self, q: _Waiting) -> bool:
        """Send the head of ``q`` while it fits; False when a layer below refused."""
        while q:
            msg, size = q[0]
            if not self._fits(msg, size):
                return True
            try:
                self.below.down(msg)
            except RaygroupsError:  # a layer below refuses for now (e.g. a flush)
                self.stats["drain_refused"] += 1
                return False
            q.popleft()
            q.bytes -= size
            self.queued_bytes -= size
            self._charge(msg, size)
        return True

    def _arm_timer(self) -> None:
        if self.block_timer is None:
            self.block_timer = self.ctx.schedule(self.config.max_block_s, self._blocked_too_long)

    def _blocked_too_long(self) -> None:
        self.block_timer = None
        if not self.queue and not self.uqueues:
            return
        self._drain()  # retries what a layer below refused
        if not self.queue and not self.uqueues:
            return
        short = set()
        if self.queue:
            size = self.queue[0][1]
            short.update(r for r, a in self.accounts.items() if self._avail(a) < size)
        short.update(d for d in self.uqueues if d in self.accounts)
        local = self.ctx.local
        for r in short:
            if r != local:
                self.stats["credit_requests_sent"] += 1
                self._send_control(Message(r, b"", FC_CONTROL, {HEADER: [CREDIT_REQUEST]}))
        self._arm_timer()

    def _on_credit(self, receiver, epoch: int, mtotal: int, utotal: int,
                   combined: bool = False) -> None:
        """A receiver's cumulative totals; ``combined``: one sum of both kinds (a build from
        before the split, which sends ``utotal`` 0), granted to multicasts first."""
        a = self.accounts.get(receiver)
        if a is None:
            return
        if epoch > a.epoch:
            dm, du = mtotal, utotal
            a.epoch = epoch
            a.mtotal, a.utotal = mtotal, utotal
        elif epoch == a.epoch and (mtotal > a.mtotal or utotal > a.utotal):
            dm, du = max(0, mtotal - a.mtotal), max(0, utotal - a.utotal)
            a.mtotal, a.utotal = max(a.mtotal, mtotal), max(a.utotal, utotal)
        else:
            self.stats["stale_credits"] += 1
            return
        mcharged = self.mcast - a.base
        if combined:
            du = dm - min(dm, mcharged - a.mgranted)
        a.mgranted = min(mcharged, a.mgranted + dm)
        a.ugranted = min(a.ucast, a.ugranted + du)
        self.dirty = True
        if self.queue or self.uqueues:
            self._drain()

    # -- receiver side ------------------------------------------------------------------
    def up(self, batch: list) -> None:
        if self.app_blocked or self.held:
            items = self._controls(batch)
            if items:
                self._hold(items)
                if not self.app_blocked:
                    self._release()
            return
        # the common path: count what goes up per sender, in one pass (multicasts; the
        # unicasts, fewer, apart)
        control = False
        last, n, sums, usums = None, 0, None, None
        for m in batch:
            if HEADER in m.headers:
                control = True
                continue
            if m.flags & UNCHARGED:
                continue
            p = m.payload
            size = len(p) if type(p) is bytes else _size(p)
            s = m.sender
            if m.dest is not None:
                if usums is None:
                    usums = {}
                usums[s] = usums.get(s, 0) + size
                continue
            if s is last:
                n += size
                continue
            if last is not None:
                if sums is None:
                    sums = {}
                sums[last] = sums.get(last, 0) + n
            last, n = s, size
        items = self._controls(batch) if control else batch
        if last is not None:
            self._grant(last, n, 0)
            if sums:
                for s, k in sums.items():
                    self._grant(s, k, 0)
        if usums:
            for s, k in usums.items():
                self._grant(s, 0, k)
        if items:
            self.above.up(items)

    def _controls(self, batch: list) -> list:
        """Handle this layer's CREDIT/CREDIT_REQUEST messages; return the others."""
        out = []
        for m in batch:
            h = m.headers.get(HEADER)
            if h is None:
                out.append(m)
                continue
            try:
                self._control(m, h)
            except MALFORMED:
                self.malformed()
        return out

    def _control(self, m: Message, h: list) -> None:
        typ = h[0]
        if typ == CREDIT:
            if len(h) == 3:  # [epoch, total]: a build from before the split
                epoch, mtotal, utotal, combined = h[1], h[2], 0, True
            else:
                epoch, mtotal, utotal, combined = h[1], h[3], h[4], False
            if type(epoch) is not int or type(mtotal) is not int or mtotal < 0 or \
                    type(utotal) is not int or utotal < 0:
                raise TypeError("credit")
            self.stats["credits_received"] += 1
            self._on_credit(m.sender, epoch, mtotal, utotal, combined)
        elif typ == CREDIT_REQUEST:
            self.stats["credit_requests_received"] += 1
            self._send_credit(m.sender, self._recv_for(m.sender))
        else:
            raise ValueError("flow control header")

    def _recv_for(self, sender) -> _Recv:
        r = self.recv.get(sender)
        if r is None:
            self.epochs += 1
            r = self.recv[sender] = _Recv(self.epochs)
        return r

    def _send_credit(self, sender, r: _Recv) -> None:
        m, u = r.mreported, r.ureported = r.mreleased, r.ureleased
        if sender == self.ctx.local:
            self._on_credit(sender, r.epoch, m, u)
            return
        self.stats["credits_sent"] += 1
        self._send_control(Message(sender, b"", FC_CONTROL,
                                   {HEADER: [CREDIT, r.epoch, m + u, m, u]}))

    def _send_control(self, msg: Message) -> None:
        try:
            self.below.down(msg)
        except RaygroupsError:  # refused below for now; totals are cumulative, the next one
            self.stats["control_refused"] += 1  # (or a CREDIT_REQUEST) makes up for it

    def _grant(self, sender, mbytes: int, ubytes: int) -> None:
        """``mbytes`` of multicasts and ``ubytes`` of unicasts of ``sender`` went up to the
        application: grant credit where due."""
        r = self.recv.get(sender)
        if r is None:
            r = self._recv_for(sender)
        r.mreleased += mbytes
        r.ureleased += ubytes
        t = self.threshold
        if r.mreleased - r.mreported >= t or r.ureleased - r.ureported >= t or \
                sender == self.ctx.local:
            self._send_credit(sender, r)  # (our own account is updated at once, no message)

    def _released(self, msgs) -> None:
        """Count what goes up to the application, and grant credit where due."""
        sums: dict = {}
        for m in msgs:
            if not m.flags & UNCHARGED:
                key = (m.sender, m.dest is not None)
                sums[key] = sums.get(key, 0) + _size(m.payload)
        for (s, uni), n in sums.items():
            if uni:
                self._grant(s, 0, n)
            else:
                self._grant(s, n, 0)

    def _hold(self, items) -> None:
        limit = 2 * self.max
        held = self.held
        for m in items:
            if not m.flags & UNCHARGED:
                r = self._recv_for(m.sender)
                size = _size(m.payload)
                uni = m.dest is not None
                if (r.uheld if uni else r.mheld) + size > limit:
                    # beyond what we ever granted: a misbehaving sender. Drop, but credit it.
                    self.stats["dropped_over_credit"] += 1
                    if uni:
                        self._grant(m.sender, 0, size)
                    else:
                        self._grant(m.sender, size, 0)
                    continue
                if uni:
                    r.uheld += size
                else:
                    r.mheld += size
            held.append(m)
        self.stats["held_max"] = max(self.stats["held_max"], len(held))

    def _release(self) -> None:
        """Hand up what was held, in order, while the application takes it."""
        if self.releasing:
            return
        self.releasing = True
        try:
            held = self.held
            while held and not self.app_blocked:
                first = held[0]
                if type(first) is not Message:
                    held.popleft()
                    self.above.up_event(first)
                    continue
                batch = []
                while held and len(batch) < RELEASE_CHUNK and type(held[0]) is Message:
                    batch.append(held.popleft())
                for m in batch:
                    if not m.flags & UNCHARGED:
                        r = self.recv.get(m.sender)
                        if r is not None:
                            if m.dest is None:
                                r.mheld -= _size(m.payload)
                            else:
                                r.uheld -= _size(m.payload)
                self._released(batch)
                self.above.up(batch)
        finally:
            self.releasing = False

    # -- events -------------------------------------------------------------------------
    def down_event(self, ev: Any) -> Any:
        if type(ev) is AppBlocked:
            was, self.app_blocked = self.app_blocked, bool(ev.blocked)
            if self.app_blocked != was:
                self.stats["app_blocked" if self.app_blocked else "app_unblocked"] += 1
            if not self.app_blocked and self.held:
                self._release()
            return True
        return self.below.down_event(ev)

    def up_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is ViewChange:
            self._view(ev.view)
        elif t is Writable:
            if ev.writable and (self.queue or self.uqueues):
                self._drain()  # e.g. a flush ended: retry what it refused
            return self.above.up_event(ev)  # back-pressure is never held
        if self.held:
            self.held.append(ev)  # after the messages delivered before it
            if t is Left:  # leaving: hand everything up, the application is done with us
                self.app_blocked = False
                self._release()
            return None
        return self.above.up_event(ev)

    def _view(self, view) -> None:
        self.view = view
        members = view.members
        old = self.accounts
        self.accounts = carried(old, members, lambda m: _Account(self.mcast))
        self._recompute()
        recv = self.recv
        if len(recv) > 2 * len(members) + 64:  # forget departed senders (new epoch if back)
            keep = set(members)
            self.recv = {s: r for s, r in recv.items() if s in keep or r.mheld or r.uheld}
        if self.queue or self.uqueues:  # accounts changed: either kind may fit now
            self._drain()

    # -- introspection ------------------------------------------------------------------
    def credits(self, unicast: bool = False) -> dict:
        """Available credit per receiver (bytes), as this sender sees it: for multicasts,
        or (``unicast``) for unicasts to it."""
        avail = self._uavail if unicast else self._avail
        return {r: avail(a) for r, a in self.accounts.items()}
