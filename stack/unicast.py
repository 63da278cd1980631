"""UNICAST: reliable FIFO unicast (JGroups UNICAST3, simplified).

Per destination a connection with an increasing connection id and seqnos; the receiver
delivers in order and acknowledges the highest contiguous seqno once per loop turn; the
sender retransmits what stays unacknowledged for a tick. A new connection id from a peer
(it reopened the connection) resets the receive window. Connections to peers that left
the view expire. Retransmissions to a peer that acknowledges nothing back off (doubling, as
TCP's retransmission timer does, up to ``xmit_backoff_max_s``): at once for a peer outside
the view, and for a member of the view once it has acknowledged nothing for
``xmit_backoff_after_s`` while messages to it wait. Across a partition, every START_FLUSH
of a round that included the other side would otherwise go out again every tick, to members
of the view until the view excludes them and to the others until the connection expires:
O(N^2) datagrams a tick while N members are apart, more with every round restarted as the
other side's members are found dead one by one. Any acknowledgement from the peer (it is
there again) ends the backoff; a new message to it goes out at once, and its
retransmissions follow the backoff. The tick walks only the connections with messages
waiting (a member of a large group holds a connection to most others, nearly all idle), and
looks for expired ones once a second.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import RaygroupsError
from .events import ViewInstalled, Writable
from .layer import Layer, MALFORMED
from .message import CONTROL, INTERNAL, NO_RELIABILITY, Message

DATA, ACK = 0, 1
SWEEP_S = 1.0
"""How often the tick looks for expired connections (at most a quarter of the expiry)."""


class UnicastWindowFull(RaygroupsError):
    """Too many unacknowledged unicasts to one peer."""


@dataclass
class UnicastConfig:
    xmit_interval_s: float = 0.05
    """Retransmit messages still unacknowledged after one tick of this length."""
    send_window: int = 20_000
    """Unacknowledged messages per peer before the stack stops being writable;
    application sends beyond twice this raise UnicastWindowFull."""
    max_pending: int = 100_000
    """Out-of-order messages buffered per peer; more are dropped and counted."""
    conn_expiry_s: float = 30.0
    """A connection to a peer outside the view is closed after this long (even with
    unacknowledged messages: the peer is gone)."""
    xmit_backoff_max_s: float = 1.0
    """The longest wait between two retransmissions to a peer that acknowledges nothing
    (from ``xmit_interval_s``, doubling at each)."""
    xmit_backoff_after_s: float = 0.5
    """A member of the view gets backed-off retransmissions once it has acknowledged
    nothing for this long while messages to it wait (a peer outside the view at once);
    before, one a tick."""


class _Send:
    __slots__ = ("conn_id", "seqno", "unacked", "mark", "since", "wait", "due", "quiet")

    def __init__(self, conn_id: int, now: float):
        self.conn_id, self.seqno, self.mark, self.since = conn_id, 0, 0, now
        self.unacked: dict[int, Message] = {}
        self.wait = self.due = 0.0  # retransmission backoff
        self.quiet = now  # the peer acknowledged nothing since, while messages waited


class _Recv:
    __slots__ = ("conn_id", "delivered", "pending", "since")

    def __init__(self, conn_id: int):
        self.conn_id, self.delivered, self.since = conn_id, 0, 0.0
        self.pending: dict[int, Message] = {}


class Unicast(Layer):
    name = "unicast"
    header_id = 3

    def __init__(self, config: UnicastConfig):
        super().__init__(config)
        self.sends: dict = {}
        self.recvs: dict = {}
        self.members: frozenset = frozenset()
        self.ack_due: dict = {}
        self.ack_scheduled = False
        self.next_conn = 1
        self.blocked: set = set()
        # the connections the tick retransmits on: those that had messages waiting since
        # it last looked (an idle connection costs a tick nothing; the expiry sweep, once
        # a second, walks them all)
        self.waiting: dict = {}
        self.swept = float("-inf")

    def start(self) -> None:
        self.ctx.every(self.config.xmit_interval_s, self._tick)

    def down(self, msg: Message) -> None:
        dest = msg.dest
        if dest is not None and not msg.flags & NO_RELIABILITY:
            c = self.sends.get(dest)
            if c is None:
                c = self.sends[dest] = _Send(self.next_conn, self.ctx.now())
                self.next_conn += 1
            n = len(c.unacked)
            if n >= self.config.send_window:
                if not msg.flags & INTERNAL and n >= 2 * self.config.send_window:
                    raise UnicastWindowFull(f"{n} unicasts to {dest} unacknowledged")
                if not self.blocked:
                    self.up_event(Writable(self.name, False))
                self.blocked.add(dest)
            if not c.unacked:
                c.quiet = self.ctx.now()
                self.waiting[dest] = c  # (its mark is at most seqno: nothing new is old)
            c.seqno += 1
            msg.headers[3] = [DATA, c.conn_id, c.seqno]
            c.unacked[c.seqno] = msg
        self.below.down(msg)

    def up(self, batch: list) -> None:
        out = []
        for m in batch:
            h = m.headers.get(3)
            if h is None:
                out.append(m)
                continue
            try:
                typ, cid, seq = h
                if typ == DATA:
                    self._data(m, cid, seq, out)
                elif typ == ACK:
                    self._ack(m.sender, cid, seq)
                else:
                    self.malformed()
            except MALFORMED:
                self.malformed()
        if out:
            self.above.up(out)

    def _data(self, m: Message, cid: int, seq: int, out: list) -> None:
        if type(cid) is not int or type(seq) is not int:
            raise TypeError
        sender = m.sender
        r = self.recvs.get(sender)
        if r is None or cid > r.conn_id:
            r = self.recvs[sender] = _Recv(cid)
        elif cid < r.conn_id:
            self.stats["stale_conn"] += 1
            return
        self.ack_due[sender] = r
        if not self.ack_scheduled:
            self.ack_scheduled = True
            self.ctx.schedule(0, self._send_acks)
        if seq <= r.delivered or seq in r.pending:
            self.stats["duplicates"] += 1
            return
        self.stats["received"] += 1
        if seq == r.delivered + 1:
            r.delivered = seq
            out.append(m)
        elif len(r.pending) >= self.config.max_pending:
            self.stats["dropped_window_full"] += 1
            return
        else:
            r.pending[seq] = m
        pending = r.pending
        if pending:
            nxt = r.delivered + 1
            while nxt in pending:
                out.append(pending.pop(nxt))
                nxt += 1
            r.delivered = nxt - 1

    def _ack(self, sender, cid: int, seq: int) -> None:
        c = self.sends.get(sender)
        if c is None or c.conn_id != cid or type(seq) is not int:
            return
        un = c.unacked
        c.wait = c.due = 0.0  # it is there: retransmit each tick again
        c.quiet = self.ctx.now()
        for s in [s for s in un if s <= seq]:
            del un[s]
        if sender in self.blocked and len(un) < self.config.send_window // 2:
            self.blocked.discard(sender)
            if not self.blocked:
                self.up_event(Writable(self.name, True))

    def _send_acks(self) -> None:
        self.ack_scheduled = False
        due, self.ack_due = self.ack_due, {}
        for sender, r in due.items():
            self.below.down(Message(sender, b"", CONTROL, {3: [ACK, r.conn_id, r.delivered]}))

    def _tick(self) -> None:
        now = self.ctx.now()
        if now - self.swept >= min(SWEEP_S, self.config.conn_expiry_s / 4):
            self.swept = now
            self._expire(now)
        local, members, after = self.ctx.local, self.members, self.config.xmit_backoff_after_s
        for dest, c in list(self.waiting.items()):
            if not c.unacked:
                del self.waiting[dest]
                continue
            outside = dest not in members and dest != local
            if outside or now - c.quiet >= after:
                if now < c.due:  # backing off: nothing acknowledged since the last
                    c.mark = c.seqno
                    self.stats["xmit_backed_off"] += 1
                    continue
                c.wait = min(2 * c.wait or self.config.xmit_interval_s,
                             self.config.xmit_backoff_max_s)
                c.due = now + c.wait - self.config.xmit_interval_s / 2  # (ticks jitter)
            for s, m in c.unacked.items():
                if s > c.mark:
                    break
                self.below.down(Message(dest, m.payload, m.flags, m.headers))
                self.stats["retransmitted"] += 1
            c.mark = c.seqno

    def _expire(self, now: float) -> None:
        """Close the connections to peers outside the view for ``conn_expiry_s``."""
        expiry, local, members = self.config.conn_expiry_s, self.ctx.local, self.members
        for dest, c in list(self.sends.items()):
            if dest not in members and dest != local and now - c.since > expiry:
                self._ack(dest, c.conn_id, c.seqno)  # releases back-pressure, if any
                del self.sends[dest]
                self.waiting.pop(dest, None)
                self.stats["expired_conns"] += 1
        for src, r in list(self.recvs.items()):
            if src not in members and r.since and now - r.since > expiry:
                del self.recvs[src]

    def down_event(self, ev: Any) -> Any:
        if type(ev) is ViewInstalled:
            now = self.ctx.now()
            self.members = ev.view.member_set
            for dest, c in self.sends.items():
                if dest not in self.members:
                    c.since = now
            for src, r in self.recvs.items():  # peers that left expire after conn_expiry_s
                r.since = 0.0 if src in self.members else (r.since or now)
        return self.below.down_event(ev)
