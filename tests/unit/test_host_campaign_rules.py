"""The campaign across Ray hosts (tests/hosts/campaign.py): its schedules and its rule for a
group that is whole again, without hosts (the campaign itself runs in
tests/integration/test_host_campaign.py)."""
from ..hosts.campaign import CRASHES, converged, schedule

WHOLE = {"alive": 3, "members": 3, "nodes": 3, "views": ["('vm-a-0', 9)"], "primary": True,
         "queues": ["active"]}


def test_a_whole_group_on_every_host_is_converged():
    assert converged(WHOLE, hosts=3)


def test_a_group_that_ray_shrank_is_not_converged_until_the_host_is_back():
    """Seed 26112858's start: Ray had declared a worker host dead after seed 26112857's
    isolation and its raylet stopped the member; the two others were a primary view of two
    with a member on each alive node. Starting the next fault there made a host crash a
    majority crash of the last primary view."""
    shrunk = dict(WHOLE, alive=2, members=2, nodes=2)
    assert not converged(shrunk, hosts=3)
    assert converged(shrunk, hosts=2)


def test_every_other_unfinished_state_is_not_converged():
    for change in ({"views": ["('vm-a-0', 9)", "('vm-b-0', 9)"]}, {"primary": False},
                   {"queues": ["active", "not_primary"]}, {"members": 2}, {"nodes": 2}):
        assert not converged(dict(WHOLE, **change), hosts=3), change
    assert not converged({"ok": False, "error": "NoSuchGroup: ..."}, hosts=3)
    assert not converged({"unparsed": "Traceback ..."}, hosts=3)


def test_a_host_crash_is_only_ever_a_schedules_first_fault():
    firsts = set()
    for seed in range(2000):
        sched = schedule(seed, [1, 2, 3])
        assert 1 <= len(sched) <= 3
        assert not any(f["kind"] in CRASHES for f in sched[1:]), (seed, sched)
        firsts.add(sched[0]["kind"])
    assert set(CRASHES) <= firsts  # crashes do come, first
