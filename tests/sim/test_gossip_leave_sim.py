"""Gossip membership: a graceful leave is announced (seed 004: UNSUBSCRIPTION, then a REMOVE
rumor), so every other member drops the leaver at once, long before failure detection could
(suspicion takes 30 s here), and with store discovery the leaving coordinator's members file
is deleted (the Leave reaches the discovery layer, as under GMS) instead of going stale."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.discovery.members_file import file_name
from raygroups.stack.sim import Simulation, SimOptions

from .test_gossip_sim import converged

SLOW_DETECTION = dict(swim__suspicion_min_s=30.0, swim__suspicion_max_factor=1.0)


@pytest.mark.seeds(10)
def test_a_gossip_leave_is_seen_at_once_and_the_leavers_file_goes(sim_seed):
    sim = Simulation(sim_seed, SimOptions(loss=0.05, delay_s=(0.0005, 0.003)))
    cfg = StackConfig.local(membership="gossip", discovery="memory://leave", **SLOW_DETECTION)
    n = sim.rng.randint(5, 12)
    members = [sim.add_member("g", "n0", cfg)]
    sim.run_until(lambda: members[0].view is not None, 5, "first member")
    for i in range(1, n):
        sim.run_for(sim.rng.uniform(0, 0.05))
        members.append(sim.add_member("g", f"n{i}", cfg))
    sim.run_until(lambda: converged(members), 30, f"{n} members converge")
    # the nominal coordinator (members[0] of every list) leaves once its file is written
    leaver = min(members, key=lambda m: m.address)
    own = file_name(leaver.address.uid)
    sim.run_until(lambda: own in sim.store.files("g"), 10, "the coordinator's file")
    start = sim.now
    leaver.leave()
    rest = [m for m in members if m is not leaver]
    sim.run_until(lambda: leaver.left is not None and converged(rest), 3,
                  "everyone dropped the leaver")
    assert sim.now - start < 3 < SLOW_DETECTION["swim__suspicion_min_s"]
    assert leaver.left is not None and leaver.left.reason == "left"
    for m in rest:
        assert leaver.address not in m.view
        assert m.stack.errors == 0
    sim.run_until(lambda: own not in sim.store.files("g"), 5, "the leaver's file deleted")
