"""FLUSH (stack/flush.py, GMS's helper) and the merge's subgroup flushes (stack/gms_merge.py)
in a GMS sandwich: START_FLUSH -> FLUSH_OK (view, digest) -> FLUSH_CUT (the cut) -> catch-up
-> FLUSH_DONE -> only then the VIEW; members block application sends meanwhile.

Header layouts: START_FLUSH [11, fid, removed_uids, [coord_uid, counter]],
FLUSH_OK [12, fid, view_wire, digest_wire], FLUSH_CUT [13, fid, cut_wire],
FLUSH_DONE [14, fid]; fid = [coordinator uid, its flush counter].
"""
import dataclasses

import pytest

from raygroups.stack.address import Address
from raygroups.stack.events import (Freeze, GetDigest, MemberDead, MergeDigest, MergeInfo,
                                    Thaw, Unsuspect, Writable)
from raygroups.stack.flush import FLUSH_CUT, FLUSH_DONE, FLUSH_OK, FLUSH_RESUME, START_FLUSH
from raygroups.stack.gms import VIEW, VIEW_ACK, SendBlocked, cut
from raygroups.stack.gms_merge import INSTALL_MERGE, MERGE_REQ, MERGE_RSP
from raygroups.stack.message import INTERNAL, NO_RELIABILITY, Message
from raygroups.stack.nakack import MSG
from raygroups.stack.view import MergeView, View, ViewId, view_to_wire

from .test_gms import (ack, coordinator, flush_done, flush_ok, hdr, join_req, loopback, member,
                       run_flush, sent, view_hdr, views, wire_digest)


def writable(s):
    return [e.writable for e in s.above.events_of(Writable) if e.layer == "flush"]


def start_flush(s, sender, fid, removed=(), vid=None):
    vid = vid or [s.gms.view.view_id.coord.uid, s.gms.view.view_id.id]
    return Message(s.local, b"", INTERNAL, {5: [START_FLUSH, fid, [a.uid for a in removed], vid]},
                   sender)


def flush_cut(s, sender, fid, final):
    return Message(s.local, b"", INTERNAL,
                   {5: [FLUSH_CUT, fid, [[a.uid, n, h.uid] for a, (n, h) in final.items()]]}, sender)


def view_msg(s, view, sender, final=None):
    h = view_hdr(view)
    if final:
        h[3] = [[a.uid, n, w.uid] for a, (n, w) in final.items()]
    return Message(None, b"", INTERNAL, {5: h}, sender)


# -- the cut --------------------------------------------------------------------------------
def test_cut_takes_the_highest_seqno_and_prefers_the_member_itself_as_holder():
    a, b, c = (Address(bytes([i]) * 16, n) for i, n in ((1, "A"), (2, "B"), (3, "C")))
    digests = {a: {a: 5, b: 2, c: 7}, b: {a: 5, b: 3, c: 6}}
    assert cut([a, b, c], digests) == {a: (5, a), b: (3, b), c: (7, a)}  # C crashed: A holds 7


def test_cut_avoids_a_leaving_holder_unless_it_is_the_only_one():
    a, b, c, d = (Address(bytes([i]) * 16, n) for i, n in ((1, "A"), (2, "B"), (3, "C"),
                                                           (4, "D")))
    digests = {a: {c: 4, d: 1}, b: {c: 4, d: 2}}
    assert cut([c, d], digests, leaving={a}) == {c: (4, b), d: (2, b)}
    assert cut([c, d], digests, leaving={a, b}) == {c: (4, a), d: (2, b)}
    assert cut([c], {}) == {}


# -- the coordinator ------------------------------------------------------------------------
def test_start_flush_goes_to_every_surviving_member_and_the_coordinator_stops_first():
    s = coordinator()
    assert writable(s) == [False, True]  # the flush of view 2, ended by view 2
    d = s.addr("D")
    s.up(join_req(s, d))
    del s.below.events[:]
    s.advance(0.01)
    starts = sent(s, START_FLUSH)
    assert sorted(m.dest for m in starts) == sorted([s.b, s.c])  # not the joiner
    assert all(m.flags == INTERNAL for m in starts)
    assert [hdr(m) for m in starts] == [[START_FLUSH, [s.local.uid, 2], [], [s.local.uid, 2]]] * 2
    assert writable(s) == [False, True, False]
    assert s.below.events_of(Freeze) == [Freeze([], ViewId(s.local, 2))]
    assert GetDigest(sent=True) in s.below.events
    assert s.gms.busy


def test_cut_only_after_every_flush_ok_view_only_after_every_flush_done():
    s = coordinator()
    d = s.addr("D")
    s.digest = {s.local: 3, s.b: 1}
    s.up(join_req(s, d))
    s.advance(0.01)
    fid = hdr(sent(s, START_FLUSH)[0])[1]
    s.up(flush_ok(s, s.b, fid, digest={s.local: 3, s.b: 4, s.c: 1}))
    s.up(flush_ok(s, s.b, fid, digest={s.b: 99}))  # a duplicate counts once, changes nothing
    assert sent(s, FLUSH_CUT) == []
    s.up(flush_ok(s, s.c, [s.local.uid, 99], digest={}))  # another flush's: ignored
    s.up(flush_ok(s, d, fid, digest={}))  # not a participant: ignored
    assert sent(s, FLUSH_CUT) == []
    s.up(flush_ok(s, s.c, fid, digest={s.local: 2, s.b: 4, s.c: 2}))
    cuts = sent(s, FLUSH_CUT)
    assert sorted(m.dest for m in cuts) == sorted([s.b, s.c])
    expected = sorted([[s.local.uid, 3, s.local.uid], [s.b.uid, 4, s.b.uid],
                       [s.c.uid, 2, s.c.uid]])
    assert all(hdr(m)[:2] == [FLUSH_CUT, fid] and sorted(hdr(m)[2]) == expected for m in cuts)
    # the coordinator catches up to the cut itself too
    assert s.catchups[-1].targets == {s.local: (3, s.local), s.b: (4, s.b), s.c: (2, s.c)}
    assert s.catchups[-1].until_view
    s.up(flush_done(s, s.b, fid), flush_done(s, s.b, fid))
    s.up(flush_done(s, s.c, [s.local.uid, 99]))
    assert sent(s, VIEW) == []
    s.up(flush_done(s, s.c, fid))
    [v] = [m for m in sent(s, VIEW) if m.dest is None]
    assert sorted(hdr(v)[3]) == expected  # the VIEW carries the cut again
    assert hdr(v)[5] is True  # every member was flushed (D joins at the cut): stable
    assert s.gms.stats["flushes"] == 2 and s.gms.stats["flush_timeouts"] == 0


