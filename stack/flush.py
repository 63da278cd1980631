"""FLUSH: virtual synchrony at every view change (GMS's helper, like JGroups' FLUSH).

Before installing a new view the coordinator asks every surviving member of the current
view to stop sending (START_FLUSH). Each member blocks its application's sends (they wait,
they are not failed), freezes delivery from the members being removed (so a late message of
a crashed member cannot be delivered here but not elsewhere) and answers FLUSH_OK with its
view and digest (its own entry: what it sent). The coordinator takes the cut: per sender,
the highest seqno any survivor holds, and who holds it, and sends it (FLUSH_CUT); every
member fetches what it misses up to the cut and answers FLUSH_DONE. (A START_FLUSH that
overtook the VIEW of the view it flushes, from the previous coordinator or a merge's leader,
is kept and answered once that view is installed: the digest and the freeze are of the view
flushed. A member it comes from a known coordinator stops sending at once.) (FLUSH_OK names the
member's view only when it is not the one being flushed: the coordinator has that one.) Only then is the VIEW
sent (carrying the cut again for anyone who missed a step): members that move together
from V to V' delivered the same messages in V, and stability in V' cannot purge a message a
member of V still needed. A member that does not answer is treated as crashed and the flush
restarts with the smaller membership. A survivor that answers from a newer view than the
coordinator's (a view change in flight, whose VIEW has not reached the coordinator: GMS
builds on it) may name members this round did not stop; the round starts over with them
(``flushes_extended``), since every member of the new view must have stopped sending.

Stopped means every reliable multicast from above GMS: the application's and those of the
stack's own layers (PRIMARY's, sent whenever their work ends) wait in GMS. Sending resumes
at the install of a newer view, or when the coordinator ends the flush without one
(FLUSH_RESUME: nothing changed after all, or a merge that did not happen, or a round it
dropped unfinished, ended at its next view), and never otherwise: a member that sent again
in V after the cut was taken would deliver its later messages in V at some members and in
V' at others. (A dropped round never takes a cut that a view is built on.) A member whose
flush coordinator went silent for ``3 * view_ack_timeout_s`` takes a flush from another
coordinator (the next in line takes over when the coordinator died) but stays stopped;
after ``10 *`` it leaves the view as a singleton (MERGE brings it back).
"""
from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Callable, Optional

from .events import Catchup, Freeze, GetDigest, Thaw, Writable
from .view import ViewId, cut_from_wire, digest_from_wire, view_from_wire, view_to_wire

if TYPE_CHECKING:
    from .gms import Gms

START_FLUSH, FLUSH_OK, FLUSH_CUT, FLUSH_DONE, FLUSH_RESUME = 11, 12, 13, 14, 15
MAX_DROPPED = 16  # unfinished rounds remembered until our next view (Flush._drop)
_uid = attrgetter("uid")


