"""The parts of SWIM (stack/swim.py) one at a time, in a sandwich with a manual clock: the
indirect probe, refutation by incarnation, Lifeguard's local health and its shrinking
suspicion timeout, the choice of helpers among members heard from recently, the bounded
rumor cache, and the gossip design's time-frame sync. Each
test fails when its mechanism is taken out of the layer (each was run once against such a
mutation; the note on the issue lists them)."""
from raygroups.stack.events import GetPhysical, MemberDead, Suspect, Unsuspect, ViewInstalled
from raygroups.stack.message import CONTROL, Message
from raygroups.stack.swim import (ACK, ALIVE, NACK, PING, PING_REQ, RUMORS, SUSPECT,
                                  SUSPECT_S, Swim, SwimConfig)
from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich

INTERVAL = 1.0


def swim(n_others=4, **cfg):
    s = Sandwich(Swim(SwimConfig(**{"probe_interval_s": INTERVAL, **cfg})),
                 answers={GetPhysical: ("10.0.0.1", 7800)})
    others = [s.addr(f"m{i}") for i in range(n_others)]
    s.down_event(ViewInstalled(View(ViewId(s.local, 1), (s.local, *others))))
    s.below.take()
    return s, others


def from_(s, sender, typ, seq, *rest, rumors=()):
    """A message from ``sender``; rumors (kind, uid, incarnation, extra, rounds left) without
    a creation time are created now."""
    rumors = [list(r) if len(r) == 6 else [*r, s.host.wall()] for r in rumors]
    s.up(Message(s.local, b"", CONTROL, {7: [typ, seq, *rest, rumors]}, sender=sender))


def sent(s, typ):
    return [m for m in s.below.sent if m.headers[7][0] == typ]


def next_ping(s, limit=30.0):
    """Advance until this member sends a probe's PING; (its time, target, seq)."""
    t0 = s.host.clock
    while s.host.clock - t0 < limit:
        s.advance(0.005)
        pings = [m for m in sent(s, PING) if m.headers[7][1]]  # (seq 0: a suspect's ping)
        if pings:
            m = pings[-1]
            s.below.take()
            return s.host.clock, m.dest, m.headers[7][1]
    raise AssertionError("no probe within the limit")


def test_an_unanswered_probe_asks_k_others_and_their_ack_saves_the_target():
    s, others = swim(indirect_probes=2)
    _, target, seq = next_ping(s)
    s.advance(SwimConfig().probe_timeout_s + 0.001)           # no direct ack
    asked = sent(s, PING_REQ)
    assert len(asked) == 2 and target not in {m.dest for m in asked}
    assert all(m.headers[7][1] == seq and m.headers[7][2] == target.uid for m in asked)
    from_(s, asked[0].dest, ACK, seq)                           # the target answered them
    s.advance(INTERVAL)  # past this probe's final timeout
    assert s.layer.stats["indirect_acks"] == 1
    assert Suspect(target) not in s.above.events_of(Suspect)


def test_a_probe_nobody_answers_raises_a_suspicion_told_to_the_suspect():
    s, others = swim(indirect_probes=2)
    _, target, seq = next_ping(s)
    s.advance(INTERVAL)
    assert s.above.events_of(Suspect) == [Suspect(target)]
    told = [m for m in sent(s, RUMORS) if m.dest == target]
    assert any(r[0] == SUSPECT and r[1] == target.uid for m in told for r in m.headers[7][-1])


def test_a_suspicion_is_refuted_by_a_higher_incarnation_only():
    s, (a, b, c, d) = swim(probe_interval_s=1000.0)  # no probing of our own meanwhile
    from_(s, a, RUMORS, 0, rumors=[(SUSPECT, c.uid, 0, a.uid, 3)])
    assert s.above.events_of(Suspect) == [Suspect(c)]
    from_(s, c, RUMORS, 0, rumors=[(ALIVE, c.uid, 0, None, 3)])  # the same incarnation
    assert not s.above.events_of(Unsuspect)
    from_(s, c, RUMORS, 0, rumors=[(ALIVE, c.uid, 1, None, 3)])
    assert s.above.events_of(Unsuspect) == [Unsuspect(c)]
    s.advance(10.0)  # beyond the longest suspicion timeout
    assert not s.above.events_of(MemberDead)


