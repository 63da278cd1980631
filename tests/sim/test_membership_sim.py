"""Simulator campaign for the foundation: 5% loss, duplication and reordering, concurrent
joins, traffic from every member, graceful leaves. Checks view agreement, FIFO, no
duplicates and no loss on every seed."""
import pytest

from raygroups.stack.sim import Simulation, SimOptions

from .history import History

LOSSY = SimOptions(loss=0.05, duplicate=0.05, reorder=0.05, delay_s=(0.0005, 0.005))


def agreed(members):
    views = {m.view.view_id for m in members if m.view is not None}
    return len(views) == 1 and all(m.view is not None and len(m.view) == len(members)
                                   for m in members)


@pytest.mark.seeds(200)
@pytest.mark.regressions(7200031)  # a late member was told it was not one
def test_joins_traffic_and_leaves(sim_seed):
    sim = Simulation(sim_seed, LOSSY, buggify=True)
    rng = sim.rng
    h = History(sim)
    founder = sim.add_member("orders", "A")
    sim.run_until(lambda: founder.view is not None, 5, "founding")
    members = [founder]
    # four concurrent joiners, while the founder sends
    for name in "BCDE":
        sim.run_for(rng.uniform(0, 0.02))
        members.append(sim.add_member("orders", name))
        h.send(founder)
    sim.run_until(lambda: agreed(members), 30, "5 members agree")
    # traffic from everyone, with two graceful leaves (one may be the coordinator) mid-stream
    leavers = rng.sample(members, 2)
    for step in range(60):
        for m in members:
            if rng.random() < 0.5:
                h.send(m)
        if step == 20:
            leavers[0].leave()
        if step == 35:
            leavers[1].leave()
        sim.run_for(rng.uniform(0.0, 0.01))
    survivors = [m for m in members if m not in leavers]
    sim.run_until(lambda: all(m.left for m in leavers) and agreed(survivors), 30, "leaves done")
    sim.run_until(lambda: all(len(m.delivered) >= sum(1 for s in h.sent if m.address.uid in s[2])
                              for m in survivors), 30, "all delivered")
    assert [m.left.reason for m in leavers] == ["left", "left"]
    h.check_all(survivors)
    # a view without the leavers, the same everywhere
    assert {a.uid for a in survivors[0].view.members} == {m.address.uid for m in survivors}


@pytest.mark.seeds(100)
def test_simultaneous_leaves_with_traffic(sim_seed):
    """Several members (maybe the coordinator, maybe everyone) leave at the same moment
    while all send: each leave completes (none waits for its timeout), and the members that
    stay agree and delivered everything, the leavers' last messages included."""
    sim = Simulation(sim_seed, LOSSY, buggify=True)
    rng = sim.rng
    h = History(sim)
    members = [sim.add_member("orders", "A")]
    sim.run_until(lambda: members[0].view is not None, 5, "founding")
    for name in "BCDE"[:rng.randint(2, 4)]:
        members.append(sim.add_member("orders", name))
        sim.run_until(lambda: agreed(members), 30, f"{name} joined")
    leavers = rng.sample(members, rng.randint(2, len(members)))
    print(f"seed {sim_seed}: {len(members)} members, {[m.name for m in leavers]} leave")
    for step in range(40):
        for m in members:
            if rng.random() < 0.5:
                h.send(m)
        if step == 20:
            for m in leavers:
                m.leave()
        sim.run_for(rng.uniform(0.0, 0.01))
    survivors = [m for m in members if m not in leavers]
    sim.run_until(lambda: all(m.left for m in leavers) and (not survivors or agreed(survivors)),
                  30, "leaves done")
    assert [m.left.reason for m in leavers] == ["left"] * len(leavers), sim_seed
    if survivors:
        sim.run_until(lambda: all(len(m.delivered) >= sum(1 for s in h.sent if m.address.uid in s[2])
                                  for m in survivors), 30, "all delivered")
        assert {a.uid for a in survivors[0].view.members} == {m.address.uid for m in survivors}
    h.check_all(survivors)
