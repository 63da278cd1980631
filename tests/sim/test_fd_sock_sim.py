"""FD_SOCK in the simulator (stack/fd_sock.py, the watch connections of stack/sim.py), LAN
preset timers: a crashed member's watch connection closes at once, so it is excluded
within 0.3 simulated seconds (SWIM's timers alone need a missed probe and a suspicion
timeout, 0.5-1.5 s) in views and gossip modes; a member whose watch connection a middlebox
resets while it stays reachable is never excluded (the verification reaches it); a member
that leaves is not suspected; one that vanishes behind a partition sends no close and is
left to SWIM's timers. Simulated time is deterministic, so the 0.3 s bounds are
asserted."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.sim import Simulation, SimOptions

from .test_failures_sim import one_view, start_group
from .test_gossip_sim import converged, form as gossip_form

LAN = StackConfig.lan()
GOSSIP_LAN = StackConfig.lan(membership="gossip")
DETECT_S = 0.3


def form(sim, n, cfg, agreed):
    """n members agreeing (views: one view; gossip: every list), every watch connection up."""
    members = start_group(sim, n, config=cfg) if agreed is one_view else gossip_form(sim, n, cfg)
    sim.run_for(1.0)
    return members


def watcher_of(members, victim):
    """The member whose FD_SOCK watches ``victim`` (connection established)."""
    w = [m for m in members if m.alive and m.stack.layer("fd_sock").watching == victim.address]
    assert len(w) == 1, f"{victim.name} watched by {[m.name for m in w]}"
    return w[0]


@pytest.mark.seeds(5)
@pytest.mark.parametrize("mode", ["views", "gossip"])
def test_a_crashed_member_is_excluded_within_0_3_s(sim_seed, mode):
    sim = Simulation(sim_seed, SimOptions(delay_s=(0.0002, 0.001)))
    cfg, agreed = (LAN, one_view) if mode == "views" else (GOSSIP_LAN, converged)
    members = form(sim, sim.rng.randint(3, 8), cfg, agreed)
    victim = sim.rng.choice(members)
    watcher = watcher_of(members, victim)
    t0 = sim.now
    sim.crash(victim)
    sim.run_until(lambda: agreed(members), 5, f"{victim.name} excluded")
    took = sim.now - t0
    assert took <= DETECT_S, f"{victim.name} excluded after {took:.3f} s; seed {sim_seed}"
    assert watcher.stack.layer("fd_sock").stats["suspected"] == 1
    assert watcher.stack.layer("swim").stats["verified_dead"] == 1
    for m in members:
        if m.alive:
            assert victim.address not in m.view.members


@pytest.mark.seeds(5)
@pytest.mark.parametrize("mode", ["views", "gossip"])
def test_a_reset_watch_connection_of_a_reachable_member_excludes_nobody(sim_seed, mode):
    """A middlebox resets the watch connection of one member, then of another, at 5% loss:
    each is suspected at once and verified reachable; nobody is excluded, and the watcher
    connects again."""
    sim = Simulation(sim_seed, SimOptions(delay_s=(0.0002, 0.001)))
    cfg, agreed = (LAN, one_view) if mode == "views" else (GOSSIP_LAN, converged)
    members = form(sim, sim.rng.randint(3, 8), cfg, agreed)
    before = {m.name: m.view.view_id for m in members}
    sim.options = SimOptions(loss=0.05, delay_s=(0.0002, 0.001))
    for target in sim.rng.sample(members, 2):
        watcher = watcher_of(members, target)
        assert sim.reset_watch(watcher, target) == 1
        sim.run_for(3.0)
        assert watcher.stack.layer("swim").stats["connection_lost"] >= 1
        assert watcher.stack.layer("fd_sock").watching == target.address  # reconnected
    for m in members:
        assert m.view.view_id == before[m.name], (
            f"{m.name} moved to {m.view} though nobody failed; seed {sim_seed}")
        assert m.stack.layer("swim").stats["dead"] == 0


@pytest.mark.seeds(5)
def test_a_leaver_is_not_suspected(sim_seed):
    sim = Simulation(sim_seed)
    members = form(sim, sim.rng.randint(3, 6), LAN, one_view)
    leaver = sim.rng.choice(members)
    watcher = watcher_of(members, leaver)
    leaver.leave()
    sim.run_until(lambda: leaver.left is not None and one_view(members), 10, "leave")
    sim.run_for(1.0)
    fd = watcher.stack.layer("fd_sock").stats
    assert fd["suspected"] == 0, f"{dict(fd)}; seed {sim_seed}"
    assert leaver.left.reason == "left"


@pytest.mark.seeds(5)
def test_a_vanished_host_sends_no_close_and_is_left_to_swims_timers(sim_seed):
    """A member cut off by a partition, then crashed behind it: no FIN crosses, so its
    watcher hears nothing and SWIM's timers exclude it (later than FD_SOCK would)."""
    sim = Simulation(sim_seed, SimOptions(delay_s=(0.0002, 0.001)))
    members = form(sim, sim.rng.randint(3, 6), LAN, one_view)
    victim = sim.rng.choice(members)
    watcher = watcher_of(members, victim)
    t0 = sim.now
    sim.partition([m for m in members if m is not victim], [victim])
    sim.crash(victim)
    sim.run_until(lambda: one_view(members), 10, f"{victim.name} excluded")
    assert sim.now - t0 > DETECT_S
    fd = watcher.stack.layer("fd_sock").stats
    assert fd["suspected"] == 0 and not any(k.startswith("lost_") for k in fd), dict(fd)
