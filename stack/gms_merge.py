"""The merge part of GMS (seed 003, MERGE2 semantics; JGroups' Merger).

The merge leader is the lowest address among the coordinators that heard of each other,
so no election round is needed. Members of the leader's view that are stuck in another view
(overlapping views after a partial partition) take part like coordinators: each answers for
the view it has and multicasts the result to it. It sends MERGE_REQ with a merge id to the other
coordinators; each answers with its view, digest and members' addresses, or rejects when
already merging. A timer cancels a merge whose leader went silent. The leader combines the
views (subgroups in coordinator order, so it stays coordinator), takes the maximum of
overlapping digests, and sends INSTALL_MERGE to every participating coordinator, which
multicasts the MergeView to its subgroup; former coordinators become participants.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .events import GetDigest
from .view import MergeView, View, ViewId, view_from_wire, view_to_wire

if TYPE_CHECKING:
    from .gms import Gms

MERGE_REQ, MERGE_RSP, INSTALL_MERGE = 8, 9, 10
MIN_SIGHTINGS = 2  # INFOs from a foreign coordinator before it counts (filters stale ones)


class Merger:
    def __init__(self, gms: "Gms"):
        self.gms = gms
        self.sightings: dict = {}
        self.merge_id: Optional[list] = None   # the merge we take part in
        self.leading: Optional[dict] = None    # responses, when we lead
        self.timer = None
        self.counter = 0

    @property
    def busy(self) -> bool:
        return self.merge_id is not None

    def candidate(self, addr, is_coord: bool) -> None:
        """``addr`` announced a view other than ours (as its coordinator, or as a member of
        our view that is stuck in another one)."""
        seen = self.sightings.setdefault(addr, [0, False])
        seen[0] += 1
        seen[1] = seen[1] or is_coord

    def installed(self, view: View) -> None:
        if isinstance(view, MergeView):
            self._done()

    # -- leader -------------------------------------------------------------------------
    def check(self) -> None:
        """Periodic: start a merge if we lead one (MERGE3's check)."""
        g = self.gms
        seen, self.sightings = self.sightings, {}
        others = sorted(a for a, (n, _) in seen.items() if n >= MIN_SIGHTINGS)
        if not others or self.busy or not g.is_coord or g.recon is not None or g.acks is not None:
            return
        local = g.ctx.local
        if any(seen[a][1] and a < local for a in others):
            return  # the lowest coordinator leads
        coords = others
        self.counter += 1
        self.merge_id = [local.uid, self.counter]
        self.leading = {"waiting": set(coords), "rsps": {local: self._my_state()}}
        g.stats["merges_started"] += 1
        for c in coords:
            g._send(c, [MERGE_REQ, self.merge_id])
        self._arm()

    def _my_state(self) -> list:
        g = self.gms
        digest = g.below.down_event(GetDigest(sent=True))
        members = g.view.members
        return [view_to_wire(g.view), [[a.uid, s] for a, s in digest.items() if a in members],
                g._phys_entries(members)]

    def _on_rsp(self, sender, merge_id, ok, state) -> None:
        lead = self.leading
        if lead is None or merge_id != self.merge_id or sender not in lead["waiting"]:
            return
        lead["waiting"].discard(sender)
        if ok:
            lead["rsps"][sender] = state
        if not lead["waiting"]:
            self._install()

    def _install(self) -> None:
        g, lead = self.gms, self.leading
        self.leading = None
        if len(lead["rsps"]) < 2:
            self._done()
            return
        book = g.ctx.book
        views, digest, phys = [], {}, []
        for coord in sorted(lead["rsps"]):
            vwire, dwire, pwire = lead["rsps"][coord]
            views.append(view_from_wire(vwire, book))
            for uid, s in dwire:
                a = book.get(uid)
                digest[a] = max(digest.get(a, 0), int(s))
            phys.extend(pwire)
        members = []
        for v in views:
            members.extend(m for m in v.members if m not in members)
        g.highest_counter = max([g.highest_counter] + [v.view_id.id for v in views])
        mv = MergeView(ViewId(g.ctx.local, g.next_counter()), tuple(members),
                       subgroups=tuple(views))
        msg = [INSTALL_MERGE, self.merge_id, view_to_wire(mv), [view_to_wire(v) for v in views],
               [[a.uid, s] for a, s in digest.items()], phys]
        g.stats["merges_led"] += 1
        for coord in lead["rsps"]:
            if coord == g.ctx.local:
                self._on_install(coord, msg)
            else:
                g._send(coord, msg)

    # -- participant --------------------------------------------------------------------
    def handle(self, sender, typ: int, h: list) -> None:
        if typ == MERGE_REQ:
            self._on_req(sender, h[1])
        elif typ == MERGE_RSP:
            self._on_rsp(sender, h[1], bool(h[2]), h[3])
        elif typ == INSTALL_MERGE:
            self._on_install(sender, h)

    def _on_req(self, sender, merge_id) -> None:
        g = self.gms
        ok = (not self.busy and g.recon is None and g.acks is None
              and g.state.value == "member" and g.view is not None)
        if ok:
            self.merge_id = merge_id
            self._arm()
        g._send(sender, [MERGE_RSP, merge_id, ok, self._my_state() if ok else None])

    def _on_install(self, sender, h: list) -> None:
        g = self.gms
        if h[1] != self.merge_id:
            return
        _, _, vwire, subgroups, dwire, phys = h
        g._learn_phys(phys)
        g._multicast_merge_view(vwire, subgroups, dwire)

    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        mid = self.merge_id
        self.timer = self.gms.ctx.schedule(self.gms.config.merge_timeout_s,
                                           lambda: self._timeout(mid))

    def _timeout(self, mid) -> None:
        if self.merge_id == mid:
            self.gms.stats["merges_cancelled"] += 1
            if self.leading is not None and len(self.leading["rsps"]) > 1:
                self._install()  # go on with those who answered
                return
            self._done()

    def abort(self) -> None:
        self.merge_id, self.leading = None, None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _done(self) -> None:
        self.abort()
        g = self.gms
        if g.is_coord and (g.joins or g.leaves or g.suspects):
            g._schedule_view()
