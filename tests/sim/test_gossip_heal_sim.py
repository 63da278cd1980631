"""Gossip membership heals after any partition: the weakness of memberlist and Serf
(hashicorp/memberlist#222, serf#605), where each side's tombstones drop the other side's
announcements at the incarnation it was buried with, so that the sides never list each
other again. Here a member tells a member it holds dead that it was declared dead (about
once per reconnect interval for the remembered dead, and whenever one of them sends it
anything); the member refutes with a higher incarnation, which wins over the tombstones.

Each seed forms a group of 6-12 members, splits it into halves, thirds, or two sides joined
by a bridge (members that reach both), holds the split 10-120 s (simulated; at least until
each side sees it), sometimes crashes a member meanwhile, then heals it: every live member
must list every live member within HEAL_S of the heal, and still at HEAL_S; from then on,
for FLAP_WINDOW_S, no live member is declared dead again (before HEAL_S, a suspicion taken
up during the split may still expire, e.g. across a bridge, where refutations travel by
gossip alone: its member is told and comes back). Discovery is varied so that each way to
heal is also tried alone: IP multicast (announcements reach everyone, and the reconnect
round runs), the discovery store without the reconnect round (its rendezvous makes the
coordinators announce to each other), and the reconnect round alone (static hosts, no IP
multicast, no announcements)."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.sim import Simulation, SimOptions

from .test_gossip_sim import converged, form

SPLITS = ("halves", "thirds", "bridge")
DISCOVERY = {
    # IP multicast: announcements reach everyone, and the reconnect round runs
    "multicast": {},
    # the discovery store alone: its rendezvous makes the sides' coordinators announce to
    # each other, and the answers to those announcements heal (no reconnect round)
    "store": dict(discovery="memory://heal", swim__reconnect_interval_s=0),
    # the reconnect round alone: no IP multicast, one static host, and no announcements
    "static": dict(transport__ip_multicast=False, initial_hosts=[("10.0.0.0", 7800)],
                   swim__announce_interval_s=1e9),
}
HEAL_S = 15.0
"""Every live member lists every live member this long after the heal, at the latest. The
protocol's bound at 12 members and StackConfig.local's timers (probe 0.2 s, reconnect 1 s):
within 1.5 s a member of one side tells a member X of another that it was declared dead (each
member tries one remembered dead member every 0.5-1.5 s, with probability dead / live, about
1 here); X's refutation is gossiped through the teller's side within log2(2N)+1 = 5 rounds
(1 s); each member there probes X within two of its probe cycles (2N rounds, 4.8 s) and is
told of its own death by X in turn, whose side hears of its refutation within 1 s more:
about 8.5 s. Seeds 16,100,000-16,100,199 needed 2.4 s at most, 200 fresh ones after them
(16,200,000-16,200,199) 1.5 s."""
FLAP_WINDOW_S = 30.0
SEEN_S = 20.0
"""Each side lists only its own live members this long after the split, at the latest (a
split held shorter is held until then). At 12 members in thirds, two thirds of each
member's indirect-probe helpers are across the split and send no nack, so Lifeguard's local
health climbs towards its ceiling and slows probing up to 9 times: seeds 900,000,000-
900,000,059 took 11.5 s at most (halves 7 s), and seeds 15,620,017 and 15,620,059, held
15 and 11 s, were healed a moment before every member saw the split."""


def split_seen(sides) -> bool:
    return all(set(m.view.members) == {x.address for x in side if x.alive}
               for side in sides for m in side if m.alive)


def split(sim, kind, members):
    """Partition ``members``; the sides that declare each other dead (a bridge member
    reaches both sides, so it is on no side)."""
    order = list(members)
    sim.rng.shuffle(order)
    n = len(order)
    if kind == "halves":
        sides = [order[:n // 2], order[n // 2:]]
        sim.partition(*sides)
    elif kind == "thirds":
        sides = [order[:n // 3], order[n // 3:2 * n // 3], order[2 * n // 3:]]
        sim.partition(*sides)
    else:
        bridge = sim.rng.randint(1, 2)
        rest = order[bridge:]
        sides = [rest[:len(rest) // 2], rest[len(rest) // 2:]]
        for a in sides[0]:
            for b in sides[1]:
                sim.cut(a, b)
    return sides


def deaths(members):
    return sum(m.stack.layer("swim").stats["dead"] for m in members if m.alive)


@pytest.mark.seeds(9)  # each split with each discovery once
# 16100004, 16100013: the store's rendezvous never probed the other side's coordinator again
# (its file deleted as stale, then written again unchanged); 16100153: a suspicion taken up
# across a bridge expired just after the heal (the test now allows it before HEAL_S)
# 15620017, 15620059: a thirds split held 15 and 11 s, healed before every member saw it
@pytest.mark.regressions(16100004, 16100013, 16100153, 15620017, 15620059)
def test_every_member_lists_every_live_member_soon_after_a_partition_heals(sim_seed):
    sim = Simulation(sim_seed, SimOptions(loss=0.01, delay_s=(0.0005, 0.003),
                                          clock_skew_s=0.05))
    kind = SPLITS[sim_seed % len(SPLITS)]
    discovery = tuple(DISCOVERY)[sim_seed // len(SPLITS) % len(DISCOVERY)]
    cfg = StackConfig.local(membership="gossip", **DISCOVERY[discovery])
    members = form(sim, sim.rng.randint(6, 12), cfg)
    if discovery == "static":
        assert members[0].local_phys == ("10.0.0.0", 7800)  # the one listed host
    sides = split(sim, kind, members)
    hold = sim.rng.uniform(10, 120)
    crashed = sim.rng.choice(members) if sim.rng.random() < 1 / 3 else None
    if crashed is not None:  # in the first half: its side has removed it by the heal
        before = sim.rng.uniform(0, hold / 2)
        sim.run_for(before)
        sim.crash(crashed)
        sim.run_for(hold - before)
    else:
        sim.run_for(hold)
    if kind != "bridge":  # the split took: each side lists its own live members only
        sim.run_until(lambda: split_seen(sides), max(SEEN_S - hold, 0.0),
                      f"{kind} split of {len(members)} seen within {SEEN_S:.0f} s")
    sim.heal()
    healed_at = sim.now
    sim.run_until(lambda: converged(members), HEAL_S,
                  f"{kind} split ({discovery} discovery, {len(members)} members, held "
                  f"{hold:.0f} s) healed: every member lists every live member")
    sim.run_for(healed_at + HEAL_S - sim.now)
    assert converged(members), f"lists apart again {HEAL_S} s after the heal"
    dead_before = deaths(members)
    sim.run_for(FLAP_WINDOW_S)
    assert deaths(members) == dead_before, "a live member was declared dead after the heal"
    assert converged(members)
    for m in members:
        if m.alive:
            assert m.stack.errors == 0
            if crashed is not None:
                assert crashed.address not in m.view
