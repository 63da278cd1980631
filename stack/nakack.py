"""NAKACK: reliable FIFO multicast (seed 003).

Every multicast gets the sender's next seqno. Receivers deliver each sender's messages in
seqno order, buffer what arrives early, and ask the sender to retransmit gaps (a NAK) once
a gap has outlived one ``xmit_interval_s`` tick. The last-message-dropped case is closed by
HIGHEST announcements, multicast while the sender has unstable messages, and by STABLE's
digests. The sender keeps its messages until STABLE reports them delivered everywhere;
that buffer is the send window: when it is full the stack reports itself not writable.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import RaygroupsError
from .events import (GetDigest, OwnUnstable, SetDigest, Stability, ViewInstalled, Writable)
from .layer import Layer
from .message import CONTROL, INTERNAL, NO_RELIABILITY, Message

MSG, XMIT_REQ, HIGHEST = 0, 1, 2


class SendBufferFull(RaygroupsError):
    """The send window is full; wait until the stack is writable again."""


@dataclass
class NakAckConfig:
    xmit_interval_s: float = 0.05
    """Period of the gap check: a gap seen on two ticks in a row is NAKed. Shorter recovers
    losses sooner at the price of spurious NAKs under reordering."""
    highest_interval_s: float = 0.1
    """Period of HIGHEST announcements while own messages are unstable (closes the
    last-message-dropped case)."""
    max_xmit_req: int = 2000
    """Most seqnos asked for in one NAK to one sender (bounds retransmission bursts)."""
    send_window: int = 20_000
    """Own multicasts kept until stable. At this many the stack stops being writable;
    application sends beyond twice this raise SendBufferFull."""
    max_pending: int = 100_000
    """Out-of-order messages buffered per sender; more are dropped and counted (the sender
    retransmits them later)."""


class _Window:
    __slots__ = ("delivered", "highest", "pending", "gap_since")

    def __init__(self, delivered: int):
        self.delivered = delivered
        self.highest = delivered
        self.pending: dict[int, Message] = {}
        self.gap_since = False


class NakAck(Layer):
    name = "nakack"
    header_id = 2

    def __init__(self, config: NakAckConfig):
        super().__init__(config)
        self.seqno = 0
        self.stable_seqno = 0
        self.sent: dict[int, Message] = {}
        self.windows: dict = {}
        self.blocked = False

    def start(self) -> None:
        self.ctx.every(self.config.xmit_interval_s, self._check_gaps)
        self.ctx.every(self.config.highest_interval_s, self._announce)

    # -- down ---------------------------------------------------------------------------
    def down(self, msg: Message) -> None:
        if msg.dest is None and not msg.flags & NO_RELIABILITY:
            n = len(self.sent)
            if n >= self.config.send_window:
                if not msg.flags & INTERNAL and n >= 2 * self.config.send_window:
                    raise SendBufferFull(f"{n} multicasts await stability")
                if not self.blocked:
                    self.blocked = True
                    self.up_event(Writable(self.name, False))
            self.seqno += 1
            msg.headers[2] = [MSG, self.seqno]
            self.sent[self.seqno] = msg
        self.below.down(msg)

    # -- up -----------------------------------------------------------------------------
    def up(self, batch: list) -> None:
        out = []
        n_out = 0
        windows = self.windows
        st = self.stats
        for m in batch:
            h = m.headers.get(2)
            if h is None:
                out.append(m)
                n_out += 1
                continue
            try:
                typ, seq = h[0], h[1]
                if typ == MSG:
                    w = windows.get(m.sender)
                    if w is None:
                        st["dropped_unknown_sender"] += 1
                    elif seq <= w.delivered or seq in w.pending:
                        st["duplicates"] += 1
                    elif seq == w.delivered + 1 and not w.pending:
                        w.delivered = seq
                        if seq > w.highest:
                            w.highest = seq
                        out.append(m)
                    elif len(w.pending) >= self.config.max_pending or type(seq) is not int:
                        st["dropped_window_full"] += 1
                    else:
                        pending = w.pending
                        pending[seq] = m
                        if seq > w.highest:
                            w.highest = seq
                        nxt = w.delivered + 1
                        while nxt in pending:
                            out.append(pending.pop(nxt))
                            nxt += 1
                        w.delivered = nxt - 1
                elif typ == XMIT_REQ:
                    self._retransmit(m.sender, seq)
                elif typ == HIGHEST:
                    w = windows.get(m.sender)
                    if w is not None and type(seq) is int and seq > w.highest:
                        w.highest = seq
                else:
                    self.malformed()
            except (TypeError, ValueError, IndexError):
                self.malformed()
        if out:
            st["delivered"] += len(out) - n_out
            self.above.up(out)

    # -- retransmission -----------------------------------------------------------------
    def _check_gaps(self) -> None:
        local = self.ctx.local
        for sender, w in self.windows.items():
            if w.highest <= w.delivered or sender == local:
                w.gap_since = False
                continue
            if not w.gap_since:
                w.gap_since = True  # NAK only a gap that outlived one tick (reordering)
                continue
            top = min(w.highest, w.delivered + self.config.max_xmit_req)
            ranges, start = [], None
            for s in range(w.delivered + 1, top + 1):
                if s in w.pending:
                    if start is not None:
                        ranges.append([start, s - 1])
                        start = None
                elif start is None:
                    start = s
            if start is not None:
                ranges.append([start, top])
            if ranges:
                self.stats["naks_sent"] += 1
                self.below.down(Message(sender, b"", CONTROL, {2: [XMIT_REQ, ranges]}))

    def _retransmit(self, requester, ranges) -> None:
        sent, budget = self.sent, self.config.max_xmit_req
        for lo, hi in ranges:
            for s in range(int(lo), min(int(hi), self.seqno) + 1):
                m = sent.get(s)
                if m is not None:
                    self.below.down(Message(requester, m.payload, m.flags, m.headers))
                    self.stats["retransmitted"] += 1
                budget -= 1
                if budget <= 0:
                    return

    def _announce(self) -> None:
        if self.sent:
            self.below.down(Message(None, b"", CONTROL, {2: [HIGHEST, self.seqno]}))

    # -- events -------------------------------------------------------------------------
    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is GetDigest:
            d = {a: w.delivered for a, w in self.windows.items()}
            if ev.sent:
                d[self.ctx.local] = self.seqno
            return d
        if t is SetDigest:
            self.windows = {a: _Window(s) for a, s in ev.digest.items()}
            self.windows[self.ctx.local] = _Window(self.seqno)
            return None
        if t is Stability:
            self._stable(ev.digest)
            return None
        if t is OwnUnstable:
            return len(self.sent)
        if t is ViewInstalled:
            members = ev.view.members
            old = self.windows
            self.windows = {m: old.get(m) or _Window(0) for m in members}
            if self.ctx.local not in members:
                self.windows.pop(self.ctx.local, None)
        return self.below.down_event(ev)

    def _stable(self, digest: dict) -> None:
        own = digest.get(self.ctx.local, 0)
        sent = self.sent
        while self.stable_seqno < own:
            self.stable_seqno += 1
            sent.pop(self.stable_seqno, None)
        if self.blocked and len(sent) < self.config.send_window // 2:
            self.blocked = False
            self.up_event(Writable(self.name, True))
        for addr, s in digest.items():
            w = self.windows.get(addr)
            if w is not None and s > w.highest:
                w.highest = s  # someone delivered more than we have: the last one was lost
