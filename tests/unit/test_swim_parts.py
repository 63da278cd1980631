"""The parts of SWIM (stack/swim.py) one at a time, in a sandwich with a manual clock: the
indirect probe, refutation by incarnation, Lifeguard's local health and its shrinking
suspicion timeout, the bounded rumor cache, and the gossip design's time-frame sync. Each
test fails when its mechanism is taken out of the layer (each was run once against such a
mutation; the note on the issue lists them)."""
from raygroups.stack.events import GetPhysical, MemberDead, Suspect, Unsuspect, ViewInstalled
from raygroups.stack.message import CONTROL, Message
from raygroups.stack.swim import (ACK, ALIVE, NACK, PING, PING_REQ, RUMORS, SUSPECT, Swim,
                                  SwimConfig)
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
    s.up(Message(s.local, b"", CONTROL, {7: [typ, seq, *rest, [list(r) for r in rumors]]},
                 sender=sender))


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


def test_the_received_rumor_cache_stays_at_its_configured_size():
    s, (a, b, c, d) = swim(rumor_cache=10)
    for inc in range(1, 40):
        from_(s, a, RUMORS, 0, rumors=[(ALIVE, b.uid, inc, None, 3)])
    assert len(s.layer.seen) <= 10
    assert len(s.layer.crumors) == len(s.layer.ctimes) <= 20


def test_a_ping_whose_time_frame_holds_fewer_rumors_is_answered_with_the_frame():
    """The gossip design's anti-entropy: a PING carries (age from, age to, rumors it holds
    received in that frame); a member holding more answers with its rumors of the frame, in
    the order it received them; one holding no more says nothing."""
    s, (a, b, c, d) = swim()
    for inc in range(1, 6):  # five rumors, received 0.01 s apart
        from_(s, a, RUMORS, 0, rumors=[(ALIVE, c.uid, inc, None, 3)])
        s.advance(0.01)
    from_(s, a, RUMORS, 0, rumors=[(ALIVE, d.uid, 1, None, 3)])  # later: outside the frame
    s.advance(0.5)
    lo, hi = 0.505, 0.56  # ages (seconds ago) of the five, not of the later one (0.5)
    s.below.take()
    from_(s, b, PING, 7, [lo, hi, 5])                         # b holds as many: no answer
    assert [m.dest for m in sent(s, RUMORS)] == []
    from_(s, b, PING, 8, [lo, hi, 2])                         # b holds fewer
    [answer] = sent(s, RUMORS)
    assert answer.dest == b
    got = [(r[0], r[1], r[2]) for r in answer.headers[7][-1]]
    assert got == [(ALIVE, c.uid, inc) for inc in range(1, 6)]
    assert s.layer.stats["sync_answers"] == 1
