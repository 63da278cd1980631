"""Gossip membership mode (seed 004, Serf-like): SWIM's own list is the membership. Members
join through any member, a crashed member is removed everywhere, a leaver's UNSUBSCRIPTION
becomes REMOVE everywhere, and the lists converge to the same members."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.sim import Simulation, SimOptions

GOSSIP = StackConfig.local(membership="gossip")


def converged(members):
    """Every live member lists exactly the live members. A member whose leave was confirmed
    is not live, though its stack stops only after the event that confirmed it (seed
    16610007: the leave was confirmed as the crash was seen everywhere, and the lists that
    still held the leaver counted as converged)."""
    live = [m for m in members if m.alive and m.left is None]
    want = {m.address.uid for m in live}
    return all(m.view is not None and {a.uid for a in m.view.members} == want for m in live)


def form(sim, n, cfg):
    """``n`` members started 0-50 ms apart; once every one lists all of them."""
    members = [sim.add_member("g", "n0", cfg)]
    sim.run_until(lambda: members[0].view is not None, 5, "first member")
    for i in range(1, n):
        sim.run_for(sim.rng.uniform(0, 0.05))
        members.append(sim.add_member("g", f"n{i}", cfg))
    sim.run_until(lambda: converged(members), 30, f"{n} members converge")
    return members


@pytest.mark.seeds(50)
@pytest.mark.regressions(16610007,  # the oracle took a confirmed leaver for a live member
                         16720715)  # and so did its last check, before the leaver stopped
def test_gossip_join_crash_leave(sim_seed):
    sim = Simulation(sim_seed, SimOptions(loss=0.05, delay_s=(0.0005, 0.003)))
    members = form(sim, sim.rng.randint(8, 20), GOSSIP)
    victim, leaver = sim.rng.sample(members[1:], 2)
    sim.crash(victim)
    leaver.leave()
    sim.run_until(lambda: leaver.left is not None, 10, "leaver confirmed")
    sim.run_until(lambda: converged(members), 30, "crash and leave seen by all")
    for m in members:
        if m.alive:
            assert m.stack.errors == 0
            if m.left is None:  # (a confirmed leaver keeps its last view until it stops)
                assert victim.address not in m.view and leaver.address not in m.view
    assert leaver.left.reason == "left"