def test_flush_done_before_the_cut_does_not_count():
    s = coordinator()
    s.up(join_req(s, s.addr("D")))
    s.advance(0.01)
    fid = hdr(sent(s, START_FLUSH)[0])[1]
    s.up(flush_done(s, s.b, fid), flush_done(s, s.c, fid))
    s.up(flush_ok(s, s.b, fid), flush_ok(s, s.c, fid))
    assert sent(s, VIEW) == []
    s.up(flush_done(s, s.b, fid), flush_done(s, s.c, fid))
    assert len([m for m in sent(s, VIEW) if m.dest is None]) == 1


def test_the_coordinator_waits_for_its_own_catchup_before_its_flush_done():
    s = coordinator()
    s.catchup_now = False
    s.up(join_req(s, s.addr("D")))
    s.advance(0.01)
    fid = hdr(sent(s, START_FLUSH)[0])[1]
    s.up(flush_ok(s, s.b, fid), flush_ok(s, s.c, fid))
    s.up(flush_done(s, s.b, fid), flush_done(s, s.c, fid))
    assert sent(s, VIEW) == []
    s.catchups[-1].callback()
    assert len([m for m in sent(s, VIEW) if m.dest is None]) == 1


def test_a_crashed_member_is_frozen_and_removed_at_the_cut_a_survivor_holds():
    s = coordinator()
    s.up_event_dead = s.gms.up_event(MemberDead(s.c))
    s.advance(0.01)
    [start] = sent(s, START_FLUSH)
    assert start.dest == s.b and hdr(start)[2] == [s.c.uid]  # C is being removed
    assert s.below.events_of(Freeze)[-1] == Freeze([s.c], ViewId(s.local, 2))
    fid = hdr(start)[1]
    s.up(flush_ok(s, s.b, fid, digest={s.c: 5, s.b: 1}))
    [c] = sent(s, FLUSH_CUT)
    assert sorted(hdr(c)[2]) == sorted([[s.local.uid, 0, s.local.uid], [s.b.uid, 1, s.b.uid],
                                        [s.c.uid, 5, s.b.uid]])  # B holds C's last message
    s.up(flush_done(s, s.b, fid))
    [v] = [m for m in sent(s, VIEW) if m.dest is None]
    assert [uid for uid, _ in hdr(v)[1][2]] == [s.local.uid, s.b.uid]
    assert [s.c.uid, 5, s.b.uid] in hdr(v)[3]


def test_unsuspect_is_ignored_while_a_flush_runs():
    s = coordinator()
    s.gms.up_event(MemberDead(s.c))
    s.advance(0.01)
    s.gms.up_event(Unsuspect(s.c))
    assert s.c in s.gms.suspects
    run_flush(s)
    loopback(s)
    assert views(s)[-1].members == (s.local, s.b)


def test_flush_timeout_suspects_the_silent_and_restarts_without_them():
    s = coordinator()
    d = s.addr("D")
    s.up(join_req(s, d))
    s.advance(0.01)
    fid = hdr(sent(s, START_FLUSH)[0])[1]
    s.up(flush_ok(s, s.b, fid))  # C never answers
    s.below.take()
    s.advance(0.99)
    assert sent(s, START_FLUSH) == [] and s.gms.stats["flush_timeouts"] == 0
    s.advance(0.02)  # view_ack_timeout_s
    assert s.gms.stats["flush_timeouts"] == 1 and s.c in s.gms.suspects
    s.advance(0.01)  # bundling, then the new flush
    [again] = sent(s, START_FLUSH)
    assert again.dest == s.b and hdr(again)[1] != fid and hdr(again)[2] == [s.c.uid]
    assert s.below.events_of(Freeze)[-1].members == [s.c]
    s.up(flush_ok(s, s.b, fid), flush_done(s, s.b, fid))  # the old flush's: ignored
    assert sent(s, VIEW) == []
    run_flush(s)
    [v] = [m for m in sent(s, VIEW) if m.dest is None]
    assert [uid for uid, _ in hdr(v)[1][2]] == [s.local.uid, s.b.uid, d.uid]


def test_a_dropped_round_is_ended_at_its_members_by_the_next_view():
    """A round dropped unfinished (here C never answered: it timed out and restarted
    without C) gets FLUSH_RESUME at its participants once the coordinator installs its next
    view, and not before. Its START_FLUSH may reach C late, after a heal's merge view let C
    move on; nothing else would end that round there (seed 16520025 of the failures
    campaign: a member of the merged view stopped for good, and the group fell apart). The
    round that made the view gets none: its members install the view."""
    s = coordinator()
    d = s.addr("D")
    s.up(join_req(s, d))
    s.advance(0.01)
    fid = hdr(sent(s, START_FLUSH)[0])[1]
    s.up(flush_ok(s, s.b, fid))
    s.below.take()
    s.advance(1.03)  # view_ack_timeout_s, bundling, the new round without C
    assert s.gms.stats["flush_timeouts"] == 1 and sent(s, START_FLUSH)
    assert sent(s, FLUSH_RESUME) == []
    fid2, _ = run_flush(s)
    loopback(s)
    s.up(ack(s, s.b, 3), ack(s, d, 3))
    assert views(s)[-1].members == (s.local, s.b, d)
    assert sorted((m.dest, tuple(hdr(m)[1])) for m in sent(s, FLUSH_RESUME)) == \
        sorted([(s.b, tuple(fid)), (s.c, tuple(fid))])
    s.advance(1.0)
    assert all(hdr(m)[1] != fid2 for m in sent(s, FLUSH_RESUME))


