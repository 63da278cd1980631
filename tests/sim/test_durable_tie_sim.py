"""Durable queues with the even-split tie-breaker (``primary__tie_breaker="store"``;
stack/workqueue/ties.py): four members journal every queue and split 2+2, halves at
random. The stack makes the half that wins its lease primary; that half takes its epoch's
tie in the store and its queue serves, the other's refuses; sometimes the split heals and
the same four split again (their new epoch has a tie of its own, which either half may
win). Then every member loses power,
and the half without the tie restarts first, alone, primary for the stack (a new lineage):
its queue must wait, since the tie says the other half may have moved on. Then the rest
restart. Checked by the queue history checker (no acknowledged publish lost, nothing
accepted twice, identical replicas) and the single-primary checker."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.sim import Simulation, SimOptions
from raygroups.stack.workqueue import QueueNotPrimary
from raygroups.stack.workqueue.sim_journal import SimJournal

from .history import History
from .queue_history import QueueHistory
from .test_workqueue_sim import ALT, MAIN, WQ, Workload, one_view, start

N = 4
TIE = StackConfig.local(primary__expected_size=3, primary__tie_breaker="store",
                        discovery="memory://sim")
JOINER = TIE.with_options(primary__bootstrap=False)
"""The tie's half after the power cut, as member.join_config restarts a member on Ray: it
may not start a group of its own (``expected_size`` 3 lets two members do it; the other
half did), only join one."""


def serving(side) -> bool:
    return all(d.active and len(d.member.view) == len(side) for d in side)


def split(sim, h, w, drivers) -> tuple:
    """Split the four 2+2 at random; one half serves, the other refuses: (tie, other)."""
    halves = sim.rng.sample(drivers, N)
    a, b = halves[:2], halves[2:]
    sim.partition([d.member for d in a], [d.member for d in b])
    w.until(lambda: serving(a) or serving(b), 30, "one half serving")
    tie, other = (a, b) if serving(a) else (b, a)
    print(f"the tie: {[d.member.name for d in tie]}, the other half: "
          f"{[d.member.name for d in other]}")
    ok = [h.publish(d, MAIN, b"tie-%d" % k) for k, d in enumerate(tie)]
    refused = [h.publish(d, MAIN, b"other-%d" % k) for k, d in enumerate(other)]
    w.until(lambda: all(r.done for r in ok + refused), 10, "the publishes answered")
    assert all(r.error is None for r in ok), ok
    assert all(isinstance(r.error, QueueNotPrimary) for r in refused), refused
    assert not any(d.active for d in other)
    return tie, other


@pytest.mark.seeds(30)  # more in every campaign
@pytest.mark.regressions(16330054, 16350025, 16350029,  # the tie's half, restarted, may
#                           start a group of its own: two primaries with one id (JOINER)
                          16490062)  # publishes unanswered with UNICAST's retransmissions
#                           to members outside the view backed off (reverted)
def test_a_durable_2_2_split_and_a_power_cut_keep_the_tie_s_side(sim_seed):
    sim = Simulation(sim_seed, SimOptions(loss=0.01, reorder=0.01, delay_s=(0.0005, 0.003)),
                     buggify=True)
    h = QueueHistory(sim, MAIN, ALT)
    journals = [SimJournal(sync_s=sim.rng.choice((0.0005, 0.003))) for _ in range(N)]
    drivers = start(sim, N, TIE, WQ, listener=h.listen, journal=lambda i: journals[i])
    hist = History(sim)
    create = drivers[0].create(MAIN, ALT)
    sim.run_until(lambda: create.done, 5, "queue created")
    assert create.error is None, create.error
    w = Workload(sim, h, drivers)
    w.run(sim.rng.uniform(0.1, 0.5))
    splits = sim.rng.choice((1, 2, 3))
    for k in range(splits):
        if k:  # heal, then split the same four again: each epoch has a tie of its own
            sim.heal()
            w.until(lambda: one_view(drivers) and all(d.active and not d.replica.joint
                                                      for d in drivers), 30,
                    "healed, every member active in an established epoch")
        tie, other = split(sim, h, w, drivers)
    w.run(sim.rng.uniform(0.1, 1.0))
    for d in drivers:  # the power cut, the split still there
        d.crash()
    hist.new_era()
    sim.heal()
    sim.run_for(sim.rng.uniform(0.1, 1.0))
    for d in other:
        d.restart()
    sim.run_until(lambda: one_view(other) and all(d.member.view.primary for d in other), 30,
                  "the other half primary for the stack, alone")
    w.run(5)
    assert not any(d.active for d in other), "the half without the tie served"
    assert all(d.replica.stats["ties_lost"] for d in other)
    for d in sim.rng.sample(tie, len(tie)):
        d.member.config = JOINER
        d.restart()
        w.run(sim.rng.uniform(0.0, 0.3))
    w.until(lambda: one_view(drivers) and all(d.active for d in drivers), 60,
            "every member back from its journal, active in one primary view")
    w.drain()
    h.check([d.replica for d in drivers])
    hist.check_primary()
    assert h.calls["publish_ok"] > 0 and h.calls["accept_ok"] > 0, h.calls
