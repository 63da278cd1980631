"""GMS: group membership with agreed views (the JGroups design notes).

The oldest member not declared dead (``members[0]`` normally) is coordinator. Joiners
discover it and send JOIN_REQ; leavers send LEAVE_REQ at once (the flush of the view change
that removes them carries their last multicasts to every member; when the last members leave
together there is no view to send, and the coordinator answers LEAVE_RSP); SWIM's verdicts
(MemberDead) mark members to exclude. The coordinator keeps a pending membership, so
requests that arrive while a view is in flight build on it and none is lost; it bundles
requests for ``view_bundling_s`` (longer in a large group: ``GmsConfig``), multicasts the
VIEW reliably (NAKACK: views install in FIFO order with its other messages) and waits
for VIEW_ACKs before the next change. A joiner gets JOIN_RSP with the view and a digest
taken right after the VIEW was sent, whose coordinator entry is the VIEW's own seqno: exact,
no +1 kludge (the digest and the members' addresses go in view order, so each UUID travels
once: 38 KB for 1,000 members, not 75).
A JOIN_REQ carries the joiner's agreed settings (``GmsConfig.agreed``); when they differ from
the coordinator's it answers JOIN_DENIED with the differences and the joiner leaves
(``JoinRejected``). It also carries the joiner's wire versions (``transport.wire_versions``):
a joiner whose range has none in common with the group's (the versions every member of the
pending membership speaks) is refused the same way, naming both ranges. Each view carries
every member's range, and every member adopts the view's version (``View.wire_version``)
when it installs the view, after its flush (MySQL Group Replication's version handshake).

When members crashed (or the coordinator did, and the next member takes over), the
coordinator first collects every survivor's view and digest: the new view builds on the
latest view any survivor installed (finishing a change in flight), and carries, per crashed
member, the highest seqno any survivor delivered and who holds it. Every member catches up
to that cut before installing, so nothing a survivor delivered is lost to the others.
A member excluded while alive forms a singleton view; MERGE brings it back.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from operator import methodcaller
from typing import Any, Optional

from .address import Address
from .events import (AddPhysical, Catchup, Connect, FindMembers, GetDigest, GetPhysical,
                     HoldMerges, Leave, MemberDead, MembershipStatus, MergeDigest, MergeInfo,
                     SetDigest, Stability, Unsuspect, ViewInstalled, WireVersions)
from .gms_merge import Merger
from .layer import Layer, MALFORMED
from .message import CONTROL, INTERNAL, NO_RELIABILITY, Message
from .errors import RaygroupsError
from .view import (BASE_RANGE, Left, MergeView, View, ViewChange, ViewId, common_range,
                   cut_from_wire, digest_from_wire, range_from_wire, version_differences,
                   view_from_wire, view_to_wire)


STALE_INFOS = 4  # INFOs of a newer view from one member of ours before we count as dropped


class SendBlocked(RaygroupsError):
    """Too many sends were made while a flush stopped sending."""


def cut(members, digests: dict, leaving=frozenset()) -> dict:
    """Per member: the highest seqno any reporter holds, and a reporter that holds it -
    the member itself if it can, else one that is not about to leave."""
    final = {}
    if not digests:
        return final
    reports = list(digests.values())
    for x in members:
        # (the reports read in C: at the coordinator this is O(N) per member, N^2 a view)
        best = max(map(methodcaller("get", x, 0), reports))
        own = digests.get(x)
        if own is not None and own.get(x, 0) == best:
            final[x] = (best, x)  # (the common case: the member holds its own latest)
            continue
        holders = [w for w, d in digests.items() if d.get(x, 0) == best]
        final[x] = (best, next((w for w in holders if w not in leaving), holders[0]))
    return final

from .gms_merge import INSTALL_MERGE, MERGE_REQ, MERGE_RSP  # noqa: E402  (types 8-10)

from .flush import (FLUSH_CUT, FLUSH_DONE, FLUSH_OK, FLUSH_RESUME,  # noqa: E402  (types 11-15)
                    START_FLUSH, Flush)

JOIN_REQ, JOIN_RSP, LEAVE_REQ, VIEW, VIEW_ACK, NOT_MEMBER, LEAVE_RSP, JOIN_DENIED = range(8)


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
    """Gather join/leave/exclusion requests this long into one view change. A request that
    finds the coordinator idle (no view change within the last ``view_bundling_s``) is
    handled at once; requests that arrive while a change is in flight, or right after one,
    are bundled into the next (JGroups' ViewHandler)."""
    view_bundling_per_member_s: float = 0.001
    """During a burst of requests the gathering grows with the view: the next change waits
    ``max(view_bundling_s, view_bundling_per_member_s x members)``, at most
    ``view_bundling_max_s`` (0.01 s at 10 members, 0.1 s at 100, 1 s from 1,000 on). Each
    change costs every member O(N) work (the VIEW, the flush's cut, the primary component's
    states) and stops multicast for its flush. A fixed gathering turns a burst of N joins
    into O(N) changes, O(N^3) work in all; one in proportion to the view lets the membership
    grow by a constant factor per change (1.2x at 200 joins a second): O(log N) changes,
    O(N^2) in all. A request that finds the coordinator idle is still handled at once.
    0 keeps the gathering at ``view_bundling_s``."""
    view_bundling_max_s: float = 1.0
    """The longest gathering ``view_bundling_per_member_s`` makes."""
    view_ack_timeout_s: float = 2.0
    """Wait at most this long for VIEW_ACKs (and for survivors' digests, and for a
    catch-up) before going on."""
    leave_timeout_s: float = 5.0
    """A leaver gives up waiting for the view that excludes it after this long."""
    merge_check_s: float = 1.0
    """How often a coordinator acts on the other views it heard of (MERGE3 check)."""
    merge_timeout_s: float = 3.0
    """A merge whose leader went silent is cancelled after this long."""
    max_held: int = 10_000
    """Sends accepted while a flush blocks sending: the application's, and the reliable
    multicasts of the layers above GMS (they go out in the new view, or in the same view if
    the flush ends without one); beyond this SendBlocked is raised to the application, and
    a layer's multicast is dropped and counted (``held_internal_dropped``). Channels wait
    instead of sending."""
    agreed: dict = field(default_factory=dict)
    """Settings every member must share (MySQL Group Replication's compatibility check):
    a joiner sends its own with JOIN_REQ and the coordinator refuses it (JOIN_DENIED, then
    ``JoinRejected`` from ``connect()``) when they differ. An application adds its own here
    (``gms__agreed={"app.schema": 3}``: str keys, str/int/float/bool values);
    ``StackConfig.build`` adds the layer settings marked agreed (``primary.relay_above``)."""


class Gms(Layer):
    name = "gms"
    header_id = 5

    def __init__(self, config: GmsConfig):
        super().__init__(config)
        self.state = State.IDLE
        self.view: Optional[View] = None
        self.empty_rounds = 0
        self.join_timer = None
        self.asked: Optional[Address] = None  # the coordinator our last JOIN_REQ went to
        self.suspects: set = set()
        # coordinator side
        self.tmp: list[Address] = []          # pending membership (the JGroups design notes)
        self.joins: dict[Address, Any] = {}   # joiner -> its wire versions
        self.ranges: dict[Address, tuple] = {}  # wire versions of the members we know of
        self.leaves: list[Address] = []
        self.scheduled = False
        self.settled_at = float("-inf")  # when the last view change finished
        self.acks: Optional[set] = None
        self.ack_view = 0
        self.ack_timer = None
        self.join_rsps: dict[Address, list] = {}
        self.held: list = []                  # application sends made during a flush
        # member side
        self.deferred: list = []              # views waiting behind a catch-up
        self.catching_up = False
        self.highest_counter = 0              # no view id is ever created twice
        self.stale_infos: dict = {}  # member of our view -> INFOs of a newer view
        self.merge_held = False  # hold_merges: neither lead nor take part in a merge
        self.leave_reason = "left"
        self.merger = Merger(self)
        self.flush = Flush(self)

    def start(self) -> None:
        self.ctx.every(self.config.merge_check_s, self.merger.check)

    @property
    def coordinator(self) -> Optional[Address]:
        """The first member of the view that is not declared dead."""
        if self.view is None:
            return None
        for m in self.view.members:
            if m not in self.suspects:
                return m
        return None

    @property
    def is_coord(self) -> bool:
        return self.coordinator == self.ctx.local

    @property
    def own_range(self) -> tuple:
        """This member's wire versions (the transport's ``wire_versions``)."""
        return tuple(self.below.down_event(WireVersions()) or BASE_RANGE)

    def group_range(self) -> tuple:
        """The wire versions every member of the pending membership (and every pending
        joiner) speaks: ``(lowest, highest)``, none when lowest > highest."""
        return common_range([*(self.ranges.get(m, BASE_RANGE) for m in self.tmp),
                             *self.joins.values()])

    def _singleton(self, counter: int) -> View:
        local = self.ctx.local
        self.ranges[local] = self.own_range
        return View(ViewId(local, counter), (local,), versions=(self.ranges[local],))

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
            self.stats["join_requests_sent"] += 1
            phys = self.below.down_event(GetPhysical())
            self.asked = coords[0]
            self.below.down(Message(coords[0], b"", CONTROL,
                                    {5: [JOIN_REQ, local.name, list(phys) if phys else None,
                                         self.config.agreed, list(self.own_range)]}))
            self.join_timer = self.ctx.schedule(self.config.join_timeout_s, self._join_timeout)
            return
        joining = [p.addr for p in found if not p.joined]
        if not found:
            self.empty_rounds += 1
        if (not found and self.empty_rounds >= self.config.found_after_rounds) or \
                (joining and all(local < a for a in joining)):
            self.tmp = [local]
            self._install(self._singleton(1))
            return
        if found:
            self.ctx.schedule(self.ctx.rng.uniform(0, self.config.retry_jitter_s), self._discover)
        else:
            self._discover()

    def differences(self, agreed: Any) -> list:
        """``[[setting, ours, theirs], ...]`` where another member's agreed settings differ
        from ours (raises TypeError when they are not a dict)."""
        if type(agreed) is not dict:
            raise TypeError("agreed settings")
        ours = self.config.agreed
        return [[k, ours.get(k), agreed.get(k)] for k in sorted(ours.keys() | agreed.keys())
                if ours.get(k) != agreed.get(k)]

    def _on_join_denied(self, sender: Address, diffs: list) -> None:
        """The coordinator we asked refuses us: our agreed settings differ from the group's,
        or our wire versions have none in common with its. Final (settings do not change
        while we wait): leave with the reason."""
        if self.state is not State.JOINING or sender != self.asked:
            return
        reason = "; ".join(f"{k} is {theirs!r} in the group, {ours!r} here"
                           for k, theirs, ours in diffs)
        if self.join_timer is not None:
            self.join_timer.cancel()
            self.join_timer = None
        self.stats["join_denied"] += 1
        self._finish_leave(f"join denied by {sender}: {reason}")

    def _join_timeout(self) -> None:
        self.join_timer = None
        if self.state is State.JOINING:
            self.stats["join_timeouts"] += 1
            self._discover()

    def _on_join_rsp(self, h: list) -> None:
        if self.state is not State.JOINING:
            return
        view = view_from_wire(h[1], self.ctx.book)
        seqnos, phys = h[2], h[3]
        if type(seqnos) is not list or type(phys) is not list \
                or not len(seqnos) == len(phys) == len(view.members):
            raise ValueError("join response lists not in view order")
        digest = {a: int(s) for a, s in zip(view.members, seqnos) if s is not None}
        if self.ctx.local not in view:
            raise ValueError("join response without the joiner")
        for a, p in zip(view.members, phys):
            if p is not None:
                self.below.down_event(AddPhysical(a, (str(p[0]), int(p[1]))))
        if self.join_timer is not None:
            self.join_timer.cancel()
            self.join_timer = None
        self._install(view, digest)

    def _learn_phys(self, entries: list) -> None:
        for uid, host, port in entries:
            self.below.down_event(AddPhysical(self.ctx.book.get(uid), (str(host), int(port))))

    def _phys_in_order(self, addrs) -> list:
        """Each member's physical address, ``[host, port]`` or None when unknown."""
        local = self.ctx.local
        return [None if p is None else [p[0], p[1]]
                for p in (self.below.down_event(GetPhysical(None if a == local else a))
                          for a in addrs)]

    def _phys_entries(self, addrs) -> list:
        """``[[uuid, host, port], ...]`` of the members whose physical address is known."""
        return [[a.uid, *p] for a, p in zip(addrs, self._phys_in_order(addrs)) if p is not None]

    # -- installing views ---------------------------------------------------------------
    def _on_view(self, view: View, final: Optional[dict], merged: Optional[dict] = None,
                 stable: bool = True) -> None:
        """A VIEW was delivered: install it, after catching up with crashed members."""
        if self.catching_up:
            self.deferred.append((view, final, merged, stable))
            return
        if final:
            self.catching_up = True
            # what the install needs, dropped once done: the give-up timer outlives it, and
            # a view and cut of N members per pending timer add up in a fast series of views
            todo = [view, final, merged]

            def caught_up(reached: bool = True) -> None:
                if not todo:
                    return
                view, final, merged = todo
                todo.clear()
                self.catching_up = False
                self._install(view, merged=merged)
                if reached and stable:
                    # the VIEW went out only once every member of the flush held the cut,
                    # and (``stable``) every member of the view took part in that flush or
                    # joins at the cut: all of it is delivered everywhere, so NAKACK may let
                    # it go now rather than at the next STABLE round (which a fast series of
                    # views resets). A member of the view that was not flushed (the latest
                    # view a survivor reported was newer than the flushed one) may still
                    # miss some of it and fetch it after the install: STABLE decides then
                    self.below.down_event(Stability({a: s for a, (s, _) in final.items()}))
                while self.deferred and not self.catching_up:
                    self._on_view(*self.deferred.pop(0))

            def give_up() -> None:
                if todo:
                    self.stats["catchup_incomplete"] += 1
                    caught_up(False)
            self.ctx.schedule(self.config.view_ack_timeout_s, give_up)
            self.below.down_event(Catchup(final, caught_up))
        else:
            self._install(view, merged=merged)

    def _install(self, view: View, digest: Optional[dict] = None,
                 merged: Optional[dict] = None) -> None:
        """``digest``: a joiner's starting point; ``merged``: the merged digest of a
        MergeView (windows for the other subgroups' members)."""
        prev = self.view
        if prev is not None and view.view_id <= prev.view_id:
            return
        if isinstance(view, MergeView) and prev is not None \
                and all(sg.view_id != prev.view_id for sg in view.subgroups):
            # a coordinator multicasts its MergeView to its own subgroup, and NAKACK delivers
            # it to whoever keeps a window for that coordinator: a member of another view
            # that still lists it (overlapping views) was not flushed for this merge
            self.stats["merge_views_ignored"] += 1
            return
        local = self.ctx.local
        if digest is not None:
            self.below.down_event(SetDigest(digest))
        if merged is not None:
            mine = next((sg.members for sg in getattr(view, "subgroups", ())
                         if local in sg.members), (local,))
            self.below.down_event(MergeDigest(merged, [a for a in merged if a not in mine]))
        self.view = view
        self.ranges.update(view.ranges())
        if len(self.ranges) > 4 * len(view.members) + 64:  # bound: members long gone
            keep = {*view.members, *self.tmp}
            self.ranges = {a: r for a, r in self.ranges.items() if a in keep}
        self.highest_counter = max(self.highest_counter, view.view_id.id)
        self.stale_infos = {}
        self.suspects = set() if isinstance(view, MergeView) else self.suspects & view.member_set
        if view.view_id.coord != local or self.tmp == [] or isinstance(view, MergeView):
            self.tmp = list(view.members)
        if local in view and self.state is State.JOINING:
            self.state = State.MEMBER
        self.stats["views_installed"] += 1
        self.below.down_event(ViewInstalled(view, prev))
        self.above.up_event(ViewChange(view, prev))
        # only now: sends held by a flush must carry the new view's counter
        self.merger.installed(view)
        self.flush.installed(view)
        if view.view_id.coord != local:
            self._send(view.view_id.coord, [VIEW_ACK, view.view_id.coord.uid, view.view_id.id])
        else:
            self._on_ack(local, view.view_id.id)
        if local not in view:
            if self.state is not State.LEAVING:
                self._become_singleton("excluded")
            elif view.view_id.coord != local:  # a leaving creator waits for the acks first
                self._finish_leave(self.leave_reason)
        elif self.state is State.LEAVING:
            self._request_leave()
        elif self.is_coord and (self.joins or self.leaves or self.suspects):
            self._schedule_view()

    def _become_singleton(self, why: str) -> None:
        """Excluded while alive: carry on alone; MERGE will bring us back."""
        self.stats["excluded"] += 1
        self.ctx.log(f"{why}: forming a singleton view")
        local = self.ctx.local
        self.suspects = set()
        self.tmp = [local]
        self.joins, self.leaves = {}, []
        if self.ack_timer is not None:
            self.ack_timer.cancel()
        self.acks = self.ack_timer = None
        self.merger.abort()
        self.flush.abort()
        self._install(self._singleton(self.next_counter()))

    def next_counter(self) -> int:
        self.highest_counter += 1
        return self.highest_counter

    def _send(self, dest: Address, hdr: list) -> None:
        self.below.down(Message(dest, b"", INTERNAL, {5: hdr}))

    @staticmethod
    def _view_msg(hdr: list) -> Message:
        return Message(None, b"", INTERNAL, {5: hdr})

    def _multicast_merge_view(self, vwire: list, subgroups: list, dwire: list,
                              final: dict, stable: bool) -> None:
        """To our (flushed) subgroup, in FIFO order with our other messages; ``stable``:
        the subgroup's cut may be purged at install (see _on_view)."""
        fwire = [[a.uid, s, h.uid] for a, (s, h) in final.items()]
        self.below.down(self._view_msg([VIEW, vwire, [], fwire, [subgroups, dwire], stable]))

    # -- coordinator ----------------------------------------------------------------------
    def _on_join_req(self, sender: Address, name: str, phys, agreed: dict, versions) -> None:
        diffs = self.differences(agreed)  # (malformed settings raise here, on any member)
        theirs = range_from_wire(versions)
        self.ctx.book.get(sender.uid, str(name))
        if phys is not None:
            self.below.down_event(AddPhysical(sender, (str(phys[0]), int(phys[1]))))
        if not self.is_coord or self.state is not State.MEMBER:
            self.stats["join_requests_ignored"] += 1
            return
        if sender not in self.tmp and sender not in self.joins:
            diffs += version_differences(self.group_range(), theirs)
        if diffs:
            self.stats["joins_denied"] += 1
            self._send(sender, [JOIN_DENIED, diffs])
            return
        cached = self.join_rsps.get(sender)
        if cached is not None:
            self._send(sender, cached)  # a retry: the view it joined with, same exact digest
        elif sender not in self.tmp:
            self.joins[sender] = theirs
            self._schedule_view()

    def _on_leave_req(self, sender: Address) -> None:
        """Kept even when not (yet) coordinator: the request may overtake the view that
        makes us coordinator."""
        if self.state is not State.LEFT and sender in self.tmp and sender not in self.leaves:
            self.leaves.append(sender)
            if self.is_coord:
                self._schedule_view()

    def hold_merges(self, held: bool) -> None:
        """While held, this member neither leads a merge nor takes part in one (it refuses
        MERGE_REQs) and announces no INFO: a member that must not come back yet stays out
        (the member actor's fence, asking Ray about its node after it was excluded)."""
        self.merge_held = held
        self.below.down_event(HoldMerges(held))

    @property
    def busy(self) -> bool:
        """A view change, flush or merge is in flight."""
        return self.acks is not None or self.flush.busy or self.merger.busy

    def _schedule_view(self) -> None:
        if not self.scheduled and not self.busy:
            self.scheduled = True
            wait = self._bundling()
            idle = self.ctx.now() - self.settled_at >= wait
            self.ctx.schedule(0.0 if idle else wait, self._change_view)

    def _bundling(self) -> float:
        """How long requests are gathered into the next view change (``GmsConfig``)."""
        c = self.config
        grown = min(c.view_bundling_max_s, c.view_bundling_per_member_s * len(self.tmp))
        return max(c.view_bundling_s, grown)

    def _change_view(self) -> None:
        self.scheduled = False
        if not self.is_coord or self.busy or self.state is State.LEFT:
            return
        leaves = set(self.leaves)
        joins = [j for j in self.joins if j not in self.tmp]
        crashed = [m for m in self.tmp if m in self.suspects]
        if not joins and not crashed and not leaves & set(self.tmp) \
                and self.view.view_id.coord not in self.suspects:
            return
        # leavers take part: they move from V to V' too (into no view)
        survivors = [m for m in self.view.members if m not in self.suspects]
        if self.ctx.local not in survivors:
            survivors.append(self.ctx.local)
        # freeze only the crashed: leavers take part in the flush (the cut carries their
        # last multicasts to everyone), and a leaving coordinator still has to send the VIEW
        self.flush.start(survivors, crashed, self._flushed, extend=True)

    def _emit_view(self, base: list, counter: int, final: Optional[dict],
                   flushed: frozenset = frozenset()) -> None:
        local = self.ctx.local
        joins = [j for j in self.joins if j not in base]
        leaves = set(self.leaves)
        ranges = {**self.ranges, **self.joins, local: self.own_range}
        self.joins, self.leaves = {}, []
        members = [m for m in base if m not in leaves and m not in self.suspects] + joins
        if members == list(self.view.members) and not final:
            self.flush.resume()  # nothing changed after all: the flushed members send again
            return
        if not members:  # the last members leave, we among them: no view to send
            self._dismiss([g for g in leaves if g != local])
            return
        self.highest_counter = max(self.highest_counter, counter)
        view = View(ViewId(local, self.next_counter()), tuple(members),
                    versions=tuple(ranges.get(m, BASE_RANGE) for m in members))
        self.ranges.update(view.ranges())
        self.tmp = members
        fwire = [[a.uid, s, h.uid] for a, (s, h) in final.items()] if final else None
        self.stats["views_sent"] += 1
        # the cut is stable at install only when every member holds it by then: each took
        # part in the flush (or joins at the cut); see _on_view
        stable = all(m in flushed or m in joins for m in members)
        self.below.down(self._view_msg([VIEW, view_to_wire(view), self._phys_entries(joins), fwire,
                                        None, stable]))
        digest = self.below.down_event(GetDigest(sent=True))
        if final:  # joiners start at the cut (own entry: the VIEW just sent)
            digest.update({a: s for a, (s, _) in final.items() if a != local})
        for gone in leaves:  # a leaver may miss the multicast once stability forgets it
            if gone != local:
                self._send(gone, [VIEW, view_to_wire(view), [], fwire])
        if joins:
            # digest and addresses in view order, each UUID once (in the view)
            dwire = [digest.get(a) for a in members]
            phys_all = self._phys_in_order(members)
            for j in joins:
                rsp = [JOIN_RSP, view_to_wire(view), dwire, phys_all]
                self.join_rsps[j] = rsp
                self._send(j, rsp)
        if len(self.join_rsps) > 4 * len(members) + 64:
            self.join_rsps = {a: r for a, r in self.join_rsps.items() if a in members}
        old = self.view.members
        self.acks = set(members) | {m for m in old if m in leaves}
        self.ack_view = view.view_id.id
        self.ack_timer = self.ctx.schedule(self.config.view_ack_timeout_s, self._ack_timeout)

    def _dismiss(self, leavers: list) -> None:
        """Tell the other last leavers they may go (LEAVE_RSP) and leave once they acked it,
        or after ``view_ack_timeout_s``: while we wait, UNICAST retransmits what was lost."""
        self.tmp = []
        if not leavers:
            self._finish_leave(self.leave_reason)
            return
        counter = self.next_counter()
        for gone in leavers:
            self._send(gone, [LEAVE_RSP, counter])
        self.acks = set(leavers)
        self.ack_view = counter
        self.ack_timer = self.ctx.schedule(self.config.view_ack_timeout_s, self._ack_timeout)

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
        self.settled_at = self.ctx.now()
        if self.ack_timer is not None:
            self.ack_timer.cancel()
            self.ack_timer = None
        if self.state is State.LEAVING and self.ctx.local not in self.tmp:
            self._finish_leave(self.leave_reason)
        elif self.joins or self.leaves or any(m in self.suspects for m in self.tmp):
            self._schedule_view()

    # -- flush ----------------------------------------------------------------------------
    def _flushed(self, views: list, digests: dict, final: dict) -> None:
        """Every survivor stopped and reported: build the view on the latest view any of
        them installed (finishing a change in flight) and the cut of every sender."""
        if not self.is_coord or self.state is State.LEFT:
            return
        latest = max(views, key=lambda v: v.view_id)
        self.ranges.update(latest.ranges())
        counter = max(v.view_id.id for v in views)
        base = list(latest.members)
        if self.ctx.local not in base:  # someone excluded us meanwhile; we still lead ours
            base.insert(0, self.ctx.local)
        # the cut is stable at install only if every member of the view was flushed and
        # every participant flushed from the view it is built on: one still in an older view
        # had no window for the newer view's members, so it held their part of the cut only
        # vacuously and may install that view (and need the part) later
        same = all(v.view_id == latest.view_id for v in views)
        self._emit_view(base, counter, final, set(digests) if same else frozenset())

    # -- leaving --------------------------------------------------------------------------
    def _leave(self, reason: str) -> None:
        if self.state is not State.LEAVING and self.state is not State.LEFT:
            self.leave_reason = reason  # what the Left at the end says
        if self.state is State.JOINING or self.state is State.IDLE:
            self._finish_leave(self.leave_reason)
            return
        if self.state is not State.MEMBER:
            return
        self.state = State.LEAVING
        self.ctx.schedule(self.config.leave_timeout_s, self._leave_timed_out)
        self._request_leave()

    def _leave_timed_out(self) -> None:
        """No view without this member came in time: it leaves anyway, saying why it was
        leaving (a failed recovery's reason stays the reason) and that the view never came."""
        why = self.leave_reason
        self._finish_leave("timeout" if why == "left" else
                           f"{why} (no view without it within {self.config.leave_timeout_s:g} s)")

    def _request_leave(self) -> None:
        if self.state is not State.LEAVING:
            return
        if not self.is_coord:
            self._send(self.coordinator, [LEAVE_REQ])
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
        for m in batch:
            if 5 in m.headers:
                break
        else:  # nothing for GMS (the common case under load): pass the batch as is
            if batch:
                self.above.up(batch)
            return
        # NAKACK passed these multicasts up in this view (it holds a newer view's): they go
        # before any VIEW of the batch is handled, wherever they stand in it (handling one
        # can deliver a sender's later messages at once, through the flush's catch-up, which
        # would overtake them and leave them to the next view)
        mcasts = [m for m in batch if m.dest is None and 5 not in m.headers]
        if mcasts:
            self.above.up(mcasts)
            batch = [m for m in batch if m.dest is not None or 5 in m.headers]
        out = []
        for m in batch:
            h = m.headers.get(5)
            if h is None:
                out.append(m)
                continue
            if out:  # what came before a VIEW is delivered before it
                self.above.up(out)
                out = []
            try:
                self._handle(m.sender, h)
            except MALFORMED:
                self.malformed()
        if out:
            self.above.up(out)

    def _handle(self, sender: Address, h: list) -> None:
        typ = h[0]
        book = self.ctx.book
        if typ == VIEW:
            view = view_from_wire(h[1], book)
            self._learn_phys(h[2])
            if self.state is State.MEMBER or self.state is State.LEAVING:
                final = cut_from_wire(h[3], book) if h[3] else None
                merged = None
                if len(h) > 4 and h[4] is not None:
                    subgroups, dwire = h[4]
                    view = MergeView(view.view_id, view.members, versions=view.versions,
                                     subgroups=tuple(view_from_wire(v, book) for v in subgroups))
                    merged = digest_from_wire(dwire, book)
                self._on_view(view, final, merged, bool(h[5]) if len(h) > 5 else True)
        elif typ == VIEW_ACK:
            if sender in (self.acks or ()):
                self._on_ack(sender, int(h[2]))
        elif typ == JOIN_REQ:
            self._on_join_req(sender, h[1], h[2], h[3] if len(h) > 3 else {},
                              h[4] if len(h) > 4 else BASE_RANGE)
        elif typ == JOIN_DENIED:
            self._on_join_denied(sender, h[1])
        elif typ == JOIN_RSP:
            self._on_join_rsp(h)
        elif typ == LEAVE_REQ:
            self._on_leave_req(sender)
        elif typ == LEAVE_RSP:
            # our coordinator leaves with the last members, us among them
            if self.state is State.LEAVING and sender == self.coordinator:
                self._send(sender, [VIEW_ACK, sender.uid, int(h[1])])
                self._finish_leave(self.leave_reason)
        elif typ == START_FLUSH:
            self.flush.on_start(sender, h[1], h[2], h[3])
        elif typ == FLUSH_OK:
            self.flush.on_ok(sender, h[1], h[2], h[3])
        elif typ == FLUSH_CUT:
            self.flush.on_cut(sender, h[1], h[2])
        elif typ == FLUSH_DONE:
            self.flush.on_done(sender, h[1])
        elif typ == FLUSH_RESUME:
            self.flush.on_resume(sender, h[1])
        elif typ == NOT_MEMBER:
            # [NOT_MEMBER, their view, the view of ours they heard of]: only about the view
            # we are in now (an INFO of ours that waited in a socket while its receiver was
            # stopped must not exclude us from the view we have since moved to)
            v = self.view
            theirs = ViewId(book.get(h[1]), int(h[2]))
            about = ViewId(book.get(h[3]), int(h[4]))
            if self.state is State.MEMBER and v is not None and self.ctx.local in v \
                    and v.view_id < theirs and v.view_id == about:
                self._become_singleton("told we are not a member")
        elif typ in (MERGE_REQ, MERGE_RSP, INSTALL_MERGE):
            self.merger.handle(sender, typ, h)
        else:
            self.malformed()

    def up_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is MemberDead:
            v = self.view
            if v is not None and ev.addr in v and ev.addr != self.ctx.local \
                    and self.state in (State.MEMBER, State.LEAVING):
                self.suspects.add(ev.addr)
                self.stats["dead_verdicts"] += 1
                self.flush.member_dead(ev.addr)  # a flush waiting for it starts over
                if self.is_coord:
                    self._schedule_view()
                elif self.state is State.LEAVING:
                    self._request_leave()
        elif t is Unsuspect:
            if not self.flush.busy:
                self.suspects.discard(ev.addr)
        elif t is MergeInfo:
            self._on_info(ev)
            return None
        return self.above.up_event(ev)

    def _on_info(self, ev: MergeInfo) -> None:
        v = self.view
        if self.state is not State.MEMBER or v is None:
            return
        theirs = ViewId(ev.coord, ev.counter)
        if theirs == v.view_id:
            return
        if not self.is_coord:
            # a member of our view (our coordinator, or the member next in line when the
            # coordinator died) keeps announcing a newer view we never got: we were dropped;
            # or the member next in line after our view's dead founder keeps announcing, as
            # its coordinator, another view, newer or not (a view of the same counter is not
            # older by its order: a merge view installed without it, while it formed its
            # own): nobody coordinates ours
            if ev.sender in v and (v.view_id < theirs or
                                   ev.is_coord and ev.sender == self.coordinator and
                                   ev.sender != v.view_id.coord):
                n = self.stale_infos[ev.sender] = self.stale_infos.get(ev.sender, 0) + 1
                if n >= STALE_INFOS:
                    self._become_singleton(f"{ev.sender} moved on to {theirs} without us")
            return
        if ev.sender == self.ctx.local:
            return
        if ev.is_coord:
            # another coordinator (a partition): only a merge reunites us. (A plain member
            # of our view in another view has not installed ours yet, and NAKACK brings it,
            # or it is stuck in another coordinator's view: that coordinator merges it, or
            # it forms a singleton once its coordinator keeps announcing a newer view.)
            self.merger.candidate(ev.sender, theirs)
        elif ev.sender not in v and ev.coord in v and theirs < v.view_id:
            # it still thinks it belongs to our view: tell it it was excluded
            self._send(ev.sender, [NOT_MEMBER, v.view_id.coord.uid, v.view_id.id,
                                   ev.coord.uid, ev.counter])

    def down(self, msg: Message) -> None:
        if self.flush.blocked and (msg.dest is None and not msg.flags & NO_RELIABILITY
                                   or not msg.flags & INTERNAL):
            # the layers above send their own multicasts (PRIMARY's STATES, STATUS, LEASE)
            # whenever their work ends, a store call for instance: one sent after our
            # FLUSH_OK is beyond the cut, delivered in the old view by some and in the new
            # one by others, or purged as stable before a member that still needs it got it
            # (seed 15710036: a LEASE a merge's flush did not stop left a gap for good)
            if len(self.held) >= self.config.max_held:
                if msg.flags & INTERNAL:  # a few per view: never this many
                    self.stats["held_internal_dropped"] += 1
                    return
                raise SendBlocked(f"{len(self.held)} sends wait for a flush to end")
            self.held.append(msg)  # goes out in the new view
            return
        self.below.down(msg)

    def _release_held(self) -> None:
        held, self.held = self.held, []
        for m in held:
            self.below.down(m)

    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is Connect:
            self._connect()
            return None
        if t is Leave:
            self._leave(ev.reason)
            self.below.down_event(ev)  # layers below learn it too (store discovery: own file)
            return None
        if t is MemberDead:  # an external failure signal (e.g. Ray reported the actor dead)
            if not self.below.down_event(ev):  # SWIM spreads it and reports the verdict up
                self.up_event(ev)
            return None
        return self.below.down_event(ev)