def test_a_round_overtaken_by_a_view_is_ended_at_the_members_it_stopped():
    """B took over from a suspected A and flushed view 5; A's view 6 overtakes the round.
    C, stopped by B's round, may install view 6 before B's round reaches it, or get B's
    START_FLUSH after: B ends the round at C, whoever coordinates next (here B, A being
    suspected: its next round stops C again, after the FLUSH_RESUME)."""
    s = member()
    s.gms.up_event(MemberDead(s.a))
    s.advance(0.01)
    [start] = sent(s, START_FLUSH)
    s.below.take()
    s.up(view_msg(s, View(ViewId(s.a, 6), (s.a, s.local, s.c)), s.a))
    [resume] = sent(s, FLUSH_RESUME)
    assert resume.dest == s.c and hdr(resume)[1] == hdr(start)[1]


def test_a_death_mid_flush_restarts_the_round_once_only_the_dead_are_waited_for():
    """C dies while B has not answered either: the round goes on (a restart at each death,
    when a partition's other side is found dead one member at a time, sent every round
    again to all and re-armed its timeout until the last was found). B's answer leaves only
    the dead: the round starts over at once without C, C frozen."""
    s = coordinator()
    d = s.addr("D")
    s.up(join_req(s, d))
    s.advance(0.01)
    fid = hdr(sent(s, START_FLUSH)[0])[1]
    s.below.take()
    s.gms.up_event(MemberDead(s.c))
    s.advance(0.01)
    assert sent(s, START_FLUSH) == [] and s.gms.stats["flush_restarts"] == 0
    s.up(flush_ok(s, s.b, fid))
    s.advance(0.01)
    assert s.gms.stats["flush_restarts"] == 1
    [again] = sent(s, START_FLUSH)
    assert again.dest == s.b and hdr(again)[1] != fid and hdr(again)[2] == [s.c.uid]


def test_flush_timeout_waiting_for_flush_done_suspects_who_did_not_catch_up():
    s = coordinator()
    s.up(join_req(s, s.addr("D")))
    s.advance(0.01)
    fid = hdr(sent(s, START_FLUSH)[0])[1]
    s.up(flush_ok(s, s.b, fid), flush_ok(s, s.c, fid))
    s.up(flush_done(s, s.c, fid))
    s.below.take()
    s.advance(1.02)
    assert s.gms.suspects == {s.b}
    s.advance(0.01)
    assert [m.dest for m in sent(s, START_FLUSH)] == [s.c]


def test_the_new_view_builds_on_the_latest_view_a_survivor_installed():
    """B already installed view 3 {A', me, B, C} of a previous coordinator's change in flight:
    the next view finishes it and takes a higher counter."""
    s = coordinator()
    x = s.addr("X")
    s.gms.up_event(MemberDead(s.c))
    s.advance(0.01)
    newer = View(ViewId(s.b, 7), (s.local, s.b, s.c, x))
    first = hdr(sent(s, START_FLUSH)[-1])[1]
    s.up(flush_ok(s, s.b, first, newer))
    # X, of the newer view, was not stopped by this round: it could send after the cut, so
    # the round starts over with it (the cut's phase never began)
    assert not sent(s, FLUSH_CUT)
    again = [m for m in sent(s, START_FLUSH) if hdr(m)[1] != first]
    assert sorted(m.dest for m in again) == sorted([s.b, x])
    assert hdr(again[0])[2] == [s.c.uid]  # the crashed member is still frozen
    assert s.gms.stats["flushes_extended"] == 1
    fid, peers = run_flush(s, views={s.b: newer, x: newer})
    assert sorted(peers) == sorted([s.b, x]) and fid != first
    [v] = [m for m in sent(s, VIEW) if m.dest is None]
    assert hdr(v)[1][1] == 8
    assert [uid for uid, _ in hdr(v)[1][2]] == [s.local.uid, s.b.uid, x.uid]
    # the coordinator itself flushed from an older view: the cut is not stable at install
    assert hdr(v)[5] is False


# -- members --------------------------------------------------------------------------------
def test_member_answers_start_flush_blocks_freezes_and_reports_view_and_digest():
    s = member()
    s.digest = {s.a: 3, s.local: 2, s.c: 1}
    fid = [s.a.uid, 4]
    s.up(start_flush(s, s.a, fid, removed=[s.c]))
    assert writable(s) == [False]
    assert s.below.events_of(Freeze) == [Freeze([s.c], ViewId(s.a, 5))]
    assert GetDigest(sent=True) in s.below.events
    [ok] = sent(s, FLUSH_OK)
    assert ok.dest == s.a and ok.flags == INTERNAL
    # our view is the one being flushed (ViewId(A, 5)): the coordinator has it, so it is
    # not sent back; a member in another view sends its view in full
    assert s.gms.view.view_id == ViewId(s.a, 5)
    assert hdr(ok) == [FLUSH_OK, fid, None, wire_digest(s.digest)]
    s.up(start_flush(s, s.a, fid, removed=[s.c]))  # a retry: answered again, blocked once
    assert len(sent(s, FLUSH_OK)) == 2 and writable(s) == [False]
    # a flush of another view (C's, of view 4: C is behind us, as far as we know)
    t = member()
    t.up(start_flush(t, t.c, [t.c.uid, 5], removed=[], vid=[t.a.uid, 4]))
    [ok] = sent(t, FLUSH_OK)
    assert hdr(ok)[2] == view_to_wire(t.gms.view)


