"""Agreed settings in the simulator (5% loss, duplication, reordering): a joiner whose
settings differ is refused and leaves with the reason; two groups formed apart with
different settings stay apart after the heal (MERGE_REQ is refused, the leader does not
retry), while a group with the same settings merges with the first as usual."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.sim import Simulation, SimOptions

from .test_failures_sim import one_view

OTHER = dict(primary__relay_above=64, gms__agreed={"app.schema": 2})


def lossy(seed):
    return Simulation(seed, SimOptions(loss=0.05, duplicate=0.05, reorder=0.1))


def formed(sim, names, cfg):
    """Members ``names`` started one after another; they agree on one view."""
    members = []
    for name in names:
        members.append(sim.add_member("g", name, cfg))
        sim.run_until(lambda: one_view(members), 30, f"{name} joins")
    return members


@pytest.mark.seeds(10)
def test_a_joiner_with_other_settings_is_refused_and_the_group_goes_on(sim_seed):
    sim = lossy(sim_seed)
    group = formed(sim, ["m0", "m1"], StackConfig.local())
    vid = group[0].view.view_id
    x = sim.add_member("g", "x", StackConfig.local(**OTHER))
    sim.run_until(lambda: x.left is not None, 30, "x refused")
    assert "primary.relay_above is 32 in the group, 64 here" in x.left.reason, x.left.reason
    assert "app.schema is None in the group, 2 here" in x.left.reason
    assert x.view is None and all(m.view.view_id == vid for m in group)
    assert group[0].stack.layer("gms").stats["joins_denied"] >= 1


@pytest.mark.seeds(10)
def test_groups_with_other_settings_stay_apart_and_compatible_ones_merge(sim_seed):
    sim = lossy(sim_seed)
    default, other = StackConfig.local(), StackConfig.local(**OTHER)
    a = [sim.add_member("g", f"a{i}", default, start=False) for i in range(2)]
    b = [sim.add_member("g", f"b{i}", other, start=False) for i in range(2)]
    c = [sim.add_member("g", f"c{i}", default, start=False) for i in range(2)]
    sim.partition(a, b, c)
    for side in (a, b, c):
        for m in side:
            m._boot()
            sim.run_until(lambda: all(x.view is not None for x in side if x.alive), 30, "boot")
        sim.run_until(lambda: one_view(side), 30, f"{side[0].name}'s group")
    sim.heal()
    sim.run_until(lambda: one_view(a + c), 60, "a and c merged")
    sim.run_for(10.0)  # ten merge checks: b is never merged, and never asked again and again
    assert one_view(a + c) and one_view(b)
    gms = {m.name: m.stack.layer("gms").stats for m in a + b + c}
    refused = sum(s["merges_refused"] for s in gms.values())
    incompatible = sum(s["merges_incompatible"] for s in gms.values())
    assert refused + incompatible >= 1, gms
    assert refused <= 4 and incompatible <= 4, gms  # remembered, not asked every check