def test_a_probe_the_helpers_do_not_answer_lowers_this_members_health_and_nacks_do_not():
    """Lifeguard's local health: when neither the target nor the helpers answer (a NACK
    would show the helpers at least were reachable), this member may be the slow one."""
    for nack, health in ((False, 1), (True, 0)):
        s, others = swim(indirect_probes=2, suspicion_min_s=100.0)
        _, target, seq = next_ping(s)
        s.advance(SwimConfig().probe_timeout_s + 0.001)
        if nack:
            for m in sent(s, PING_REQ):
                from_(s, m.dest, NACK, seq)
        s.advance(INTERVAL - SwimConfig().probe_timeout_s)  # the final timeout
        assert s.layer.health == health


def test_indirect_probes_ask_members_heard_from_recently_when_there_are_k():
    """Behind a split, members of the far side answer nothing: helpers are chosen among
    the members heard from within ``helpers_heard_within_rounds`` intervals, so that a
    missing NACK still says something about this member's own health."""
    s, others = swim(n_others=20, indirect_probes=2, suspicion_min_s=100.0)
    _, target, seq = next_ping(s)
    heard = [a for a in others if a != target][:3]
    for a in heard:
        from_(s, a, RUMORS, 0)
    s.advance(SwimConfig().probe_timeout_s + 0.001)
    asked = {m.dest for m in sent(s, PING_REQ)}
    assert len(asked) == 2 and asked <= set(heard), (asked, heard)
    for h in asked:
        from_(s, h, NACK, seq)
    s.advance(INTERVAL - SwimConfig().probe_timeout_s)  # the final timeout
    assert s.layer.health == 0
    s.advance(5 * INTERVAL)  # nobody heard from since: any live member helps
    s.below.take()
    _, target, seq = next_ping(s)
    s.advance(SwimConfig().probe_timeout_s * (1 + s.layer.health) + 0.001)
    asked = {m.dest for m in sent(s, PING_REQ)}
    assert len(asked) == 2 and not asked <= set(heard), asked


def gaps(s, n):
    times = [next_ping(s)[0] for _ in range(n + 1)]
    return [round(b - a, 2) for a, b in zip(times, times[1:])]


def test_local_health_stretches_the_probe_interval_and_acks_bring_it_back():
    s, (a, b, c, d) = swim(indirect_probes=0, suspicion_min_s=100.0)
    assert gaps(s, 2) == [INTERVAL, INTERVAL]
    for inc in (0, 1):  # two suspicions of us refuted: health 2 (Lifeguard counts them)
        from_(s, a, RUMORS, 0, rumors=[(SUSPECT, s.local.uid, inc, a.uid, 3)])
    assert s.layer.health == 2
    assert gaps(s, 3)[1:] == [3 * INTERVAL, 3 * INTERVAL]  # (the next round was scheduled)
    for _ in range(2):
        _, target, seq = next_ping(s)
        from_(s, target, ACK, seq)                          # direct acks: health back down
    assert s.layer.health == 0
    assert gaps(s, 3)[1:] == [INTERVAL, INTERVAL]


def death_after(confirmers):
    """Seconds from a suspicion of m0 (by each of ``confirmers``, at once) to its verdict."""
    s, others = swim(n_others=5, suspicion_min_s=0.5, suspicion_confirmations=3,
                     probe_interval_s=1000.0)
    victim = others[0]
    start = s.host.clock
    for k in confirmers:
        from_(s, others[k], RUMORS, 0, rumors=[(SUSPECT, victim.uid, 0, others[k].uid, 3)])
    while not s.above.events_of(MemberDead):
        s.advance(0.01)
        assert s.host.clock - start < 10, "no verdict"
    return s.host.clock - start


def test_the_suspicion_timeout_shrinks_with_independent_confirmations():
    """From 3x the minimum for one suspecter down to the minimum with 3 confirmations
    (Lifeguard, scaled by log N)."""
    alone, two, all_ = death_after([1]), death_after([1, 2]), death_after([1, 2, 3, 4])
    assert abs(alone - 1.5) < 0.02 and abs(all_ - 0.5) < 0.02
    assert all_ < two < alone