def test_application_sends_are_held_during_a_flush_and_go_out_after_the_new_view():
    s = member()
    s.up(start_flush(s, s.a, [s.a.uid, 1]))
    s.below.take()
    app1, app2 = Message(None, b"one"), Message(s.c, b"two")
    s.down(app1)
    s.down(app2)
    # a layer's reliable multicast (PRIMARY's) is held too: after our FLUSH_OK it would be
    # beyond the cut; its unicasts and best-effort multicasts are no part of the cut
    internal = Message(None, b"stack", INTERNAL)
    direct = Message(s.c, b"to one", INTERNAL)
    best_effort = Message(None, b"credit", NO_RELIABILITY | INTERNAL)
    for m in (internal, direct, best_effort):
        s.down(m)
    assert s.below.take() == [direct, best_effort]
    assert s.gms.held == [app1, app2, internal]
    s.up(view_msg(s, View(ViewId(s.a, 6), (s.a, s.local, s.c)), s.a))
    out = s.below.take()
    # in the order they were sent
    assert [m for m in out if m in (app1, app2, internal)] == [app1, app2, internal]
    assert writable(s) == [False, True] and s.gms.held == []
    s.down(Message(None, b"three"))
    assert [m.payload for m in s.below.sent] == [b"three"]


def test_held_sends_go_out_in_the_new_view():
    """What the application sent while a flush blocked it goes out in the new view: NAKACK
    must stamp it with the new view's counter (a receiver still in the old view then holds
    it), not the flushed view's (receivers in the old view would deliver it in the view it
    was flushed from)."""
    s = member(nakack=True)
    s.up(start_flush(s, s.a, [s.a.uid, 1]))
    s.down(Message(None, b"held"))
    s.up(Message(None, b"", INTERNAL, {2: [MSG, 4, 5], 5: view_hdr(
        View(ViewId(s.a, 6), (s.a, s.local, s.c)))}, s.a))
    assert views(s)[-1].view_id == ViewId(s.a, 6)
    [held] = [m for m in s.below.sent if m.payload == b"held"]
    assert held.headers[2] == [MSG, 1, 6]


def test_a_flush_of_a_view_not_installed_yet_is_answered_from_that_view():
    """Our coordinator flushes view 6, whose VIEW has not reached us (a merge's VIEW came
    from another member): we stop sending at once, but answer (digest, freeze) only once we
    stand in view 6. Answered from view 5, the digest would lack what view 6 added, and
    installing view 6 would thaw the freeze: we would deliver there beyond the cut (seed
    16070490)."""
    s = member()
    s.up(start_flush(s, s.a, [s.a.uid, 1], vid=[s.a.uid, 6]))
    assert sent(s, FLUSH_OK, s.a) == [] and writable(s) == [False]
    s.up(view_msg(s, View(ViewId(s.a, 6), (s.a, s.local, s.c)), s.a))
    assert len(sent(s, FLUSH_OK, s.a)) == 1 and writable(s) == [False]


def test_held_sends_are_not_released_by_the_flushed_view_itself():
    """We are still in view 5 while the coordinator flushes view 6 (we were late): installing
    view 6 does not end that flush; view 7 does."""
    s = member()
    s.up(start_flush(s, s.a, [s.a.uid, 1], vid=[s.a.uid, 6]))
    s.down(Message(None, b"x"))
    s.up(view_msg(s, View(ViewId(s.a, 6), (s.a, s.local, s.c)), s.a))
    assert writable(s) == [False] and len(s.gms.held) == 1
    s.up(view_msg(s, View(ViewId(s.a, 7), (s.a, s.local, s.c)), s.a))
    assert writable(s) == [False, True] and s.gms.held == []
    assert [m.payload for m in s.below.sent if m.dest is None] == [b"x"]


def test_a_member_whose_flush_coordinator_went_silent_never_sends_again_in_the_old_view():
    """After 3 ack timeouts it takes another coordinator's flush (the next in line takes
    over) but stays stopped: sending after the cut would deliver its messages in V at some
    members and in V' at others. After 10 it leaves the view as a singleton and sends there."""
    s = member()
    s.up(start_flush(s, s.a, [s.a.uid, 1]))
    s.down(Message(None, b"x"))
    s.advance(2.99)
    s.up(start_flush(s, s.c, [s.c.uid, 1]))  # C is not our flush coordinator (yet)
    assert sent(s, FLUSH_OK, s.c) == []
    s.advance(0.02)
    assert writable(s) == [False]  # silent coordinator: still stopped
    s.up(start_flush(s, s.c, [s.c.uid, 2]))  # the next in line takes over
    assert len(sent(s, FLUSH_OK, s.c)) == 1
    s.advance(3.01)
    s.advance(7.0)  # nothing came of it either: a singleton view, sending again
    assert views(s)[-1].members == (s.local,) and writable(s)[-1] is True
    assert [m.payload for m in s.below.sent if m.dest is None and m.payload == b"x"] == [b"x"]
    assert s.gms.stats["excluded"] == 1


def test_a_repeated_start_flush_rearms_the_silence_timer():
    s = member()
    s.up(start_flush(s, s.a, [s.a.uid, 1]))
    s.advance(2.0)
    s.up(start_flush(s, s.a, [s.a.uid, 2]))  # the coordinator restarted its flush
    s.advance(2.0)
    s.up(start_flush(s, s.c, [s.c.uid, 1]))
    assert sent(s, FLUSH_OK, s.c) == []  # A is still our flush coordinator
    s.advance(1.01)
    s.up(start_flush(s, s.c, [s.c.uid, 2]))
    assert len(sent(s, FLUSH_OK, s.c)) == 1 and writable(s) == [False]


