"""Scale properties of gossip dissemination (seed 004) at sizes that simulate in seconds:
a rumor reaches every member within log2(2N)+1 rounds, the traffic per member and round does
not grow with N, and a join storm converges. ``python bench/scale.py`` measures the same at
100, 300 and 1,000 members (``raygroups.stack.sim_scale``)."""
import pytest

from raygroups.stack.sim_scale import rumor_bound, simulate

pytestmark = pytest.mark.scale  # figures, not schedules: campaigns leave them out

TRAFFIC = ("steady_sent_per_member_round", "steady_received_per_member_round",
           "rumor_sent_per_member_round", "rumor_received_per_member_round")


@pytest.mark.seeds(2)
def test_rumors_reach_everyone_within_log2_2n_plus_1_rounds(sim_seed):
    r = simulate(200, "gossip", seed=sim_seed, rumors=10, storm=0, crash=False)
    why = f"{r['rumor_rounds_hist']}; reproduce with --sim-seed={sim_seed}"
    assert r["rumor_bound_rounds"] == rumor_bound(200) == 9
    assert r["rumors_never_complete"] == 0, why
    assert r["rumor_rounds_max"] <= r["rumor_bound_rounds"], why
    assert r["rumor_share_within_bound"] == 1.0, why
    assert r["errors"] == 0


@pytest.mark.seeds(1)
def test_traffic_per_member_and_round_does_not_grow_with_n(sim_seed):
    small = simulate(50, "gossip", seed=sim_seed, rumors=10, storm=0, crash=False)
    large = simulate(200, "gossip", seed=sim_seed, rumors=10, storm=0, crash=False)
    for key in TRAFFIC:
        assert 0 < large[key] <= 1.5 * small[key], \
            f"{key}: {small[key]} at 50 members, {large[key]} at 200; " \
            f"reproduce with --sim-seed={sim_seed}"


@pytest.mark.seeds(2)
def test_a_join_storm_converges(sim_seed):
    """40 members start within 50 ms next to 60: everyone lists all 99 survivors (one
    crashed before) - rumors that found no room, or missed someone, are repaired by
    push-pull."""
    r = simulate(60, "gossip", seed=sim_seed, rumors=0, storm=40, crash=True,
                 timeout_s=120)
    assert r["members_after_storm"] == 99
    assert r["storm_converge_s"] < 60, f"reproduce with --sim-seed={sim_seed}"
    assert r["errors"] == 0


@pytest.mark.seeds(1)
@pytest.mark.parametrize("membership", ["gossip", "views"])
def test_the_group_heals_after_a_partition(sim_seed, membership):
    """sim_scale's partition phase: two random halves apart for 20 s (each drops the
    other: gossip mode buries it, views mode installs two views), then the heal; every
    member has the whole group again (views mode: one view) and the figure is measured."""
    r = simulate(40, membership, seed=sim_seed, rumors=0, storm=0, crash=False,
                 traffic_rounds=1, partition_s=20.0, timeout_s=120)
    why = f"{r}; reproduce with --sim-seed={sim_seed}"
    assert r["partition_sides"] == [20, 20], why
    assert r["partitioned_members_apart"] == 40, why
    assert 0 < r["heal_converge_s"] < 60, why
    assert r["errors"] == 0, why
