"""Simulator campaign for virtual synchrony, total order and the primary component
(seed 002): random crashes, partitions and heals with concurrent senders, half of them
asking for total order. Checked on every run: virtual synchrony, total order agreement, at
most one primary per primary view-id, view-id 0 outside a primary, nothing sent outside a
primary, the same recovery statuses at every member of each view; a 2+2 split of 4 gives no
primary and a 3/2 split keeps the 3 side primary. (Joins with state transfer, and the
recovery statuses they move: test_recovery_sim.py.)"""
import pytest

from raygroups.stack import NotPrimary, StackConfig
from raygroups.stack.sim import Simulation, SimOptions

from .history import History

N = 5
CFG = StackConfig.local(primary__expected_size=N)


def one_view(members):
    live = [m for m in members if m.alive]
    if any(m.view is None for m in live):
        return False
    uids = {m.address.uid for m in live}
    return len({m.view.view_id for m in live}) == 1 and \
        all({a.uid for a in m.view.members} == uids for m in live)


def start(sim, n=N, cfg=CFG):
    members = [sim.add_member("g", "m0", cfg)]
    sim.run_until(lambda: members[0].view is not None, 5, "founding")
    for i in range(1, n):
        sim.run_for(sim.rng.uniform(0, 0.01))
        members.append(sim.add_member("g", f"m{i}", cfg))
    sim.run_until(lambda: one_view(members) and all(m.view.primary for m in members), 30,
                  "a primary view of everyone")
    return members


def traffic(sim, h, members, seconds):
    for _ in range(int(seconds / 0.02)):
        for m in members:
            if sim.rng.random() < 0.3:
                h.send(m, ordered=sim.rng.random() < 0.5)
        sim.run_for(0.02)


@pytest.mark.seeds(200)
@pytest.mark.regressions(800133, 7000052,  # a sequencer ordered while a flush held its sends
                          13001479,  # two primaries: one side missed that a merge became primary
                          14001467,  # a VIEW's catch-up overtook multicasts behind it in a batch
                          14301933,  # a flush round went on after another's newer view thawed it
                          15801942,  # a merge's cut purged at install, held from an older view
                          16050852)  # next in line coordinated a view of its own, same counter
def test_virtual_synchrony_total_order_primary(sim_seed):
    sim = Simulation(sim_seed, SimOptions(loss=0.05, duplicate=0.02, reorder=0.05,
                                          delay_s=(0.0005, 0.003)), buggify=True)
    rng = sim.rng
    h = History(sim)
    members = start(sim)
    for _ in range(rng.randint(1, 3)):
        live = [m for m in members if m.alive]
        kind = rng.choice(["crash", "halves", "isolate"])
        if kind == "crash" and len(live) > 3:
            sim.crash(rng.choice(live))
        elif kind == "halves":
            rng.shuffle(live)
            sim.partition(live[:len(live) // 2], live[len(live) // 2:])
        else:
            lone = rng.choice(live)
            sim.partition([m for m in live if m is not lone], [lone])
        traffic(sim, h, members, rng.uniform(1.0, 3.0))
        sim.heal()
        traffic(sim, h, members, rng.uniform(0.2, 1.0))
    sim.run_until(lambda: one_view(members), 30, "one view after the last heal")
    h.check_group()


@pytest.mark.seeds(50)
def test_split_2_2_has_no_primary(sim_seed):
    sim = Simulation(sim_seed, buggify=True)
    cfg = StackConfig.local(primary__expected_size=4)
    a, b, c, d = start(sim, 4, cfg)
    sim.partition([a, b], [c, d])
    sim.run_until(lambda: len(a.view) == 2 and len(c.view) == 2, 30, "two halves")
    sim.run_for(1.0)
    for m in (a, b, c, d):
        assert not m.view.primary and m.view.primary_id == 0, (m.name, m.view)
        with pytest.raises(NotPrimary):
            m.send(b"x")
    sim.heal()
    sim.run_until(lambda: one_view([a, b, c, d]) and a.view.primary, 30, "merged primary")
    assert len({m.view.primary_id for m in (a, b, c, d)}) == 1


@pytest.mark.seeds(50)
def test_split_3_2_majority_stays_primary(sim_seed):
    sim = Simulation(sim_seed, buggify=True)
    h = History(sim)
    members = start(sim)
    maj, mino = members[:3], members[3:]
    sim.partition(maj, mino)
    sim.run_until(lambda: all(len(m.view) == 3 for m in maj) and
                  all(len(m.view) == 2 for m in mino) and maj[0].view.primary, 30, "split")
    before = maj[0].view.primary_id
    assert all(not m.view.primary and m.view.primary_id == 0 for m in mino)
    traffic(sim, h, members, 1.0)  # only the majority can send
    assert all(not m.writable for m in mino)
    sim.heal()
    sim.run_until(lambda: one_view(members) and all(m.view.primary for m in members), 30,
                  "one primary view after the heal")
    assert len({m.view.primary_id for m in members}) == 1
    assert members[0].view.primary_id > before
    h.check_primary()
    h.check_total_order()
    h.check_virtual_synchrony()