def test_flush_resume_from_our_flush_coordinator_ends_the_flush():
    s = member()
    s.up(start_flush(s, s.a, [s.a.uid, 1], removed=(s.c,)))
    assert s.below.events_of(Thaw) == []
    s.down(Message(None, b"x"))
    for sender, fid in ((s.c, [s.a.uid, 1]), (s.a, [s.a.uid, 9])):  # not ours: ignored
        s.up(Message(s.local, b"", INTERNAL, {5: [FLUSH_RESUME, fid]}, sender))
    assert writable(s) == [False]
    s.up(Message(s.local, b"", INTERNAL, {5: [FLUSH_RESUME, [s.a.uid, 1]]}, s.a))
    assert writable(s) == [False, True] and s.gms.stats["flushes_resumed"] == 1
    assert [m.payload for m in s.below.sent if m.dest is None] == [b"x"]
    # and C, frozen by it, is delivered from again (no view will come to thaw it)
    assert s.below.events_of(Thaw) == [Thaw(s.gms.view.view_id)]


def test_a_merge_that_did_not_happen_resumes_the_flushed_subgroup():
    s = merge_leader()
    run_flush(s)
    [req] = sent(s, MERGE_REQ)
    assert sent(s, FLUSH_RESUME) == []
    s.advance(3.01)  # merge_timeout_s without an answer
    assert sorted(m.dest for m in sent(s, FLUSH_RESUME)) == sorted([s.b, s.c])
    assert writable(s)[-1] is True and not s.gms.busy
    # and the leader's own freeze ends too: no view comes to thaw it
    assert s.below.events_of(Thaw) == [Thaw(s.gms.view.view_id)]


def test_sends_beyond_max_held_raise_send_blocked():
    s = member(max_held=2)
    s.up(start_flush(s, s.a, [s.a.uid, 1]))
    s.down(Message(None, 1))
    s.down(Message(None, 2))
    with pytest.raises(SendBlocked):
        s.down(Message(None, 3))
    assert [m.payload for m in s.gms.held] == [1, 2]


def test_flush_cut_catches_up_then_answers_flush_done():
    s = member()
    s.catchup_now = False
    fid = [s.a.uid, 1]
    s.up(start_flush(s, s.a, fid, removed=[s.c]))
    s.up(flush_cut(s, s.a, fid, {s.a: (3, s.a), s.c: (4, s.a)}))
    [ev] = s.catchups
    assert ev.targets == {s.a: (3, s.a), s.c: (4, s.a)} and ev.until_view
    assert sent(s, FLUSH_DONE) == []
    ev.callback()
    [done] = sent(s, FLUSH_DONE)
    assert done.dest == s.a and hdr(done) == [FLUSH_DONE, fid] and done.flags == INTERNAL


def test_flush_cut_from_anyone_but_the_flushing_coordinator_is_ignored():
    s = member()
    fid = [s.a.uid, 1]
    s.up(flush_cut(s, s.a, fid, {s.a: (3, s.a)}))  # no flush running
    s.up(start_flush(s, s.a, fid))
    s.up(flush_cut(s, s.c, fid, {s.a: (3, s.a)}))
    assert s.catchups == [] and sent(s, FLUSH_DONE) == []


def test_start_flush_from_outside_our_view_is_not_answered():
    s = member()
    x = s.addr("X")
    s.up(start_flush(s, x, [x.uid, 1], vid=[x.uid, 9]))
    assert sent(s, FLUSH_OK) == [] and writable(s) == [] and s.below.events_of(Freeze) == []
    s.down(Message(None, b"free"))
    assert [m.payload for m in s.below.sent] == [b"free"]


def test_only_one_coordinators_flush_at_a_time():
    s = member()
    s.up(start_flush(s, s.a, [s.a.uid, 1]))
    s.up(start_flush(s, s.c, [s.c.uid, 1], removed=[s.a]))  # C thinks A is dead
    assert [m.dest for m in sent(s, FLUSH_OK)] == [s.a]
    assert s.below.events_of(Freeze) == [Freeze([], ViewId(s.a, 5))]
    s.up(flush_cut(s, s.c, [s.c.uid, 1], {s.a: (0, s.a)}))
    assert s.catchups == []
    # A's flush ends with a view; then C's flush is answered
    s.up(view_msg(s, View(ViewId(s.a, 6), (s.a, s.local, s.c)), s.a))
    s.up(start_flush(s, s.c, [s.c.uid, 2], removed=[s.a]))
    assert [m.dest for m in sent(s, FLUSH_OK)] == [s.a, s.c]


def test_a_flush_of_a_view_not_yet_installed_is_answered_once_it_is():
    """A leaves: its flush stops us, its VIEW 6 {C, me} goes out, and C, coordinator of view
    6, flushes it for a joiner at once. C's START_FLUSH can overtake A's VIEW (two senders,
    no order between them): we are still stopped by A's flush and in view 5. Dropped, C's
    flush would time out on us and exclude a live member (seed 15300059); it is answered as
    soon as view 6 is installed."""
    s = member()
    s.up(start_flush(s, s.a, [s.a.uid, 1]))
    assert [m.dest for m in sent(s, FLUSH_OK)] == [s.a]
    s.up(start_flush(s, s.c, [s.c.uid, 1], vid=[s.a.uid, 6]))     # ahead of the VIEW
    assert [m.dest for m in sent(s, FLUSH_OK)] == [s.a]
    assert s.gms.stats["flush_starts_early"] == 1
    s.up(view_msg(s, View(ViewId(s.a, 6), (s.c, s.local)), s.a))
    oks = sent(s, FLUSH_OK)
    assert [m.dest for m in oks] == [s.a, s.c]
    assert hdr(oks[-1])[1] == [s.c.uid, 1] and hdr(oks[-1])[2] is None  # of view 6 itself
    assert writable(s)[-1] is False  # stopped again, now by C's flush