class Flush:
    def __init__(self, gms: "Gms"):
        self.gms = gms
        self.round: Optional[dict] = None  # coordinator: the flush being collected
        self.counter = 0
        self.done: Optional[tuple] = None  # coordinator: (fid, participants) of a finished
        #                                    round whose view is not installed yet
        self.blocked = False               # member: sends stopped
        self.flushed = None                # member: the view being flushed
        self.coord = None                  # member: who is flushing us
        self.fid = None                    # member: the flush that stopped us
        self.block_timer = None
        self.early: Optional[tuple] = None  # member: a START_FLUSH of a view we have not
        #                                     installed yet, answered once we have
        self.dropped: list = []  # coordinator: (fid, participants) of rounds dropped
        #                          unfinished since our last view, ended at the next one

    @property
    def busy(self) -> bool:
        return self.round is not None

    # -- coordinator --------------------------------------------------------------------
    def start(self, participants: list, removed: list,
              on_done: Callable[[list, dict, dict], None], extend: bool = False) -> None:
        """Flush ``participants`` (self included); ``on_done(views, digests, cut)`` runs
        once every participant holds the cut. ``extend``: when a participant answers from a
        newer view (a change in flight, which the view change finishes), its members this
        round did not stop are stopped too, in a new round."""
        g = self.gms
        self._drop()  # a round replaced before it finished (an extension)
        self.counter += 1
        fid = [g.ctx.local.uid, self.counter]
        self.round = {"id": fid, "participants": list(participants),
                      "waiting": set(participants), "views": [], "digests": {},
                      "on_done": on_done, "t0": g.ctx.now(), "view": g.view,
                      "removed": removed, "extend": extend}
        g.stats["flushes"] += 1
        vid = g.view.view_id
        hdr = [START_FLUSH, fid, [a.uid for a in removed], [vid.coord.uid, vid.id]]
        for m in participants:
            if m == g.ctx.local:
                self.on_start(m, fid, hdr[2], hdr[3])
            else:
                g._send(m, list(hdr))
        g.ctx.schedule(g.config.view_ack_timeout_s, lambda: self._timeout(fid))

    def on_ok(self, sender, fid, vwire: list, dwire: list) -> None:
        r = self.round
        if r is None or fid != r["id"] or sender not in r["waiting"]:
            return
        book = self.gms.ctx.book
        # None: the very view being flushed (most members are in it; no need to send N
        # addresses back to the coordinator, which has them)
        r["views"].append(r["view"] if vwire is None else view_from_wire(vwire, book))
        r["digests"][sender] = digest_from_wire(dwire, book)
        r["waiting"].discard(sender)
        if r["waiting"]:
            self._unless_only_dead(r)
            return
        g = self.gms
        latest = max(r["views"], key=lambda v: v.view_id)
        if r["extend"] and self._extend(r, latest):
            return
        # second phase: everyone fetches what it misses up to the cut, then says so
        from .gms import cut
        r["cut"] = cut(latest.members, r["digests"], set(g.leaves))
        r["waiting"] = set(r["digests"])
        fwire = [[a.uid, s, h.uid] for a, (s, h) in r["cut"].items()]
        for m in list(r["waiting"]):
            if m == g.ctx.local:
                self.on_cut(m, r["id"], fwire)
            else:
                g._send(m, [FLUSH_CUT, r["id"], fwire])

    def _extend(self, r: dict, latest) -> bool:
        """A participant answered from a newer view whose members this round did not stop
        (not suspected): they could send after the cut, their last messages delivered in
        that view by some and in ours by others. Start over with them; the suspected ones
        of that view are removed (frozen) too."""
        g = self.gms
        more = [m for m in latest.members if m not in r["digests"] and m not in g.suspects]
        if not more:
            return False
        g.stats["flushes_extended"] += 1
        removed = r["removed"] + [m for m in latest.members
                                  if m in g.suspects and m not in r["removed"]]
        self.start(list(r["digests"]) + more, removed, r["on_done"], extend=True)
        return True

    def on_done(self, sender, fid) -> None:
        r = self.round
        if r is None or fid != r["id"] or "cut" not in r or sender not in r["waiting"]:
            return
        r["waiting"].discard(sender)
        if r["waiting"]:
            self._unless_only_dead(r)
        else:
            self.round = None
            self.done = (r["id"], [m for m in r["digests"] if m != self.gms.ctx.local])
            g = self.gms
            g.stats["flushes_done"] += 1
            g.stats["flush_us_total"] += int(1e6 * (g.ctx.now() - r["t0"]))
            r["on_done"](r["views"], r["digests"], r["cut"])

    def _timeout(self, fid) -> None:
        r = self.round
        if r is None or r["id"] != fid:
            return
        g = self.gms
        g.ctx.log(f"no FLUSH_OK from {sorted(r['waiting'])}; flushing without them")
        g.suspects |= r["waiting"] - {g.ctx.local}
        self._start_over("flush_timeouts")

    def _start_over(self, stat: str) -> None:
        """Drop the round in flight and change the view again (a merge cannot go on without
        its subgroup's flush)."""
        g = self.gms
        self._drop()
        g.stats[stat] += 1
        if g.merger.busy:
            g.merger.abandon()
        g._schedule_view()

    def abort(self) -> None:
        self._drop()

    def _drop(self) -> None:
        """Drop the round in flight unfinished. Its START_FLUSH may still reach members
        late (retransmitted after a partition heals, behind a view that let them move on);
        nothing would end that round there but FLUSH_RESUME, sent at our next view
        (``installed``). Kept for the last ``MAX_DROPPED`` rounds (counted beyond)."""
        r, self.round = self.round, None
        if r is None:
            return
        if len(self.dropped) >= MAX_DROPPED:
            del self.dropped[0]
            self.gms.stats["flush_dropped_forgotten"] += 1
        self.dropped.append((r["id"], r["participants"]))

    def resume(self) -> None:
        """Coordinator: end a finished flush without a view (FLUSH_RESUME to the members it
        stopped), and resume our own sending."""
        if self.done is not None:
            fid, participants = self.done
            self.done = None
            for m in participants:
                self.gms._send(m, [FLUSH_RESUME, fid])
        self.release()

    def on_resume(self, sender, fid) -> None:
        """The flush that stopped us ended without a view: send again, and deliver again
        from the members it froze (held beyond its cut, they would wait for a view that
        will not come)."""
        if self.blocked and sender == self.coord and fid == self.fid:
            self.gms.stats["flushes_resumed"] += 1
            self.release()

    def member_dead(self, addr) -> None:
        """A participant died mid-flush: start over without it once nobody else is waited
        for (no need to wait for the timeout). While live members are waited for too, the
        round goes on: they answer (``_unless_only_dead``), or the timeout suspects them
        all at once. A restart at each death sent the round's START_FLUSH to every member
        again and re-armed its timeout: when a partition's other side is found dead one
        member at a time, N/2 rounds of O(N) messages and O(N^2) work, and the view without
        them only after the last was found."""
        r = self.round
        if r is not None and addr in r["waiting"]:
            self._unless_only_dead(r)

    def _unless_only_dead(self, r: dict) -> None:
        """Start over if every member the round still waits for is dead (suspected)."""
        waiting, dead = r["waiting"], self.gms.suspects
        if len(waiting) <= len(dead) and waiting <= dead:
            self._start_over("flush_restarts")

    # -- member -------------------------------------------------------------------------
    def on_start(self, sender, fid, removed_uids: list, vid: list) -> None:
        g = self.gms
        book = g.ctx.book
        flushed = ViewId(book.get(vid[0]), int(vid[1]))
        other = self.blocked and self.coord not in (None, sender) and sender != g.ctx.local
        if g.view is not None and g.view.view_id < flushed:
            # the coordinator flushes a view whose VIEW has not reached us (it came from
            # another member, with no order against this one's messages): answer once we
            # have installed that view, or it times out on us and excludes us. Answered now,
            # our digest would be of our older view (without the members that view added)
            # and the freeze would not outlast installing the flushed view, so we would
            # deliver there beyond the cut (seed 16070490, a merge view's VIEW overtaken by
            # its next coordinator's flush); dropped, a live member would be excluded
            # (seed 15300059: a coordinator that left handed over to the next). From a
            # coordinator we know and are not stopped by another, we stop sending now, as
            # the answer would
            self.early = (sender, fid, removed_uids, vid)
            g.stats["flush_starts_early"] += 1
            if not other and sender in g.view:
                self.coord, self.flushed, self.fid = sender, flushed, fid
                self._block()
            return
        if g.view is None or sender not in g.view:
            return  # not our coordinator (we moved to another view): it will exclude us
        if other:
            return  # already flushing for another coordinator (split brain): one at a time
        removed = [book.get(u) for u in removed_uids]
        if flushed < g.view.view_id and self._moved_past(sender, flushed):
            # a round of an older view from a member that installed a newer one since: the
            # round is over, and nothing will end it. This START_FLUSH came late (a round
            # restarted or taken over during a partition, retransmitted after the heal's
            # merge view); taken, it would stop our sending and freeze our delivery until we
            # gave up and left the view (seeds 16490015, 16490025 and 16490115: a member of
            # a merged view with its sends held for good, beside a UNICAST backoff that
            # delayed such retransmissions)
            g.stats["flush_starts_stale"] += 1
            return
        # sending resumes with a view newer than the one being flushed (we may still be
        # installing that one)
        self.coord, self.flushed, self.fid = sender, flushed, fid
        self._block()
        g.below.down_event(Freeze(removed, self.flushed))
        digest = g.below.down_event(GetDigest(sent=True))
        vwire = None if g.view.view_id == flushed else view_to_wire(g.view)
        # [[uid, seqno], ...], built in C (O(N) per member and flush)
        hdr = [FLUSH_OK, fid, vwire, list(map(list, zip(map(_uid, digest), digest.values())))]
        if sender == g.ctx.local:
            self.on_ok(sender, fid, hdr[2], hdr[3])
        else:
            g._send(sender, hdr)

    def _moved_past(self, sender, flushed) -> bool:
        """``sender`` installed a view newer than ``flushed``, as far as our view shows: it
        made our view, or it coordinated a subgroup of our merge view newer than that. (A
        coordinator only flushes the view it is in.)"""
        view = self.gms.view
        if sender == view.view_id.coord:
            return True
        return any(sub.members and sub.members[0] == sender and flushed < sub.view_id
                   for sub in getattr(view, "subgroups", ()))

    def on_cut(self, sender, fid, fwire: list) -> None:
        """Fetch everything up to the cut, then tell the coordinator (FLUSH_DONE)."""
        g = self.gms
        if sender != self.coord:
            return
        book = g.ctx.book
        final = cut_from_wire(fwire, book)

        def done() -> None:
            if sender == g.ctx.local:
                self.on_done(sender, fid)
            else:
                g._send(sender, [FLUSH_DONE, fid])
        g.below.down_event(Catchup(final, done, until_view=True))

    def _block(self) -> None:
        g = self.gms
        if not self.blocked:
            self.blocked = True
            g.above.up_event(Writable("flush", False))
        if self.block_timer is not None:
            self.block_timer.cancel()
        # the coordinator may die mid-flush: the next in line flushes again
        self.block_timer = g.ctx.schedule(3 * g.config.view_ack_timeout_s, self._silent)

    def _silent(self) -> None:
        """Our flush coordinator went silent: take another's flush, still without sending;
        in the end leave the view rather than send after a cut (see the module doc)."""
        g = self.gms
        self.coord = None
        g.stats["flush_coordinator_silent"] += 1

        def give_up() -> None:
            if self.blocked:
                g._become_singleton("the flush that stopped sending never ended")
        self.block_timer = g.ctx.schedule(7 * g.config.view_ack_timeout_s, give_up)

    def installed(self, view) -> None:
        self.done = None  # a newer view releases the members of our last flush
        r = self.round
        if r is not None and r["view"].view_id < view.view_id:
            # another coordinator's view overtook the round we lead: its cut was taken in
            # the older view, and this newer view thaws what our own FLUSH_OK froze (we may
            # deliver in it beyond the cut), so a view built on that cut would move members
            # that delivered different messages. Start over on the view we are in now.
            self._start_over("flush_restarts")
        self._end_dropped()
        if self.flushed is None or self.flushed < view.view_id:
            self.flushed = None
            self.release()
        early, self.early = self.early, None
        if early is not None:
            vid = early[3]
            flushed = ViewId(self.gms.ctx.book.get(vid[0]), int(vid[1]))
            if view.view_id < flushed:
                self.early = early  # still behind the view it flushes
            elif view.view_id == flushed:
                self.on_start(*early)
            else:
                # we moved past the view it flushes: its coordinator started over on a newer
                # view, or ended, and would never end this round (its id is gone), so
                # taking it now would stop our sending until we gave up and left the view
                # (seed 15702893: a whole group split into singletons in a quiet period)
                self.gms.stats["flush_starts_stale"] += 1

    def _end_dropped(self) -> None:
        """We installed a view: end every round we dropped unfinished at the members it may
        have stopped (FLUSH_RESUME). UNICAST is FIFO, so it reaches each one after that
        round's START_FLUSH, however late that came, and ends only that very round: a
        member stopped by a newer round of ours, or by another coordinator, ignores it.
        Without it, a START_FLUSH retransmitted after a heal's merge view stopped a member
        of that view for good (seed 16520025 of the failures campaign, beside the UNICAST
        backoff: a takeover's round of the view before the partition, dropped when its
        coordinator formed its own side's view; seed 75 of the crashes campaign's
        last-view check, a round overtaken by another coordinator's view)."""
        dropped, self.dropped = self.dropped, []
        local = self.gms.ctx.local
        for fid, participants in dropped:
            for m in participants:
                if m != local:
                    self.gms._send(m, [FLUSH_RESUME, fid])

    def release(self) -> None:
        """Sending resumes (a newer view was installed, or the flush was ended without one),
        and delivery from the members our flush froze: a flush that ends without a view
        (FLUSH_RESUME, or the coordinator's own ``resume``) leaves no view to thaw them. A
        newer view clears ``flushed`` first: its installation ends the freeze itself."""
        if self.block_timer is not None:
            self.block_timer.cancel()
            self.block_timer = None
        self.coord = self.fid = None
        if self.blocked:
            self.blocked = False
            self.gms.above.up_event(Writable("flush", True))
            self.gms._release_held()
        if self.flushed is not None:
            self.gms.below.down_event(Thaw(self.flushed))