def test_confirmations_stop_at_k_and_none_of_our_own_follows():
    """memberlist's cap: once a suspicion has its suspecter and k = 3 independent
    confirmations (its timeout at the minimum), a fifth suspecter's rumor is neither counted
    nor spread, and our own failed probe of the suspect confirms nothing: O(k) rumors per
    suspicion instead of one from every member."""
    s, others = swim(n_others=7, indirect_probes=0, suspicion_min_s=100.0)
    victim, suspecters = others[0], others[1:6]
    for a in suspecters:
        from_(s, a, RUMORS, 0, rumors=[(SUSPECT, victim.uid, 0, a.uid, 3)])
    assert s.layer.nodes[victim].confirm == {a.uid for a in suspecters[:4]}
    assert s.layer.stats["confirmations_beyond_cap"] == 1
    spreading = {k[3] for k in s.layer.queue if k[0] == SUSPECT}
    assert spreading == {a.uid for a in suspecters[:4]}
    _, target, seq = next_ping(s)  # the suspect is probed next, and nobody answers
    assert target == victim
    s.advance(INTERVAL)
    assert s.layer.stats["confirmations"] == 0
    assert s.local.uid not in {k[3] for k in s.layer.queue if k[0] == SUSPECT}


def test_every_member_of_a_view_verifies_a_suspicion_at_once_however_large():
    """Views mode: a member that hears a suspicion probes the suspect next, in a view of any
    size (it pings every suspect each round until a view drops it, so a confirmation that
    came later would cost more pings than the rumors it saves; gossip mode draws about
    ``suspicion_verifiers`` verifiers instead: test_swim_gossip.py)."""
    s, others = swim(n_others=400)
    heard = others[1:301]
    for i in range(0, len(heard), 16):
        from_(s, others[0], RUMORS, 0,
              rumors=[(SUSPECT, a.uid, 0, others[0].uid, 3) for a in heard[i:i + 16]])
    assert all(s.layer.nodes[a].state == SUSPECT_S for a in heard)
    assert s.layer.order == heard  # (no round yet: nothing else is in the order)


def test_the_received_rumor_log_stays_within_twice_its_configured_size():
    s, (a, b, c, d) = swim(rumor_cache=10)
    for inc in range(1, 40):
        from_(s, a, RUMORS, 0, rumors=[(ALIVE, b.uid, inc, None, 3)])
    assert len(s.layer.seen) <= 10
    assert 10 <= len(s.layer.log) <= 20


def frame_answer(s, asker, start, end, count):
    """What a PING from ``asker`` offering (start, end, count) gets back: the rumors of each
    answer message, as (kind, incarnation, creation time)."""
    s.below.take()
    from_(s, asker, PING, 9, [start, end, count])
    return [[(r[0], r[2], r[5]) for r in m.headers[7][-1]] for m in sent(s, RUMORS)
            if m.dest == asker]


def test_a_frame_is_counted_and_answered_by_the_rumors_creation_times_not_their_arrival():
    """The gossip design's anti-entropy files rumors by the time their creator made them:
    a PING offers (start, end, how many rumors created in [start, end] its sender holds);
    a member holding more answers with every one, in creation order, whatever order and
    however late they reached it; one holding no more says nothing."""
    s, (a, b, c, d) = swim(probe_interval_s=1000.0)  # no rounds of our own meanwhile
    w = s.host.wall()
    created = [w - 9.6, w - 9.9, w - 9.7, w - 9.8, w - 9.65]  # in the frame, out of order
    from_(s, a, RUMORS, 0, rumors=[(ALIVE, d.uid, 1, None, 3, w - 5.0)])  # after the frame
    for inc, t in enumerate(created, start=1):
        s.advance(1.0)  # each arrives a second after the one before
        from_(s, a, RUMORS, 0, rumors=[(ALIVE, c.uid, inc, None, 3, t)])
    from_(s, a, RUMORS, 0, rumors=[(ALIVE, d.uid, 2, None, 3, w - 12.0)])  # before it
    start, end = w - 10.0, w - 9.5
    assert frame_answer(s, b, start, end, 5) == []            # b holds as many: no answer
    [answer] = frame_answer(s, b, start, end, 2)               # b holds fewer
    assert answer == sorted(((ALIVE, inc, t) for inc, t in enumerate(created, start=1)),
                            key=lambda r: r[2])
    assert s.layer.stats["sync_answers"] == 1