def test_a_late_start_flush_of_an_older_view_from_a_member_that_moved_past_it_is_stale():
    """A START_FLUSH of a view older than ours can arrive late (a round restarted or taken
    over in a partition, retransmitted after the heal's merge view). From a member that has
    installed a newer view since (it made ours, or coordinated a newer subgroup of our merge
    view) the round is over and nothing will end it: taken, it stopped our sending and froze
    our delivery until we gave up and left (seeds 16490015, 16490025, 16490115). From a
    member not known to have moved past it, it is answered and stops us, as before: that
    coordinator may be behind us and build its next view on ours."""
    s = member()  # view (A, 5) {A, me, C}
    s.up(start_flush(s, s.a, [s.a.uid, 3], removed=(s.c,), vid=[s.a.uid, 4]))
    assert sent(s, FLUSH_OK) == [] and writable(s) == [] and s.below.events_of(Freeze) == []
    assert s.gms.stats["flush_starts_stale"] == 1
    low = s.addr("0")  # C coordinated the subgroup (C, 6) of our merge view (A, 7)
    s.gms.view = MergeView(ViewId(s.a, 7), (s.a, s.local, s.c, low),
                           subgroups=(View(ViewId(s.a, 6), (s.a, s.local)),
                                      View(ViewId(s.c, 6), (s.c, low))))
    s.up(start_flush(s, s.c, [s.c.uid, 1], vid=[s.a.uid, 5]))
    assert sent(s, FLUSH_OK) == [] and writable(s) == []
    assert s.gms.stats["flush_starts_stale"] == 2
    s.up(start_flush(s, low, [low.uid, 1], vid=[s.a.uid, 5]))  # not known to be past it
    assert [m.dest for m in sent(s, FLUSH_OK)] == [low] and writable(s) == [False]


def test_a_view_with_a_cut_is_installed_only_after_catching_up_to_it():
    s = member()
    s.catchup_now = False
    v6 = View(ViewId(s.a, 6), (s.a, s.local))
    s.up(view_msg(s, v6, s.a, final={s.a: (7, s.a), s.c: (4, s.a)}))
    [ev] = s.catchups
    assert ev.targets == {s.a: (7, s.a), s.c: (4, s.a)} and not ev.until_view
    assert views(s)[-1].view_id == ViewId(s.a, 5)
    v7 = View(ViewId(s.a, 7), (s.a, s.local))
    s.up(view_msg(s, v7, s.a))  # the next view waits behind the catch-up
    assert views(s)[-1].view_id == ViewId(s.a, 5)
    ev.callback()
    assert [v.view_id.id for v in views(s)] == [5, 6, 7]
    ev.callback()  # a late second call changes nothing
    assert [v.view_id.id for v in views(s)] == [5, 6, 7]


def test_an_unfinished_catchup_installs_the_view_after_the_ack_timeout():
    s = member()
    s.catchup_now = False
    v6 = View(ViewId(s.a, 6), (s.a, s.local))
    s.up(view_msg(s, v6, s.a, final={s.c: (4, s.a)}))
    s.advance(0.99)
    assert views(s)[-1].view_id.id == 5
    s.advance(0.02)
    assert views(s)[-1] == v6 and s.gms.stats["catchup_incomplete"] == 1
    s.catchups[0].callback()  # too late: nothing installed twice
    assert [v.view_id.id for v in views(s)] == [5, 6]


# -- merge: each subgroup is flushed first --------------------------------------------------
HIGH = Address(b"\xff" * 16, "X")  # above every seeded address: we lead the merge


def merge_leader(digest=None):
    """Our view 2 {me, B, C} and X's view 4 {X, Y}; ``digest`` {0: me, 1: B, 2: C} is what
    we report in our subgroup's flush."""
    s = coordinator()
    if digest:
        s.digest = {(s.local, s.b, s.c)[i]: n for i, n in digest.items()}
    s.x, s.y = s.ctx.book.add(HIGH), s.addr("Y")
    s.vx = View(ViewId(s.x, 4), (s.x, s.y))
    for _ in range(2):  # MIN_SIGHTINGS INFOs from the other coordinator
        s.gms.up_event(MergeInfo(s.x, s.x, 4, True))
    s.gms.merger.check()  # what the periodic merge check does
    return s


def test_the_periodic_merge_check_starts_a_merge_with_a_twice_seen_coordinator():
    s = coordinator()
    for _ in range(2):
        s.gms.up_event(MergeInfo(HIGH, HIGH, 4, True))
    s.advance(1.0)  # merge_check_s
    assert s.gms.stats["merges_started"] == 1
    assert sorted(m.dest for m in sent(s, START_FLUSH)) == sorted([s.b, s.c])


def test_the_merge_leader_flushes_its_subgroup_before_asking_the_others():
    s = merge_leader(digest={0: 2, 1: 1})
    assert s.gms.stats["merges_started"] == 1
    assert sent(s, MERGE_REQ) == []
    assert sorted(m.dest for m in sent(s, START_FLUSH)) == sorted([s.b, s.c])
    assert writable(s)[-1] is False
    run_flush(s, digests={s.b: {s.b: 3}, s.c: {}})
    [req] = sent(s, MERGE_REQ)
    mid = hdr(req)[1]
    assert req.dest == s.x and mid == [s.local.uid, 1]
    assert sent(s, VIEW) == []  # the flush of a merge does not end with a plain view
    s.phys[s.x] = ("10.0.0.7", 7800)
    state = [view_to_wire(s.vx), [[s.x.uid, 6], [s.y.uid, 2]], [[s.x.uid, "10.0.0.7", 7800]]]
    s.up(Message(s.local, b"", INTERNAL, {5: [MERGE_RSP, mid, True, state]}, s.x))
    [inst] = sent(s, INSTALL_MERGE)
    assert inst.dest == s.x and hdr(inst)[1] == mid
    [mv] = [m for m in sent(s, VIEW) if m.dest is None]
    h = hdr(mv)
    assert h[1][:2] == [s.local.uid, 5]  # above every subgroup's counter
    assert [uid for uid, _ in h[1][2]] == [s.local.uid, s.b.uid, s.c.uid, s.x.uid, s.y.uid]
    # our subgroup's cut travels with the view; the merged digest covers both subgroups
    assert sorted(h[3]) == sorted([[s.local.uid, 2, s.local.uid], [s.b.uid, 3, s.b.uid],
                                   [s.c.uid, 0, s.c.uid]])
    assert sorted(map(tuple, h[4][1])) == sorted([(s.local.uid, 2), (s.b.uid, 3), (s.c.uid, 0),
                                                  (s.x.uid, 6), (s.y.uid, 2)])
    loopback(s)
    merged = [e for e in s.below.events if isinstance(e, MergeDigest)]
    assert [e.digest for e in merged] == [{s.local: 2, s.b: 3, s.c: 0, s.x: 6, s.y: 2}]
    assert set(merged[0].others) == {s.x, s.y}  # the other subgroup starts at its cut
    v = views(s)[-1]
    assert isinstance(v, MergeView) and v.members == (s.local, s.b, s.c, s.x, s.y)
    assert [sg.view_id for sg in v.subgroups] == [ViewId(s.local, 2), ViewId(s.x, 4)]
    assert writable(s)[-1] is True and not s.gms.busy


