"""SWIM (stack/swim.py) in a sandwich: refutation of suspicions about the local member."""
from raygroups.stack.events import GetPhysical, MemberDead, Suspect, Unsuspect, ViewInstalled
from raygroups.stack.message import CONTROL, Message
from raygroups.stack.swim import ALIVE, PING, REMOVE, RUMORS, SUSPECT, Swim, SwimConfig
from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich


def swim_in_view(names=("a", "b")):
    s = Sandwich(Swim(SwimConfig(probe_interval_s=10.0)),
                 answers={GetPhysical: ("10.0.0.1", 7800)})
    others = [s.addr(n) for n in names]
    s.down_event(ViewInstalled(View(ViewId(s.local, 1), (s.local, *others))))
    s.below.take()
    return s, others


def rumors_from(s, sender, *rumors):
    """Rumors (kind, uid, incarnation, extra, rounds left) from ``sender``, created now."""
    s.up(Message(s.local, b"", CONTROL, {7: [RUMORS, 0, [[*r, s.host.wall()] for r in rumors]]},
                 sender=sender))


def alive_rumors(msgs, uid):
    return [r for m in msgs for r in m.headers[7][-1] if r[0] == ALIVE and r[1] == uid]


def test_a_suspicion_at_our_incarnation_is_refuted_with_a_higher_one():
    s, (a, b) = swim_in_view()
    rumors_from(s, a, (SUSPECT, s.local.uid, 0, a.uid, 3))
    assert s.layer.inc == 1
    assert [r[2] for r in alive_rumors(s.below.take(), s.local.uid)] == [1]


def test_a_stale_suspicion_is_answered_to_its_sender_with_our_current_incarnation():
    """A member that held us at an older incarnation (it left our view and came back, or
    anti-entropy handed it an old rumor) suspects us at that incarnation: it needs our
    current one, or its suspicion expires into a false exclusion. The answer goes to the
    sender alone and carries nothing else (two members each holding a stale suspicion of
    the other would otherwise bounce them back and forth), however often the rumor comes."""
    s, (a, b) = swim_in_view()
    rumors_from(s, a, (SUSPECT, s.local.uid, 0, a.uid, 3))
    s.below.take()
    assert s.layer.inc == 1
    for _ in range(2):  # the same stale rumor twice: answered both times
        rumors_from(s, b, (SUSPECT, s.local.uid, 0, a.uid, 3))
        out = s.below.take()
        assert [m.dest for m in out] == [b]
        assert out[0].headers[7] == [RUMORS, 0, [[ALIVE, s.local.uid, 1,
                                                  ["me", "10.0.0.1", 7800], s.layer._rounds(),
                                                  s.host.wall()]]]
    assert s.layer.inc == 1  # no new incarnation for a stale suspicion
    assert s.layer.stats["stale_suspicions_answered"] == 2


def test_a_refutation_heard_before_its_member_was_ours_still_clears_a_later_suspicion():
    """A joiner hears the group's rumors before its first view lists their members: member
    c's KEEP-ALIVE (incarnation 1) is cached as seen, then the view adds c at incarnation 0,
    then anti-entropy hands over the stale suspicion c refuted. When c's answer comes again
    it must clear the suspicion, or it expires into a false exclusion of a live member
    (the simulator's seed 15100480: a member excluded twice while it was never unreachable)."""
    s = Sandwich(Swim(SwimConfig(probe_interval_s=10.0)),
                 answers={GetPhysical: ("10.0.0.1", 7800)})
    a, c = s.addr("a"), s.addr("c")
    rumors_from(s, a, (ALIVE, c.uid, 1, None, 3))          # before c is ours: no effect
    s.down_event(ViewInstalled(View(ViewId(a, 3), (a, c, s.local))))
    rumors_from(s, a, (SUSPECT, c.uid, 0, a.uid, 3))        # the stale suspicion
    assert [type(e) for e in s.above.events_of(Suspect)] == [Suspect]
    rumors_from(s, c, (ALIVE, c.uid, 1, None, 3))           # c's answer, the same rumor
    assert s.above.events_of(Unsuspect) == [Unsuspect(c)]
    assert s.layer.nodes[c].inc == 1 and s.layer.stats["late_refutations"] == 1