def test_a_frame_holding_more_than_a_page_is_answered_completely_in_pages():
    """Every rumor of the frame goes back, ``sync_page`` at most per message."""
    s, (a, b, c, d) = swim(probe_interval_s=1000.0, sync_page=200)
    w = s.host.wall()
    for inc in range(1, 451):
        from_(s, a, RUMORS, 0, rumors=[(ALIVE, c.uid, inc, None, 3, w - 10 + inc / 1000)])
    pages = frame_answer(s, b, w - 10.0, w - 9.0, 0)
    assert [len(p) for p in pages] == [200, 200, 50]
    assert [r[1] for p in pages for r in p] == list(range(1, 451))
    assert s.layer.stats["sync_pages"] == 3


def test_a_frame_far_longer_than_ours_is_cut_to_twice_ours():
    """The answer stays bounded whatever a peer asks: frames are 4 probe intervals here."""
    s, (a, b, c, d) = swim(probe_interval_s=1000.0)
    w = s.host.wall()
    from_(s, a, RUMORS, 0, rumors=[(ALIVE, c.uid, 1, None, 3, w - 9000.0)])
    from_(s, a, RUMORS, 0, rumors=[(ALIVE, c.uid, 2, None, 3, w - 10.0)])
    [answer] = frame_answer(s, b, w - 100_000.0, w - 9.0, 0)
    assert [r[1] for r in answer] == [2]  # [w - 8009, w - 9]: not the rumor of w - 9000
    assert s.layer.stats["sync_frames_cut"] == 1


def test_a_ping_offers_the_frame_that_ended_log2_2n_plus_1_rounds_ago_by_the_wall_clock():
    """The frame a member asks about ends when rumors created then have finished travelling
    (log2(2N)+1 rounds), is 4 rounds long (the gossip design), and is read off the wall
    clock, the one clock whose readings mean the same at the other members."""
    s, (a, b, c, d) = swim()
    w = s.host.wall()
    rounds = s.layer._rounds()  # 5 members: 4
    for inc, age in enumerate((rounds + 3.5, rounds + 0.5, rounds + 6, rounds - 1), start=1):
        from_(s, a, RUMORS, 0, rumors=[(ALIVE, c.uid, inc, None, 3, w - age * INTERVAL)])
    s.advance(0.005)
    while not sent(s, PING):  # the first probe, within the first round
        s.advance(0.005)
    [ping] = sent(s, PING)
    start, end, count = ping.headers[7][2]
    assert abs(end - (s.host.wall() - rounds * INTERVAL)) < 0.006  # (sent in the last step)
    assert abs(start - (end - 4 * INTERVAL)) < 1e-9
    assert count == 2  # the two created 0.5 and 3.5 rounds before the frame's end


def test_a_rumor_passed_on_keeps_its_creators_time_and_our_own_carry_our_wall_clock():
    """a's suspicion of c, made half a second ago, goes on with a's time; ours of c (the
    suspect is probed next, and nobody answers) with the time we made it."""
    s, (a, b, c, d) = swim(indirect_probes=0)
    w = s.host.wall()
    from_(s, a, RUMORS, 0, rumors=[(SUSPECT, c.uid, 0, a.uid, 3, w - 0.5)])
    _, target, seq = next_ping(s)
    assert target == c
    suspected_at = s.host.wall() + INTERVAL  # the probe's final timeout (no helpers)
    s.advance(INTERVAL)
    carried = {r[3]: r[5] for m in s.below.sent for r in m.headers[7][-1]
               if r[0] == SUSPECT and r[1] == c.uid}
    assert carried[a.uid] == w - 0.5
    assert abs(carried[s.local.uid] - suspected_at) < 0.01


def test_a_rumor_made_twice_is_filed_under_its_earliest_creation_time():
    """Two members both making one rumor (two suspicion timeouts declaring one member dead)
    give it two creation times; every holder keeps the earliest it has seen, so that holders
    count it in the same frame."""
    s, (a, b, c, d) = swim(probe_interval_s=1000.0)
    w = s.host.wall()
    from_(s, a, RUMORS, 0, rumors=[(SUSPECT, c.uid, 0, a.uid, 3, w - 9.6)])
    from_(s, b, RUMORS, 0, rumors=[(SUSPECT, c.uid, 0, a.uid, 3, w - 9.9)])
    assert s.layer.log.count(w - 10.0, w - 9.8) == 1
    assert s.layer.log.count(w - 9.7, w - 9.5) == 0
    assert len(s.layer.log) == 1
