"""SEQUENCER: total order for messages sent with ``ordered=True`` (JGroups SEQUENCER).

A member forwards an ordered message to the coordinator (best effort, resent every
``resend_interval_s`` until it comes back); the coordinator multicasts it (NAKACK: its own FIFO stream), and every member delivers ordered
messages in that one stream's order, so all members see them in the same order, FIFO per
original sender. The forwarder keeps each message until it sees it come back, and forwards
what is still outstanding to the next coordinator after a view change; duplicates (the old
coordinator did multicast it after all) are dropped by the per-sender sequence number. With
FLUSH at every view change, the old coordinator's multicasts are delivered everywhere before
the new view, so the order agrees with view changes. While a flush has stopped sending, the
coordinator orders nothing: what it ordered then would be held by the flush and go out in
the next view, where another member may be the sequencer, and two sequencers' streams
interleave differently at different members. Nor while the primary layer's state exchange
runs (it refuses sends until the new view is known to be primary; the view reaches this
layer only after it). Forwards that arrive meanwhile wait; the coordinator orders them at
the next view if it is still the sequencer, or drops them (their senders forward them to
the new one). An ordering multicast that leaves later all the same (flow control held it
past a merge that made another member the coordinator) is dropped by every member, its
sender being no longer its view's coordinator. A member with ``max_outstanding`` messages
outstanding is not writable (``Writable("sequencer", False)``, so ``Channel.send`` waits)
until half of them came back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .errors import NotPrimary, RaygroupsError
from .events import CollectExchange, ExchangeResult, Writable
from .layer import MALFORMED, Layer
from .message import CONTROL, INTERNAL, ORDERED, Message
from .view import View, ViewChange

FORWARD, ORDERED_MSG = 0, 1


class OrderWindowFull(RaygroupsError):
    """Too many ordered messages await their turn."""


@dataclass
class SequencerConfig:
    max_outstanding: int = 50_000
    """Forwarded ordered messages not yet seen back. At it the member stops being writable
    (the channel waits) until half came back; a send made regardless raises
    OrderWindowFull."""
    resend_interval_s: float = 0.1
    """Forwards not seen back within this long are sent to the coordinator again."""


class Sequencer(Layer):
    name = "sequencer"
    header_id = 10

    def __init__(self, config: SequencerConfig):
        super().__init__(config)
        self.view: Optional[View] = None
        self.seq = 0
        self.outstanding: dict[int, Message] = {}   # our forwarded, not yet delivered
        self.delivered: dict = {}                    # original sender -> highest seq
        self.waiting: list = []                      # forwards that await a primary view
        self.ordered: dict = {}                      # coordinator: origin -> highest ordered
        self.early: dict = {}                        # coordinator: origin -> {seq: msg}
        self.primary_before = False
        self.mark = 0                                # highest seq at the last resend tick
        self.stopped: set = set()                    # "flush", "primary": order nothing
        self.full = False                            # outstanding at max_outstanding

    @property
    def coordinator(self):
        return self.view.coordinator if self.view is not None else None

    def down(self, msg: Message) -> None:
        if not msg.flags & ORDERED or msg.dest is not None:
            self.below.down(msg)
            return
        if "primary" in self.stopped:  # refused, never sent later (the application decides)
            raise NotPrimary("not in a primary component")
        if len(self.outstanding) >= self.config.max_outstanding:
            raise OrderWindowFull(f"{len(self.outstanding)} ordered messages outstanding")
        self.seq += 1
        msg.headers[10] = [FORWARD, self.seq]
        self.outstanding[self.seq] = msg
        try:
            self._forward(self.seq, msg)
        except RaygroupsError:  # e.g. NotPrimary: refused, so never sent later either
            del self.outstanding[self.seq]
            self.seq -= 1  # and its number is free again: a gap would stall our later ones
            raise
        self._window()

    def _window(self) -> None:
        """Not writable at ``max_outstanding`` outstanding, writable again at half."""
        n, cap = len(self.outstanding), self.config.max_outstanding
        if not self.full and n >= cap:
            self.full = True
            self.stats["window_full"] += 1
            self.above.up_event(Writable(self.name, False))
        elif self.full and n <= cap // 2:
            self.full = False
            self.above.up_event(Writable(self.name, True))

    def _forward(self, seq: int, msg: Message) -> None:
        """To the coordinator of our current view, best effort: we resend what does not
        come back, and a forward from an older view is ignored, so a stale one can never be
        ordered in another component after a partition."""
        coord = self.coordinator
        if coord == self.ctx.local:
            self._order(self.ctx.local, seq, msg)
        elif coord is not None:
            vid = self.view.view_id
            headers = dict(msg.headers)  # keep the headers of the layers above (FRAG)
            headers[10] = [FORWARD, seq, vid.coord.uid, vid.id]
            self.below.down(Message(coord, msg.payload, msg.flags | CONTROL, headers))

    def start(self) -> None:
        self.ctx.every(self.config.resend_interval_s, self._resend)

    def _resend(self) -> None:
        """Forwards still outstanding a whole interval later go again."""
        mark, self.mark = self.mark, self.seq
        if self.view is not None and self.view.primary and self.outstanding:
            for seq, msg in list(self.outstanding.items()):
                if seq > mark:
                    break
                self.stats["resent"] += 1
                self._forward(seq, msg)

    def _order(self, origin, seq: int, msg: Message) -> None:
        """Coordinator: put a forwarded message into the total order (once), only inside a
        primary component: a minority never orders (nor delivers) what the majority may
        order differently."""
        upto = max(self.ordered.get(origin, 0), self.delivered.get(origin, 0))
        if seq <= upto:
            return
        if not (self.view is not None and self.view.primary) or self.stopped:
            if len(self.waiting) < self.config.max_outstanding:
                self.waiting.append((origin, seq, msg))
            else:
                self.stats["dropped_waiting"] += 1  # its sender forwards it again later
            return
        early = self.early.setdefault(origin, {})
        early[seq] = msg
        try:
            while upto + 1 in early:  # each sender's messages in its own order (FIFO)
                m = early[upto + 1]
                flags = m.flags & ~(CONTROL | INTERNAL)
                headers = {k: v for k, v in m.headers.items() if k > 10}  # layers above us
                headers[10] = [ORDERED_MSG, origin.uid, upto + 1]
                self.below.down(Message(None, m.payload, flags, headers))
                del early[upto + 1]
                upto += 1
                self.stats["ordered"] += 1
        except RaygroupsError:
            # refused below (FlowControlFull: the send queue is at its bound), so not sent:
            # it stays early and is ordered when its sender forwards it again. Never raised
            # into the receive path: the rest of the batch (and a view change, when this runs
            # for the forwards that waited for it) would be lost with it.
            self.stats["order_deferred"] += 1
        finally:
            self.ordered[origin] = upto  # what did go: never ordered a second time
        if len(early) > self.config.max_outstanding:
            early.clear()  # bounded: the sender resends

    def up(self, batch: list) -> None:
        out = []
        coord = self.coordinator  # a view changes between batches, never within one
        for m in batch:
            h = m.headers.get(10)
            if h is None:
                out.append(m)
                continue
            try:
                if h[0] == FORWARD:
                    vid = self.view.view_id if self.view is not None else None
                    if coord == self.ctx.local and type(h[1]) is int and \
                            vid is not None and h[2] == vid.coord.uid and h[3] == vid.id:
                        self._order(m.sender, h[1], m)
                    else:
                        self.stats["stale_forwards"] += 1
                elif h[0] == ORDERED_MSG:
                    origin, seq = self.ctx.book.get(h[1]), h[2]
                    if type(seq) is not int:
                        raise TypeError
                    if m.sender != coord:
                        # ordered by a member that is no longer the sequencer, sent late
                        # (held by flow control past the view change that made another
                        # member the coordinator): every member drops it alike, in the same
                        # view, and its origin forwards it to the new sequencer
                        self.stats["stale_orders"] += 1
                    elif seq > self.delivered.get(origin, 0):
                        self.delivered[origin] = seq
                        m.sender = origin
                        out.append(m)
                        if origin == self.ctx.local:
                            self.outstanding.pop(seq, None)
                            if self.full:
                                self._window()
                    else:
                        self.stats["duplicates"] += 1
                else:
                    self.malformed()
            except (TypeError, ValueError, IndexError, KeyError):
                self.malformed()
        if out:
            self.above.up(out)

    def up_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is Writable and ev.layer in ("flush", "primary"):
            # what waits is ordered at the next view, or forwarded again by its sender
            # meanwhile (a flush that ended without a view change)
            if ev.writable:
                self.stopped.discard(ev.layer)
            else:
                self.stopped.add(ev.layer)
        elif t is CollectExchange:
            # what we delivered per sender, so that a message ordered in a component we
            # were partly in is never ordered a second time (after a merge)
            ev.data["sequencer"] = [[a.uid, s] for a, s in self.delivered.items()]
            return self.above.up_event(ev)  # the application adds its own
        if t is ExchangeResult:
            book = self.ctx.book
            for data in ev.data.values():
                try:
                    for uid, seq in data.get("sequencer", ()):
                        a = book.get(uid)
                        if int(seq) > self.delivered.get(a, 0):
                            self.delivered[a] = int(seq)
                except MALFORMED:
                    self.malformed()
            for seq in [s for s in self.outstanding if s <= self.delivered.get(self.ctx.local, 0)]:
                del self.outstanding[seq]  # ordered elsewhere already: done
            if self.full:
                self._window()
            return self.above.up_event(ev)
        if t is ViewChange:
            old = self.coordinator
            self.view = ev.view
            members = ev.view.member_set
            if len(self.delivered) > 4 * len(members) + 1024:  # bound it; keep members
                self.delivered = {a: s for a, s in self.delivered.items() if a in members}
            if self.coordinator != old:  # a new sequencer starts from what was delivered
                self.ordered, self.early = {}, {}
            if self.coordinator != self.ctx.local:
                self.waiting = []  # the new sequencer gets them from their senders
            elif not self.stopped:  # (else a newer flush or round runs: they wait for its view)
                waiting, self.waiting = self.waiting, []
                for item in waiting:
                    self._order(*item)
            if ev.view.primary and self.ctx.local in members and \
                    (self.coordinator != old or not self.primary_before):
                for seq, msg in list(self.outstanding.items()):  # to the (new) sequencer
                    self._forward(seq, msg)
            self.primary_before = ev.view.primary
        return self.above.up_event(ev)