def test_a_member_back_at_the_same_incarnation_has_its_next_suspicions_counted_again():
    """c hung, was suspected (by a, confirmed by b) and excluded; a merge view lists it
    again at the same incarnation (it was stopped: it refuted nothing). When it hangs again
    the same members suspect it with the same rumors: they must count again (Suspect, and
    the confirmation that shortens the suspicion), not be taken for the first hang's. Its
    refutation heard earlier stays remembered (see the test above)."""
    s, (a, b, c) = swim_in_view(("a", "b", "c"))
    rumors_from(s, a, (SUSPECT, c.uid, 0, a.uid, 3), (SUSPECT, c.uid, 0, b.uid, 3))
    assert len(s.above.events_of(Suspect)) == 1 and s.layer.nodes[c].confirm == {a.uid, b.uid}
    s.down_event(ViewInstalled(View(ViewId(s.local, 2), (s.local, a, b))))      # excluded
    s.down_event(ViewInstalled(View(ViewId(s.local, 3), (s.local, a, b, c))))   # merged back
    assert s.layer.nodes[c].inc == 0
    s.advance(1.0)  # the next hang: its rumors are made later
    rumors_from(s, a, (SUSPECT, c.uid, 0, a.uid, 3), (SUSPECT, c.uid, 0, b.uid, 3))
    assert len(s.above.events_of(Suspect)) == 2
    assert s.layer.nodes[c].confirm == {a.uid, b.uid}


def test_copies_of_a_merged_members_old_suspicions_and_removal_are_stale():
    """c hung, was suspected and removed, excluded, then merged back at the same incarnation.
    Copies of those rumors still travel (peers' queues): arriving after the merge, they
    are stale, dropped and counted, never a new suspicion, let alone a second exclusion of a
    live member (the stall campaign's seed 100911: re-learnt and spread again, a removal
    went round for 4 s after the merge and excluded the member again)."""
    s, (a, b, c) = swim_in_view(("a", "b", "c"))
    old = [[SUSPECT, c.uid, 0, a.uid, 3, s.host.wall()], [REMOVE, c.uid, 0, None, 3,
                                                           s.host.wall()]]
    s.up(Message(s.local, b"", CONTROL, {7: [RUMORS, 0, old]}, sender=a))
    assert s.above.events_of(MemberDead) == [MemberDead(c, "swim")]
    s.down_event(ViewInstalled(View(ViewId(s.local, 2), (s.local, a, b))))      # excluded
    s.down_event(ViewInstalled(View(ViewId(s.local, 3), (s.local, a, b, c))))   # merged back
    s.advance(1.0)
    s.up(Message(s.local, b"", CONTROL, {7: [RUMORS, 0, old]}, sender=b))       # the copies
    assert len(s.above.events_of(MemberDead)) == 1 and len(s.above.events_of(Suspect)) == 1
    assert s.layer.stats["stale_doubts_dropped"] == 2 and s.layer.nodes[c].state == 0
    rumors_from(s, b, (SUSPECT, c.uid, 0, b.uid, 3))   # a new hang, made now: counts
    assert len(s.above.events_of(Suspect)) == 2


def test_views_mode_pings_each_suspect_every_round_until_it_is_refuted():
    """Views mode: each round pings every member this one suspects (its ack refutes it
    sooner than gossip would), and no longer once it is refuted; the round finds them
    without a pass over every member."""
    s = Sandwich(Swim(SwimConfig(probe_interval_s=1.0, suspicion_min_s=100.0, max_health=0)),
                 answers={GetPhysical: ("10.0.0.1", 7800)})
    a, b, c = s.addr("a"), s.addr("b"), s.addr("c")
    s.down_event(ViewInstalled(View(ViewId(s.local, 1), (s.local, a, b, c))))

    def suspect_pings():
        return [m.dest for m in s.below.take()
                if m.headers.get(7, [None])[0] == PING and m.headers[7][1] == 0]

    rumors_from(s, b, (SUSPECT, a.uid, 0, b.uid, 3))
    assert a in s.layer.suspected
    for _ in range(3):
        s.advance(1.0)
        assert suspect_pings().count(a) == 1
    rumors_from(s, a, (ALIVE, a.uid, 1, None, 3))  # refuted
    for _ in range(3):  # (our own unanswered probes suspect the others meanwhile)
        s.advance(1.0)
        assert a not in suspect_pings() and a not in s.layer.suspected
