"""NAKACK: reliable FIFO multicast (the JGroups design notes).

Every multicast gets the sender's next seqno. Receivers deliver each sender's messages in
seqno order, buffer what arrives early, and ask the sender to retransmit gaps (a NAK) once
a gap has outlived one ``xmit_interval_s`` tick. Delivered messages are kept until stable,
so any member can retransmit another's messages (needed when the sender crashed: GMS's
catch-up before a view that removes it). The last-message-dropped case is closed by
HIGHEST announcements, multicast while the sender has unstable messages, and by STABLE's
digests. The sender keeps its messages until STABLE reports them delivered everywhere;
that buffer is the send window: when it is full the stack reports itself not writable.
Every multicast carries the sender's view counter; a receiver still in an older view holds it
until it installed that view, so no member delivers a message of V' while still in V.
The stack's own multicasts (INTERNAL: views, primary-component states) are kept packed, one
bytes object each, until stable: a VIEW of N members decodes into O(N) small objects, and
every member keeps every VIEW of a busy formation until STABLE catches up.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter, gt
from typing import Any

import msgpack

from .errors import RaygroupsError
from .events import (Catchup, Freeze, GetDigest, MergeDigest, SetDigest, Stability, Thaw,
                     ViewInstalled, Writable)
from .layer import Layer, MALFORMED
from .message import CONTROL, INTERNAL, NO_RELIABILITY, Message
from .view import carried

MSG, XMIT_REQ, HIGHEST = 0, 1, 2
EARLY_SENDERS, EARLY_PER_SENDER = 16, 256  # bounds of the early-arrival buffer
# MSG header: [MSG, seqno, view counter of the sender] (+ original sender's uid when
# retransmitted by another member)


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
    """Out-of-order messages buffered per sender, and delivered messages kept per sender
    until stable; beyond it out-of-order arrivals are dropped (the sender retransmits) and
    the oldest kept messages evicted (counted)."""


class _Packed:
    """A kept INTERNAL message, packed (``_keep``); ``thaw`` for a retransmission."""
    __slots__ = ("data",)

    def __init__(self, m: Message):
        self.data = _pack([m.flags, m.headers, m.payload])

    def thaw(self) -> Message:
        flags, headers, payload = msgpack.unpackb(self.data, raw=False, strict_map_key=False)
        return Message(None, payload, flags, headers)


_pack = msgpack.Packer(use_bin_type=True).pack
_delivered, _highest, _gap_since = (attrgetter("delivered"), attrgetter("highest"),
                                   attrgetter("gap_since"))


def _keep(m: Message):
    """What a store keeps of a delivered or sent multicast (see the module docstring)."""
    return _Packed(m) if m.flags & INTERNAL else m


class _Window:
    __slots__ = ("delivered", "highest", "pending", "store", "gap_since", "xmit_from", "limit")

    def __init__(self, delivered: int):
        self.delivered = delivered
        self.highest = delivered
        self.pending: dict[int, Message] = {}
        self.store: dict[int, Message] = {}  # delivered, kept until stable
        self.gap_since = False
        self.xmit_from = None
        self.limit = None  # FLUSH: deliver nothing above this seqno


def _purge(store: dict, upto: int) -> None:
    """Drop every seqno <= ``upto`` from a store whose keys were inserted in ascending
    order. One ``next(iter())`` per call: deleting the first key one at a time re-scans the
    deleted slots every time, quadratic in the number purged."""
    if not store:
        return
    first = next(iter(store))
    if first > upto:
        return
    if upto - first < 2 * len(store):
        pop = store.pop
        for k in range(first, upto + 1):
            pop(k, None)
    else:
        for k in [k for k in store if k <= upto]:
            del store[k]


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
        self.catchups: list = []  # Catchup events waiting for their targets
        self.frozen_for = None    # the view whose flush froze some windows
        self.early: dict = {}     # sender -> multicasts that came before its window
        self.view_counter = 0  # sent in every multicast: receivers in an older view hold it
        self.retired: dict = {}  # last delivered seqno of members that left our view
        self.departed: dict = {}  # their windows, kept for two more views to serve catch-ups
        self.gappy = False  # some window may have a gap: _check_gaps scans (else O(1) a tick)

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
            msg.headers[2] = [MSG, self.seqno, self.view_counter]
            self.sent[self.seqno] = _keep(msg)
        self.below.down(msg)

    # -- up -----------------------------------------------------------------------------
    def up(self, batch: list) -> None:
        out = []
        n_out = 0
        windows = self.windows
        vc = self.view_counter
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
                    if type(seq) is not int or type(h[2]) is not int:
                        raise TypeError
                    m.dest = None  # a multicast, even when retransmitted to us alone
                    if len(h) > 3:  # retransmitted by a member other than the sender
                        m.sender = self.ctx.book.get(h[3])
                    w = windows.get(m.sender)
                    if w is None:
                        self._keep_early(m)
                    elif seq <= w.delivered or seq in w.pending:
                        st["duplicates"] += 1
                    elif seq == w.delivered + 1 and not w.pending and w.limit is None \
                            and h[2] <= vc:
                        w.delivered = seq
                        if seq > w.highest:
                            w.highest = seq
                        store = w.store
                        store[seq] = _keep(m)
                        if len(store) > self.config.max_pending:
                            del store[next(iter(store))]
                            st["store_evicted"] += 1
                        out.append(m)
                    elif len(w.pending) >= self.config.max_pending:
                        st["dropped_window_full"] += 1
                    else:
                        w.pending[seq] = m
                        if seq > w.highest:
                            w.highest = seq
                        self.gappy = True
                        self._drain(w, out)
                elif typ == XMIT_REQ:
                    self._retransmit(m.sender, seq, h[2] if len(h) > 2 else None)
                elif typ == HIGHEST:
                    w = windows.get(m.sender)
                    if w is not None and type(seq) is int and seq > w.highest:
                        w.highest = seq
                        self.gappy = True
                else:
                    self.malformed()
            except MALFORMED:
                self.malformed()
        if out:
            st["delivered"] += len(out) - n_out
            self.above.up(out)
        if self.catchups:
            self._check_catchup()

    def _keep_early(self, m: Message) -> None:
        """A multicast from a member we have no window for yet (typically the coordinator's
        messages racing its JOIN_RSP, or a joiner's first messages racing its VIEW): keep a
        few, and replay them once the window exists, instead of waiting for a NAK."""
        early = self.early.get(m.sender)
        if early is None:
            if len(self.early) >= EARLY_SENDERS:
                self.stats["dropped_unknown_sender"] += 1
                return
            early = self.early[m.sender] = []
        if len(early) < EARLY_PER_SENDER:
            early.append(m)
            self.stats["kept_early"] += 1
        else:
            self.stats["dropped_unknown_sender"] += 1

    def _replay_early(self, view_counter=None) -> None:
        """Run what arrived early through the normal path, now that windows exist; with
        ``view_counter`` only what was sent in that view (a joiner's first messages), so
        nothing from another component's past is ever replayed. The rest is forgotten."""
        early, self.early = self.early, {}
        batch = [m for sender, msgs in early.items() if sender in self.windows for m in msgs
                 if view_counter is None or m.headers[2][2] == view_counter]
        if batch:
            self.ctx.schedule(0, lambda: self.up(batch))

    def _drain(self, w: _Window, out: list) -> None:
        """Move the contiguous run of pending messages (up to a flush limit) to ``out``."""
        pending, store, vc = w.pending, w.store, self.view_counter
        nxt, top = w.delivered + 1, w.limit
        while nxt in pending and (top is None or nxt <= top) and pending[nxt].headers[2][2] <= vc:
            m = pending.pop(nxt)
            store[nxt] = _keep(m)
            out.append(m)
            nxt += 1
        w.delivered = nxt - 1
        while len(store) > self.config.max_pending:
            del store[next(iter(store))]
            self.stats["store_evicted"] += 1

    def _release(self) -> None:
        """After a view change: deliver what waited beyond the flush limits or was sent in
        the view just installed."""
        out = []
        for w in self.windows.values():
            if w.pending:
                self._drain(w, out)
        if out:
            self.stats["delivered"] += len(out)
            self.above.up(out)

    # -- retransmission -----------------------------------------------------------------
    def _check_gaps(self) -> None:
        """NAK what a gap kept from us for a tick. Only while some window may have one
        (``gappy``: set wherever a window's highest may pass its delivered, cleared by a
        scan that finds none): an idle member of N windows would otherwise scan them all
        every tick, O(N^2) work a tick in all."""
        if not self.gappy:
            return
        ws = self.windows.values()
        if not any(map(gt, map(_highest, ws), map(_delivered, ws))) and \
                not any(map(_gap_since, ws)):
            self.gappy = False
            return  # no gap anywhere, none pending (O(N): in C)
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
                src = w.xmit_from or sender
                hdr = [XMIT_REQ, ranges] if src == sender else [XMIT_REQ, ranges, sender.uid]
                self.below.down(Message(src, b"", CONTROL, {2: hdr}))

    def _retransmit(self, requester, ranges, orig_uid) -> None:
        """Resend our own messages, or (``orig_uid``) another member's that we delivered."""
        own = orig_uid is None or orig_uid == self.ctx.local.uid
        if own:
            store = self.sent
        else:
            orig = self.ctx.book.get(orig_uid)
            w = self.windows.get(orig) or self.departed.get(orig, (None,))[0]
            if w is None:
                return
            store = w.store
        budget = self.config.max_xmit_req
        for lo, hi in ranges:
            for s in range(int(lo), int(hi) + 1):
                m = store.get(s)
                if type(m) is _Packed:
                    m = m.thaw()
                if m is not None:
                    headers = m.headers
                    if not own:
                        headers = dict(headers)
                        headers[2] = [MSG, s, m.headers[2][2], orig_uid]
                    self.below.down(Message(requester, m.payload, m.flags, headers))
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
            windows = self.windows
            d = dict(zip(windows, map(_delivered, windows.values())))  # (in C: O(N) a view)
            if ev.sent:
                d[self.ctx.local] = self.seqno
            return d
        if t is SetDigest:
            self.windows = {a: _Window(s) for a, s in ev.digest.items()}
            self.windows[self.ctx.local] = _Window(self.seqno)
            self._replay_early()
            return None
        if t is Stability:
            self._stable(ev.digest)
            return None
        if t is Freeze:
            if ev.view_id is not None and (self.frozen_for is None or self.frozen_for < ev.view_id):
                self.frozen_for = ev.view_id
            # a new flush round reports what was delivered (GetDigest) and delivers no
            # further until its cut: a cut of an abandoned round that raised a limit no
            # longer counts (its catch-up could deliver beyond the new round's cut)
            for addr in ev.members:
                w = self.windows.get(addr)
                if w is not None:
                    w.limit = w.delivered
            return None
        if t is Thaw:
            if self.frozen_for is not None and self.frozen_for == ev.view_id:
                self.frozen_for = None
                for w in self.windows.values():
                    w.limit = None
                self.ctx.schedule(0, self._release)
            return None
        if t is Catchup:
            for addr, (seqno, holder) in ev.targets.items():
                w = self.windows.get(addr)
                if w is None:
                    continue
                if w.limit is not None:  # frozen (removed): up to the cut, no further
                    w.limit = max(w.limit, seqno)
                if seqno > w.delivered:
                    w.highest = max(w.highest, seqno)
                    w.xmit_from = holder if holder != self.ctx.local else None
                    self.gappy = True
            self.catchups.append(ev)
            self._release()  # a raised limit may free what waited in order
            self._check_catchup()
            return None
        if t is MergeDigest:
            others = set(ev.others)
            for addr, seqno in ev.digest.items():
                w = self.windows.get(addr)
                if w is None:
                    self.windows[addr] = _Window(max(seqno, self.retired.pop(addr, 0)))
                elif addr in others and w.delivered < seqno and addr != self.ctx.local:
                    w.delivered, w.highest = seqno, max(seqno, w.highest)
                    self.gappy = True
                    w.pending = {s: m for s, m in w.pending.items() if s > seqno}
            return None
        if t is ViewInstalled:
            members = ev.view.members
            old = self.windows
            retired = self.retired
            self.windows = carried(old, members, lambda m: _Window(retired.pop(m, 0)))
            self.view_counter = ev.view.view_id.id
            self.gappy = True  # (a carried window may hold pending messages)
            self._replay_early(self.view_counter)
            self.catchups = [c for c in self.catchups if not c.until_view]
            # freezes belong to the flush of a view: a view that is not newer than the
            # flushed one (we were late installing it) keeps them
            thaw = self.frozen_for is None or self.frozen_for < ev.view.view_id
            if thaw:
                self.frozen_for = None
            for w in self.windows.values():
                w.xmit_from = None
                if thaw:
                    w.limit = None
            self.ctx.schedule(0, self._release)
            self.departed = {a: (w, n - 1) for a, (w, n) in self.departed.items() if n > 1}
            for a, w in old.items():  # a member that comes back never redelivers
                if a not in self.windows:
                    retired[a] = w.delivered
                    self.departed[a] = (w, 2)
            while len(retired) > 4096:
                del retired[next(iter(retired))]
            mine = old.get(self.ctx.local)
            if mine is not None:  # our own stream goes on even when we are excluded
                self.windows[self.ctx.local] = mine
        return self.below.down_event(ev)

    def _check_catchup(self) -> None:
        done = [ev for ev in self.catchups if self._reached(ev.targets)]
        if done:
            self.catchups = [ev for ev in self.catchups if ev not in done]
            for ev in done:
                ev.callback()

    def _reached(self, targets: dict) -> bool:
        """Delivered up to every target - or held only by messages of a newer view, which
        belong after the view change anyway."""
        vc = self.view_counter
        for addr, (seqno, _) in targets.items():
            w = self.windows.get(addr)
            if w is None or w.delivered >= seqno:
                continue
            nxt = w.pending.get(w.delivered + 1)
            if nxt is None or nxt.headers[2][2] <= vc:
                return False
        return True

    def _stable(self, digest: dict) -> None:
        own = min(digest.get(self.ctx.local, 0), self.seqno)
        sent = self.sent
        while self.stable_seqno < own:
            self.stable_seqno += 1
            sent.pop(self.stable_seqno, None)
        if self.blocked and len(sent) < self.config.send_window // 2:
            self.blocked = False
            self.up_event(Writable(self.name, True))
        for addr, s in digest.items():
            w = self.windows.get(addr)
            if w is None:
                continue
            if s > w.highest:
                w.highest = s  # someone delivered more than we have: the last one was lost
                self.gappy = True
            if w.store:  # (most are empty: no call per member and round)
                _purge(w.store, s)
