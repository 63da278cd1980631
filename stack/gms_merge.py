"""The merge part of GMS (the JGroups design notes, MERGE2 semantics; JGroups' Merger).

The merge leader is the lowest address among the coordinators that heard of each other,
so no election round is needed. It sends MERGE_REQ with a merge id to the other
coordinators; each flushes its whole view (virtual synchrony across the merge) and answers
with its view, digest and members' addresses, or rejects when already merging, or when it
no longer coordinates a view (a stale sighting: it moved into another one), or when a member
of its view is suspected: it excludes the suspect first, since the view it answers with names
every member and only the flushed ones stopped sending. Only a view's
coordinator speaks for it, since only it can stop every member of it: a member that flushed
itself alone and then multicast the MergeView to its view moved members that never stopped
sending, and they delivered their last messages in the old view while the others did in the
new one. A member stuck in another view is left to that view's coordinator, or forms a
singleton when its own coordinator keeps announcing a newer view (gms.py), and merges as
the singleton's coordinator. A timer cancels a merge whose leader went silent. The leader combines the
views (subgroups in coordinator order, so it stays coordinator), takes the maximum of
overlapping digests, and sends INSTALL_MERGE to every participating coordinator, which
multicasts the MergeView to its subgroup; former coordinators become participants.

MERGE_REQ carries the leader's agreed settings (``GmsConfig.agreed``, as JOIN_REQ does): a
coordinator whose settings differ refuses, saying how, and each side then leaves the other
out of its merges (two groups formed apart with incompatible settings stay apart, counted as
``merges_refused`` and ``merges_incompatible``, instead of a merged group whose layers
disagree; the leader does not flush its subgroup for them again). It carries the leader's
subgroup's wire versions too (the versions every member of it speaks): a subgroup whose own
have none in common with them refuses the same way, but the two stay apart only until either
one's view changes (an upgrade in progress: the next view may speak a version in common).
With three or more subgroups, the leader leaves out of the MergeView any subgroup whose
versions have none in common with those of the subgroups before it (coordinator order); that
subgroup's merge times out and it carries on.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .view import (BASE_RANGE, MergeView, View, ViewId, common_range, range_from_wire,
                   version_differences, view_from_wire, view_to_wire)

if TYPE_CHECKING:
    from .gms import Gms

MERGE_REQ, MERGE_RSP, INSTALL_MERGE = 8, 9, 10
MIN_SIGHTINGS = 2  # INFOs from a foreign coordinator before it counts (filters stale ones)
MAX_INCOMPATIBLE = 1024  # coordinators remembered as incompatible (forgotten all at once)
VERSIONS = "transport.wire_versions"  # the setting of a refusal for wire versions alone


class Merger:
    def __init__(self, gms: "Gms"):
        self.gms = gms
        self.sightings: dict = {}
        self.merge_id: Optional[list] = None   # the merge we take part in
        self.leading: Optional[dict] = None    # responses, when we lead
        self.timer = None
        self.counter = 0
        self.cut: dict = {}                    # our subgroup's flush cut
        self.cut_stable = True                 # every participant flushed from our view
        # coordinators not to merge with -> None (agreed settings differ: for good), or
        # (their view, ours) when only wire versions did: until either view changes
        self.incompatible: dict = {}
        self.announced: dict = {}              # coordinator -> the view it announced last

    @property
    def busy(self) -> bool:
        return self.merge_id is not None

    def candidate(self, addr, view_id: ViewId) -> None:
        """``addr`` announced, as its coordinator, view ``view_id``, other than ours."""
        self.sightings[addr] = self.sightings.get(addr, 0) + 1
        if len(self.announced) >= MAX_INCOMPATIBLE:
            self.announced.clear()
        self.announced[addr] = view_id

    def _views(self, coord) -> tuple:
        """The view ``coord`` announced last, and ours."""
        v = self.gms.view
        return self.announced.get(coord), v.view_id if v is not None else None

    def _apart(self, coord) -> bool:
        """We do not merge with ``coord`` (see ``incompatible``)."""
        if coord not in self.incompatible:
            return False
        views = self.incompatible[coord]
        return views is None or views == self._views(coord)

    def installed(self, view: View) -> None:
        self.sightings = {}  # what we heard belonged to the view we had
        if isinstance(view, MergeView):
            self._done(merged=True)

    # -- leader -------------------------------------------------------------------------
    def check(self) -> None:
        """Periodic: start a merge if we lead one (MERGE3's check)."""
        g = self.gms
        seen, self.sightings = self.sightings, {}
        others = sorted(a for a, n in seen.items()
                        if n >= MIN_SIGHTINGS and not self._apart(a))
        if not others or self.busy or not g.is_coord or g.busy or g.state.value != "member" \
                or g.merge_held:
            return
        if any(m in g.suspects for m in g.view.members):
            g._schedule_view()  # exclude the dead first; merge on a later check
            return
        local = g.ctx.local
        if any(a < local for a in others):
            return  # the lowest coordinator leads
        self.counter += 1
        self.merge_id = [local.uid, self.counter]
        self.leading = {"waiting": set(others), "rsps": {}}
        g.stats["merges_started"] += 1
        self._arm()
        mid = self.merge_id
        self._flush_subgroup(lambda state: self._lead(mid, others, state))

    def _lead(self, mid, others: list, state: list) -> None:
        if self.merge_id != mid or self.leading is None:
            return
        self.leading["rsps"][self.gms.ctx.local] = state
        versions = list(common_range(self.gms.view.ranges().values()))
        for c in others:
            self.gms._send(c, [MERGE_REQ, mid, self.gms.config.agreed, versions])

    def _flush_subgroup(self, then) -> None:
        """Stop our subgroup and agree on its cut (virtual synchrony across the merge);
        ``then(state)`` gets [view, cut digest, addresses]."""
        g = self.gms
        members = list(g.view.members)  # every one: no suspects (check, _on_req)

        def done(views, digests, final) -> None:
            self.cut = final
            # a member still in an older view answered without a window for the members
            # our view added: it held their part of the cut only vacuously (see
            # Gms._flushed), so the cut is not stable at the MergeView's install
            self.cut_stable = all(v.view_id == g.view.view_id for v in views)
            then([view_to_wire(g.view), [[a.uid, s] for a, (s, _) in self.cut.items()],
                  g._phys_entries(g.view.members)])
        g.flush.start(members, [], done)

    def _on_rsp(self, sender, merge_id, ok, state) -> None:
        lead = self.leading
        if lead is None or merge_id != self.merge_id or sender not in lead["waiting"]:
            return
        if not ok and state is not None:  # refused for its settings: [[k, theirs, ours]]
            diffs = [[k, ours, theirs] for k, theirs, ours in state]
            self.gms.stats["merges_incompatible"] += 1
            self._incompatible(sender, diffs)
        lead["waiting"].discard(sender)
        if ok:
            lead["rsps"][sender] = state
        if not lead["waiting"]:
            self._install()

    def _install(self) -> None:
        g, lead = self.gms, self.leading
        self.leading = None
        book = g.ctx.book
        rsps, ranges = {}, []  # the subgroups that merge: (view, digest, addresses)
        for coord in sorted(lead["rsps"]):  # ours first: the leader is the lowest
            vwire, dwire, pwire = lead["rsps"][coord]
            view = view_from_wire(vwire, book)
            theirs = list(view.ranges().values())
            diffs = version_differences(common_range(ranges), common_range(theirs))
            if diffs and ranges:  # none in common with the subgroups before it
                g.stats["merges_incompatible"] += 1
                self._incompatible(coord, diffs)
                continue
            rsps[coord] = (view, dwire, pwire)
            ranges += theirs
        if len(rsps) < 2:
            self._done()
            return
        views, digest, phys = [], {}, []
        for view, dwire, pwire in rsps.values():
            views.append(view)
            for uid, s in dwire:
                a = book.get(uid)
                digest[a] = max(digest.get(a, 0), int(s))
            phys.extend(pwire)
        members, versions = [], {}
        for v in views:
            members.extend(m for m in v.members if m not in members)
            versions = {**v.ranges(), **versions}
        g.highest_counter = max([g.highest_counter] + [v.view_id.id for v in views])
        mv = MergeView(ViewId(g.ctx.local, g.next_counter()), tuple(members),
                       versions=tuple(versions[m] for m in members), subgroups=tuple(views))
        msg = [INSTALL_MERGE, self.merge_id, view_to_wire(mv), [view_to_wire(v) for v in views],
               [[a.uid, s] for a, s in digest.items()], phys]
        g.stats["merges_led"] += 1
        for coord in rsps:
            if coord == g.ctx.local:
                self._on_install(coord, msg)
            else:
                g._send(coord, msg)

    # -- participant --------------------------------------------------------------------
    def handle(self, sender, typ: int, h: list) -> None:
        if typ == MERGE_REQ:
            self._on_req(sender, h[1], h[2] if len(h) > 2 else {},
                         h[3] if len(h) > 3 else BASE_RANGE)
        elif typ == MERGE_RSP:
            self._on_rsp(sender, h[1], bool(h[2]), h[3])
        elif typ == INSTALL_MERGE:
            self._on_install(sender, h)

    def _on_req(self, sender, merge_id, agreed, versions) -> None:
        g = self.gms
        diffs = g.differences(agreed)
        if g.view is not None:
            diffs += version_differences(common_range(g.view.ranges().values()),
                                         range_from_wire(versions))
        if diffs:
            g.stats["merges_refused"] += 1
            self._incompatible(sender, diffs)
            g._send(sender, [MERGE_RSP, merge_id, False, diffs])
            return
        if self.busy or g.busy or g.state.value != "member" or g.view is None \
                or not g.is_coord or g.merge_held:
            g._send(sender, [MERGE_RSP, merge_id, False, None])
            return
        if any(m in g.suspects for m in g.view.members):
            # as when leading: exclude the suspected first. Our subgroup's view names every
            # member, and a member that was not flushed (a suspect) but is alive would keep
            # sending in the old view after the cut, its last messages delivered there by
            # us and in the merge view by the other subgroups
            g._send(sender, [MERGE_RSP, merge_id, False, None])
            g._schedule_view()
            return
        self.merge_id = merge_id
        self._arm()
        self._flush_subgroup(lambda state: g._send(sender, [MERGE_RSP, merge_id, True, state]))

    def _on_install(self, sender, h: list) -> None:
        g = self.gms
        if h[1] != self.merge_id:
            return
        _, _, vwire, subgroups, dwire, phys = h
        g._learn_phys(phys)
        g._multicast_merge_view(vwire, subgroups, dwire, self.cut, self.cut_stable)

    def _incompatible(self, coord, diffs: list) -> None:
        """``coord`` leads a group whose agreed settings differ from ours, or whose wire
        versions have none in common with ours (``diffs``: [[setting, ours, theirs], ...]):
        never merge with it, or, for wire versions alone, not until either view changes."""
        views = None if any(d[0] != VERSIONS for d in diffs) else self._views(coord)
        if coord in self.incompatible and self.incompatible[coord] in (None, views):
            return
        if len(self.incompatible) >= MAX_INCOMPATIBLE:
            self.incompatible.clear()
        self.incompatible[coord] = views
        self.gms.ctx.log(f"not merging with {coord}: " + "; ".join(
            f"{k} is {ours!r} here, {theirs!r} there" for k, ours, theirs in diffs))

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

    def abandon(self) -> None:
        """Our part of the merge failed (our subgroup could not be flushed)."""
        self.gms.stats["merges_abandoned"] += 1
        self._done()

    def abort(self) -> None:
        self.merge_id, self.leading, self.cut = None, None, {}
        self.sightings = {}
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _done(self, merged: bool = False) -> None:
        self.abort()
        g = self.gms
        if not merged:  # a merge that did not happen: our subgroup sends again in its view
            g.flush.resume()
        if g.is_coord and (g.joins or g.leaves or g.suspects):
            g._schedule_view()