def test_a_merge_of_three_leaves_out_a_subgroup_without_a_version_in_common_with_those_before():
    """Our subgroup speaks [1, 2]; Z's [2, 2] and X's [1, 1] each have a version in common
    with ours (so neither refused), but not with each other: the MergeView takes Z, the
    first after us, and leaves X out (its merge times out and it carries on)."""
    s = coordinator()
    s.gms.view = dataclasses.replace(s.gms.view, versions=((1, 2),) * 3)
    s.x, s.z = s.ctx.book.add(HIGH), s.ctx.book.add(Address(b"\xfe" * 16, "Z"))
    for _ in range(2):
        s.gms.up_event(MergeInfo(s.x, s.x, 4, True))
        s.gms.up_event(MergeInfo(s.z, s.z, 6, True))
    s.gms.merger.check()
    run_flush(s)
    reqs = sent(s, MERGE_REQ)
    assert sorted(m.dest for m in reqs) == sorted([s.x, s.z])
    assert all(hdr(m)[3] == [1, 2] for m in reqs)  # our subgroup's versions
    mid = hdr(reqs[0])[1]
    for coord, versions in ((s.x, ((1, 1),)), (s.z, ((2, 2),))):
        v = View(ViewId(coord, 4), (coord,), versions=versions)
        s.up(Message(s.local, b"", INTERNAL,
                     {5: [MERGE_RSP, mid, True, [view_to_wire(v), [[coord.uid, 1]], []]]}, coord))
    [inst] = sent(s, INSTALL_MERGE)
    assert inst.dest == s.z and s.gms.stats["merges_incompatible"] == 1
    loopback(s)
    v = views(s)[-1]
    assert isinstance(v, MergeView) and v.members == (s.local, s.b, s.c, s.z)
    assert v.versions == ((1, 2),) * 3 + ((2, 2),) and v.wire_version == 2


def test_a_higher_coordinator_does_not_lead_the_merge():
    s = coordinator()
    low = s.ctx.book.add(Address(b"\x00" * 16, "L"))
    for _ in range(2):
        s.gms.up_event(MergeInfo(low, low, 9, True))
    s.advance(1.0)
    assert s.gms.stats["merges_started"] == 0 and sent(s, START_FLUSH) == []


def test_one_info_is_not_enough_to_merge():
    s = coordinator()
    s.gms.up_event(MergeInfo(HIGH, HIGH, 4, True))
    s.advance(1.0)
    assert s.gms.stats["merges_started"] == 0


def test_a_merge_participant_flushes_its_subgroup_then_answers_and_multicasts_the_view():
    s = coordinator()
    low = s.ctx.book.add(Address(b"\x00" * 16, "L"))
    mid = [low.uid, 3]
    s.digest = {s.local: 4}
    s.up(Message(s.local, b"", INTERNAL, {5: [MERGE_REQ, mid]}, low))
    assert sent(s, MERGE_RSP) == []
    assert sorted(m.dest for m in sent(s, START_FLUSH)) == sorted([s.b, s.c])
    run_flush(s)
    [rsp] = sent(s, MERGE_RSP)
    assert rsp.dest == low
    _, rmid, ok, state = hdr(rsp)
    assert rmid == mid and ok is True
    assert state[0] == view_to_wire(s.gms.view)
    assert sorted(map(tuple, state[1])) == sorted([(s.local.uid, 4), (s.b.uid, 0),
                                                   (s.c.uid, 0)])
    assert sorted(p[0] for p in state[2]) == sorted([s.local.uid, s.b.uid, s.c.uid])
    vl = View(ViewId(low, 8), (low,))
    mv = MergeView(ViewId(low, 9), (low, s.local, s.b, s.c), subgroups=(vl, s.gms.view))
    inst = [INSTALL_MERGE, mid, view_to_wire(mv), [view_to_wire(vl), view_to_wire(s.gms.view)],
            [[low.uid, 1], [s.local.uid, 4]], [[low.uid, "10.0.0.6", 7800]]]
    s.up(Message(s.local, b"", INTERNAL, {5: [INSTALL_MERGE, [low.uid, 99], *inst[2:]]}, low))
    assert sent(s, VIEW) == []  # not our merge
    s.up(Message(s.local, b"", INTERNAL, {5: inst}, low))
    [v] = [m for m in sent(s, VIEW) if m.dest is None]
    assert hdr(v)[1] == view_to_wire(mv) and hdr(v)[4][0] == inst[3]
    assert hdr(v)[5] is True  # every member flushed from our view: the cut is stable
    loopback(s)
    got = views(s)[-1]
    assert isinstance(got, MergeView) and got.view_id == ViewId(low, 9)
    assert sent(s, VIEW_ACK)[-1].dest == low  # acked to the merge leader
    assert writable(s)[-1] is True


def test_a_busy_coordinator_rejects_a_merge_request():
    s = coordinator()
    s.up(join_req(s, s.addr("D")))
    s.advance(0.01)  # its own flush runs
    low = s.ctx.book.add(Address(b"\x00" * 16, "L"))
    s.up(Message(s.local, b"", INTERNAL, {5: [MERGE_REQ, [low.uid, 1]]}, low))
    [rsp] = sent(s, MERGE_RSP)
    assert hdr(rsp) == [MERGE_RSP, [low.uid, 1], False, None]


