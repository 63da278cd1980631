"""Simulator campaign for long stalls: a member's process gets no CPU for 0.3-4 s (a loaded
machine, a long GC pause, SIGSTOP) while the group sends. Buggify's stalls stay below failure
detection; these are long enough to be suspected, often to be declared dead, and they end at
any point of the suspicion, of the flush or of the view change that follows. Checked: view
agreement, virtual synchrony, total order, the primary component and FIFO (``check_group``);
then, once the group is one view again, every member delivers what is sent in it and all
delivered the same messages in it (``check_last_view``: a member whose delivery from one
sender stayed frozen with no view change to come would keep the group short of it), and
that view stays: with every stall over, nothing is left to exclude a member again."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.sim import Simulation, SimOptions

from .history import History
from .test_consistency_sim import one_view, start


def traffic(sim, h, members, seconds):
    """Like test_consistency_sim's, but a stalled member's application sends nothing."""
    for _ in range(int(seconds / 0.02)):
        for m in members:
            if m.stalled_until <= sim.now and sim.rng.random() < 0.3:
                h.send(m, ordered=sim.rng.random() < 0.5)
        sim.run_for(0.02)


@pytest.mark.seeds(60)
# excluded again after the settle by an old removal: forgotten at the merge and re-learnt
# (100911 and the next four); made at its wake by a member stalled since before (202585)
@pytest.mark.regressions(100911, 101235, 102080, 102254, 102757, 202585)
def test_long_stalls_under_traffic(sim_seed):
    sim = Simulation(sim_seed, SimOptions(loss=0.02, reorder=0.05, delay_s=(0.0005, 0.003)),
                     buggify=True)
    rng = sim.rng
    n = rng.choice([3, 5])
    h = History(sim)
    members = start(sim, n, StackConfig.local(primary__expected_size=n))
    for _ in range(rng.randint(1, 3)):
        for v in rng.sample(members, rng.choice([1, 1, 2])):
            v.stalled_until = max(v.stalled_until, sim.now + rng.uniform(0.3, 4.0))
        traffic(sim, h, members, rng.uniform(0.5, 5.0))
    sim.run_until(lambda: all(m.stalled_until <= sim.now for m in members) and
                  one_view(members) and all(m.writable for m in members), 60,
                  "one view of everyone after the stalls")
    settled = members[0].view.view_id
    traffic(sim, h, members, 1.0)
    sim.run_for(3.0)
    h.check_group()
    h.check_last_view(members)
    changed = sorted(m.name for m in members if m.view.view_id != settled)
    assert not changed, (f"the view changed after the group settled, at {changed}: no fault "
                         f"was left to cause it; reproduce with --sim-seed={sim_seed}")
