"""GMS: group membership with agreed views (seed 003).

The oldest member (``members[0]``) is coordinator. Joiners discover it and send JOIN_REQ;
leavers drain their multicasts (wait until STABLE reports them delivered everywhere) and
send LEAVE_REQ. The coordinator keeps a pending membership, so requests that arrive while a
view is in flight build on it and none is lost; it bundles requests for
``view_bundling_s``, multicasts the VIEW reliably (NAKACK, so views install in FIFO order
with its other messages), and waits for VIEW_ACKs before the next change. A joiner gets
JOIN_RSP with the view and a digest taken right after the VIEW was sent, whose coordinator
entry is the VIEW's own seqno: exact, no +1 kludge.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Optional

from .address import Address
from .events import (AddPhysical, Connect, FindMembers, GetDigest, GetPhysical, Leave,
                     MembershipStatus, OwnUnstable, RunStable, SetDigest, ViewInstalled)
from .layer import Layer
from .message import CONTROL, INTERNAL, Message
from .view import Left, View, ViewChange, ViewId, view_from_wire, view_to_wire

JOIN_REQ, JOIN_RSP, LEAVE_REQ, VIEW, VIEW_ACK = range(5)


class State(enum.Enum):
    IDLE = "idle"
    JOINING = "joining"
    MEMBER = "member"
    LEAVING = "leaving"
    LEFT = "left"


@dataclass
class GmsConfig:
    join_timeout_s: float = 2.0
    """Wait this long for JOIN_RSP before discovering again."""
    found_after_rounds: int = 2
    """Empty discovery rounds (nobody answered) before founding a new group. More rounds
    make a split less likely when pings are lost; fewer found a lone group sooner."""
    retry_jitter_s: float = 0.1
    """When others are joining too, retry discovery after up to this long."""
    view_bundling_s: float = 0.01
    """Gather join/leave requests this long into one view change."""
    view_ack_timeout_s: float = 2.0
    """Wait at most this long for every member to acknowledge a view before the next."""
    leave_drain_s: float = 2.0
    """A leaver waits at most this long for its multicasts to become stable."""
    leave_timeout_s: float = 5.0
    """A leaver gives up waiting for the view that excludes it after this long."""


class Gms(Layer):
    name = "gms"
    header_id = 5

    def __init__(self, config: GmsConfig):
        super().__init__(config)
        self.state = State.IDLE
        self.view: Optional[View] = None
        self.empty_rounds = 0
        self.join_timer = None
        # coordinator side
        self.tmp: list[Address] = []          # pending membership (seed 003)
        self.joins: dict[Address, Any] = {}   # joiner -> physical address
        self.leaves: list[Address] = []
        self.scheduled = False
        self.acks: Optional[set] = None
        self.ack_timer = None
        self.join_rsps: dict[Address, list] = {}
        self.ack_view = 0
        self.drain_deadline = 0.0
        self.drained = False

    @property
    def is_coord(self) -> bool:
        return self.view is not None and self.view.members[0] == self.ctx.local

    # -- joining ------------------------------------------------------------------------
    def _connect(self) -> None:
        if self.state is not State.IDLE:
            return
        self.state = State.JOINING
        self.below.down_event(MembershipStatus(False, False))
        self._discover()

    def _discover(self) -> None:
        if self.state is State.JOINING:
            self.below.down_event(FindMembers(self._on_found))

    def _on_found(self, found: list) -> None:
        if self.state is not State.JOINING:
            return
        local = self.ctx.local
        coords = sorted({p.addr if p.is_coord else p.coord for p in found
                         if p.joined and (p.is_coord or p.coord is not None)})
        if coords:
            coord = coords[0]
            self.stats["join_requests_sent"] += 1
            phys = self.below.down_event(GetPhysical())
            self.below.down(Message(coord, b"", CONTROL, {5: [JOIN_REQ, local.name,
                                                               list(phys) if phys else None]}))
            self.join_timer = self.ctx.schedule(self.config.join_timeout_s, self._join_timeout)
            return
        joining = [p.addr for p in found if not p.joined]
        if not found:
            self.empty_rounds += 1
        if (not found and self.empty_rounds >= self.config.found_after_rounds) or \
                (joining and all(local < a for a in joining)):
            self.tmp = [local]
            self._install(View(ViewId(local, 1), (local,)))
            return
        if found:
            self.ctx.schedule(self.ctx.rng.uniform(0, self.config.retry_jitter_s), self._discover)
        else:
            self._discover()

    def _join_timeout(self) -> None:
        self.join_timer = None
        if self.state is State.JOINING:
            self.stats["join_timeouts"] += 1
            self._discover()

    def _on_join_rsp(self, h: list) -> None:
        if self.state is not State.JOINING:
            return
        book = self.ctx.book
        view = view_from_wire(h[1], book)
        digest = {book.get(uid): int(s) for uid, s in h[2]}
        if self.ctx.local not in view:
            raise ValueError("join response without the joiner")
        self._learn_phys(h[3])
        if self.join_timer is not None:
            self.join_timer.cancel()
            self.join_timer = None
        self._install(view, digest)

    def _learn_phys(self, entries: list) -> None:
        for uid, host, port in entries:
            self.below.down_event(AddPhysical(self.ctx.book.get(uid), (str(host), int(port))))

    # -- installing views ---------------------------------------------------------------
    def _install(self, view: View, digest: Optional[dict] = None) -> None:
        prev = self.view
        if prev is not None and view.view_id <= prev.view_id:
            return
        local = self.ctx.local
        if digest is not None:
            self.below.down_event(SetDigest(digest))
        self.view = view
        if view.view_id.coord != local:
            self.tmp = list(view.members)
        if local in view:
            if self.state is State.JOINING:
                self.state = State.MEMBER
        self.stats["views_installed"] += 1
        self.below.down_event(ViewInstalled(view, prev))
        self.above.up_event(ViewChange(view, prev))
        if view.view_id.coord != local:
            self._send(view.view_id.coord, [VIEW_ACK, view.view_id.coord.uid, view.view_id.id])
        else:
            self._on_ack(local, view.view_id.id)
        if local not in view:
            if view.view_id.coord != local:  # a leaving creator waits for the acks first
                self._finish_leave("left" if self.state is State.LEAVING else "excluded")
        elif self.state is State.LEAVING and self.drained:
            self._request_leave()
        elif self.is_coord and (self.joins or self.leaves):
            self._schedule_view()

    def _send(self, dest: Address, hdr: list) -> None:
        self.below.down(Message(dest, b"", INTERNAL, {5: hdr}))

    # -- coordinator ----------------------------------------------------------------------
    def _on_join_req(self, sender: Address, name: str, phys) -> None:
        self.ctx.book.get(sender.uid, str(name))
        if phys is not None:
            self.below.down_event(AddPhysical(sender, (str(phys[0]), int(phys[1]))))
        if not self.is_coord or self.state is not State.MEMBER:
            self.stats["join_requests_ignored"] += 1
            return
        cached = self.join_rsps.get(sender)
        if cached is not None:
            self._send(sender, cached)  # a retry: the view it joined with, same exact digest
        elif sender not in self.tmp:
            self.joins[sender] = phys
            self._schedule_view()

    def _on_leave_req(self, sender: Address) -> None:
        """Kept even when not (yet) coordinator: the request may overtake the view that
        makes us coordinator."""
        if self.state is not State.LEFT and sender in self.tmp and sender not in self.leaves:
            self.leaves.append(sender)
            if self.is_coord:
                self._schedule_view()

    def _schedule_view(self) -> None:
        if not self.scheduled and self.acks is None:
            self.scheduled = True
            self.ctx.schedule(self.config.view_bundling_s, self._change_view)

    def _change_view(self) -> None:
        self.scheduled = False
        if not self.is_coord or self.acks is not None:
            return
        local = self.ctx.local
        joins = [j for j in self.joins if j not in self.tmp]
        leaves = set(self.leaves)
        self.joins, self.leaves = {}, []
        members = [m for m in self.tmp if m not in leaves] + joins
        if members == self.tmp:
            return
        if not members:  # the last member leaves
            self._finish_leave("left")
            return
        counter = max(self.view.view_id.id, 0) + 1
        view = View(ViewId(local, counter), tuple(members))
        self.tmp = members
        phys_new = self._phys_entries(joins)
        self.stats["views_sent"] += 1
        self.below.down(Message(None, b"", INTERNAL, {5: [VIEW, view_to_wire(view), phys_new]}))
        digest = self.below.down_event(GetDigest(sent=True))
        for gone in leaves:  # a leaver may miss the multicast once stability forgets it
            if gone != local:
                self._send(gone, [VIEW, view_to_wire(view), []])
        if joins:
            dwire = [[a.uid, s] for a, s in digest.items() if a in view]
            phys_all = self._phys_entries(members)
            for j in joins:
                rsp = [JOIN_RSP, view_to_wire(view), dwire, phys_all]
                self.join_rsps[j] = rsp
                self._send(j, rsp)
        if len(self.join_rsps) > 4 * len(members) + 64:
            self.join_rsps = {a: r for a, r in self.join_rsps.items() if a in members}
        self.acks = set(members) | {m for m in self.view.members if m in leaves}
        self.ack_view = counter
        self.ack_timer = self.ctx.schedule(self.config.view_ack_timeout_s, self._ack_timeout)

    def _phys_entries(self, addrs) -> list:
        out = []
        for a in addrs:
            p = self.below.down_event(GetPhysical(None if a == self.ctx.local else a))
            if p is not None:
                out.append([a.uid, p[0], p[1]])
        return out

    def _on_ack(self, sender: Address, counter: int) -> None:
        if self.acks is None or counter != self.ack_view:
            return
        self.acks.discard(sender)
        if not self.acks:
            self._acks_done()

    def _ack_timeout(self) -> None:
        self.stats["view_ack_timeouts"] += 1
        self.ctx.log(f"view {self.ack_view}: no ack from {sorted(self.acks or ())}")
        self._acks_done()

    def _acks_done(self) -> None:
        self.acks = None
        if self.ack_timer is not None:
            self.ack_timer.cancel()
            self.ack_timer = None
        if self.state is State.LEAVING and self.ctx.local not in self.tmp:
            self._finish_leave("left")
        elif self.joins or self.leaves:
            self._schedule_view()

    # -- leaving --------------------------------------------------------------------------
    def _leave(self) -> None:
        if self.state is State.JOINING or self.state is State.IDLE:
            self._finish_leave("left")
            return
        if self.state is not State.MEMBER:
            return
        self.state = State.LEAVING
        self.drain_deadline = self.ctx.now() + self.config.leave_drain_s
        self.ctx.schedule(self.config.leave_drain_s + self.config.leave_timeout_s,
                          lambda: self._finish_leave("timeout"))
        self.below.down_event(RunStable())
        self._drain()

    def _drain(self) -> None:
        if self.state is not State.LEAVING:
            return
        unstable = self.below.down_event(OwnUnstable()) or 0
        if unstable and self.ctx.now() < self.drain_deadline:
            self.ctx.schedule(0.01, self._drain)
            return
        if unstable:
            self.stats["leave_undrained"] += 1
        self.drained = True
        self._request_leave()

    def _request_leave(self) -> None:
        if self.state is not State.LEAVING:
            return
        if not self.is_coord:
            self._send(self.view.coordinator, [LEAVE_REQ])
            self.ctx.schedule(self.config.view_ack_timeout_s, self._request_leave)
        elif self.ctx.local not in self.leaves:
            self.leaves.append(self.ctx.local)
            self._schedule_view()

    def _finish_leave(self, reason: str) -> None:
        if self.state is State.LEFT:
            return
        self.state = State.LEFT
        self.above.up_event(Left(reason))

    # -- traffic --------------------------------------------------------------------------
    def up(self, batch: list) -> None:
        out = []
        for m in batch:
            h = m.headers.get(5)
            if h is None:
                if not m.flags & INTERNAL:
                    out.append(m)
                continue
            try:
                self._handle(m.sender, h)
            except (TypeError, ValueError, IndexError, KeyError):
                self.malformed()
        if out:
            self.above.up(out)

    def _handle(self, sender: Address, h: list) -> None:
        typ = h[0]
        if typ == VIEW:
            view = view_from_wire(h[1], self.ctx.book)
            self._learn_phys(h[2])
            if self.state is State.MEMBER or self.state is State.LEAVING:
                self._install(view)
        elif typ == VIEW_ACK:
            if sender in (self.acks or ()):
                self._on_ack(sender, int(h[2]))
        elif typ == JOIN_REQ:
            self._on_join_req(sender, h[1], h[2])
        elif typ == JOIN_RSP:
            self._on_join_rsp(h)
        elif typ == LEAVE_REQ:
            self._on_leave_req(sender)
        else:
            self.malformed()

    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is Connect:
            self._connect()
            return None
        if t is Leave:
            self._leave()
            return None
        return self.below.down_event(ev)