def test_merges_held_neither_lead_nor_take_part_and_announce_nothing():
    """``Gms.hold_merges``: the member actor's fence keeps an excluded member out while it
    asks Ray about its node; released, it merges as before."""
    from raygroups.stack.events import HoldMerges
    s = coordinator()
    s.gms.hold_merges(True)
    assert s.below.events_of(HoldMerges) == [HoldMerges(True)]  # MERGE stops its INFOs
    for _ in range(2):
        s.gms.up_event(MergeInfo(HIGH, HIGH, 4, True))
    s.advance(1.0)  # merge_check_s
    assert s.gms.stats["merges_started"] == 0 and not sent(s, START_FLUSH)
    low = s.ctx.book.add(Address(b"\x00" * 16, "L"))
    s.up(Message(s.local, b"", INTERNAL, {5: [MERGE_REQ, [low.uid, 1]]}, low))
    [rsp] = sent(s, MERGE_RSP)
    assert hdr(rsp)[2] is False and not s.gms.merger.busy
    s.gms.hold_merges(False)
    for _ in range(2):
        s.gms.up_event(MergeInfo(HIGH, HIGH, 4, True))
    s.advance(1.0)
    assert s.gms.stats["merges_started"] == 1


def test_a_merge_nobody_answered_is_cancelled_and_sending_resumes():
    s = merge_leader()
    run_flush(s)
    assert writable(s)[-1] is False
    s.advance(3.01)  # merge_timeout_s
    assert s.gms.stats["merges_cancelled"] == 1
    assert writable(s)[-1] is True and not s.gms.busy
    assert [m for m in sent(s, VIEW) if m.dest is None] == []


def test_a_subgroup_flush_that_times_out_abandons_the_merge():
    s = merge_leader()
    fid = hdr(sent(s, START_FLUSH)[0])[1]
    s.up(flush_ok(s, s.b, fid))  # C is silent
    s.advance(1.005)
    assert s.gms.stats["merges_abandoned"] == 1 and s.gms.suspects == {s.c}
    assert sent(s, MERGE_REQ) == [] and not s.gms.merger.busy
    s.advance(0.02)  # the silent member is excluded first
    [start] = [m for m in sent(s, START_FLUSH) if hdr(m)[1] != fid]
    assert start.dest == s.b and hdr(start)[2] == [s.c.uid]


def test_a_merge_waits_while_members_are_suspected():
    s = coordinator()
    s.gms.up_event(MemberDead(s.c))
    s.advance(0.01)
    run_flush(s)
    loopback(s)  # view 3 {me, B}: waiting for B's ack
    for _ in range(2):
        s.gms.up_event(MergeInfo(HIGH, HIGH, 4, True))
    s.advance(1.0)
    assert s.gms.stats["merges_started"] == 0  # a view change is still in flight


def test_a_round_overtaken_by_another_coordinators_newer_view_starts_over_on_that_view():
    """B takes over from a suspected A and flushes view 5; A's view 6 (its own flush of 5,
    which B had answered) arrives meanwhile. B's cut was taken in view 5, and view 6 thaws
    what B's FLUSH_OK froze: B may deliver more of A's messages in 6 than the cut holds. A
    view built on that cut moved B and C having delivered different messages in 6 (seed
    14301933 of the consistency campaign). The round starts over on view 6."""
    s = member()
    s.gms.up_event(MemberDead(s.a))
    s.advance(0.01)
    [start] = sent(s, START_FLUSH)
    old = hdr(start)[1]
    assert start.dest == s.c and hdr(start)[3] == [s.a.uid, 5]
    s.below.take()
    s.up(view_msg(s, View(ViewId(s.a, 6), (s.a, s.local, s.c)), s.a))
    assert views(s)[-1].view_id == ViewId(s.a, 6)
    assert s.gms.stats["flush_restarts"] == 1
    s.up(flush_ok(s, s.c, old), flush_done(s, s.c, old))  # the overtaken round's: ignored
    assert sent(s, VIEW) == []
    s.advance(0.01)
    [again] = sent(s, START_FLUSH)
    assert hdr(again)[1] != old and hdr(again)[3] == [s.a.uid, 6] and hdr(again)[2] == [s.a.uid]
    run_flush(s)
    [v] = [m for m in sent(s, VIEW) if m.dest is None]
    assert [uid for uid, _ in hdr(v)[1][2]] == [s.local.uid, s.c.uid] and hdr(v)[1][1] == 7


def test_a_subgroup_cut_a_member_held_from_an_older_view_is_not_stable_at_the_merge():
    """B answered our subgroup's flush from the view before ours (our VIEW had not reached
    it): it has no window for the members our view added and held their part of the cut
    only vacuously, so the MergeView must not let NAKACK purge that part at install (seed
    15801942: a member still fetching it after the install found it gone for good)."""
    s = coordinator()
    low = s.ctx.book.add(Address(b"\x00" * 16, "L"))
    mid = [low.uid, 3]
    s.up(Message(s.local, b"", INTERNAL, {5: [MERGE_REQ, mid]}, low))
    older = View(ViewId(s.local, s.gms.view.view_id.id - 1), (s.local, s.b))
    run_flush(s, views={s.b: older})
    assert sent(s, MERGE_RSP)
    vl = View(ViewId(low, 8), (low,))
    mv = MergeView(ViewId(low, 9), (low, s.local, s.b, s.c), subgroups=(vl, s.gms.view))
    s.up(Message(s.local, b"", INTERNAL, {5: [INSTALL_MERGE, mid, view_to_wire(mv),
                                              [view_to_wire(vl), view_to_wire(s.gms.view)],
                                              [[low.uid, 1]], []]}, low))
    [v] = [m for m in sent(s, VIEW) if m.dest is None]
    assert hdr(v)[5] is False
