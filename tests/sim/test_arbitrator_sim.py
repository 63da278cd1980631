"""The work queue with an arbitrator (Galera's garbd): four members hold the queues and a
fifth only votes. The main queue campaign's workload and faults (crashes, halves, a member
cut off), the arbitrator among them, then the history checker (no acknowledged publish
lost, nothing accepted twice, identical holders) and the single-primary checker; and the
2+2 split the arbitrator is for: the side it is on stays primary and serves, the other
refuses, and the heal brings the two back together."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.sim import Simulation, SimOptions
from raygroups.stack.workqueue import Phase, QueueNotPrimary, WorkQueueConfig
from raygroups.stack.workqueue.sim import SimQueues
from raygroups.stack.workqueue.sim_journal import SimJournal

from .history import History
from .queue_history import QueueHistory
from .test_workqueue_sim import ALT, MAIN, Workload, faults, one_view

N = 5
CFG = StackConfig.local(primary__expected_size=N)
WQ = WorkQueueConfig(time_slice_s=0.05)
ARB = WorkQueueConfig(time_slice_s=0.05, arbitrator=True)


def ready(d) -> bool:
    """Serving (a holder) or voting (the arbitrator) in a primary view."""
    return d.active or (d._current() and d.replica.phase is Phase.ARBITER)


def start(sim, arb_at: int, durable: bool = False):
    """``durable``: every holder journals (the arbitrator never does)."""
    drivers = []
    for i in range(N):
        if i:
            sim.run_for(sim.rng.uniform(0, 0.01))
        journal = SimJournal() if durable and i != arb_at else None
        drivers.append(SimQueues(sim, sim.add_member("g", f"m{i}", CFG),
                                 ARB if i == arb_at else WQ, journal=journal))
    sim.run_until(lambda: one_view(drivers) and all(ready(d) for d in drivers), 30,
                  "every member serving or voting in one primary view")
    return drivers


@pytest.mark.seeds(30)  # more in every campaign
def test_work_queue_history_with_an_arbitrator(sim_seed):
    sim = Simulation(sim_seed, SimOptions(loss=0.03, duplicate=0.01, reorder=0.03,
                                          delay_s=(0.0005, 0.003)), buggify=True)
    h = QueueHistory(sim, MAIN, ALT)
    arb_at = sim.rng.randrange(N)
    print(f"the arbitrator: m{arb_at}")
    drivers = start(sim, arb_at)
    holders = [d for i, d in enumerate(drivers) if i != arb_at]
    create = holders[0].create(MAIN, ALT)
    sim.run_until(lambda: create.done, 5, "queue created")
    assert create.error is None, create.error
    w = Workload(sim, h, holders)
    w.run(0.5)
    faults(sim, drivers, w, ready=ready)
    w.run(0.5)
    w.drain()
    h.check([d.replica for d in holders])
    History(sim).check_primary()
    assert not drivers[arb_at].replica.state.queues  # it never held anything
    assert h.calls["publish_ok"] > 0 and h.calls["accept_ok"] > 0, h.calls


@pytest.mark.seeds(30)
@pytest.mark.regressions(16140394)  # an epoch only the arbitrator began kept the queue away
@pytest.mark.parametrize("durable", [False, True], ids=["memory", "durable"])
def test_a_2_2_split_keeps_the_arbitrator_s_side(sim_seed, durable):
    """With durable queues too: the arbitrator counts in the ballot and the establishment
    of the side it is on (durable.py), so that side's queue serves as well."""
    sim = Simulation(sim_seed, SimOptions(delay_s=(0.0005, 0.003)))
    h = QueueHistory(sim, MAIN, ALT)
    arb_at = sim.rng.randrange(N)
    drivers = start(sim, arb_at, durable)
    holders = [d for i, d in enumerate(drivers) if i != arb_at]
    create = holders[0].create(MAIN, ALT)
    sim.run_until(lambda: create.done, 5, "queue created")
    sim.rng.shuffle(holders)
    with_arb, without = holders[:2], holders[2:]
    print(f"the arbitrator m{arb_at} with {[d.member.name for d in with_arb]}, "
          f"apart: {[d.member.name for d in without]}")
    sim.partition([d.member for d in with_arb] + [drivers[arb_at].member],
                  [d.member for d in without])
    sim.run_until(lambda: all(not d.active for d in without) and
                  all(d.active and len(d.member.view) == 3 for d in with_arb), 30,
                  "the arbitrator's side primary, the other side not")
    ok = [h.publish(d, MAIN, b"with-%d" % k) for k, d in enumerate(with_arb)]
    refused = [h.publish(d, MAIN, b"apart-%d" % k) for k, d in enumerate(without)]
    sim.run_until(lambda: all(r.done for r in ok + refused), 10, "the publishes answered")
    assert all(r.error is None for r in ok), ok
    assert all(isinstance(r.error, QueueNotPrimary) for r in refused), refused
    History(sim).check_primary()
    sim.heal()
    sim.run_until(lambda: one_view(drivers) and all(ready(d) for d in drivers), 60,
                  "one primary view after the heal")
    w = Workload(sim, h, holders)
    w.drain()
    h.check([d.replica for d in holders])
    History(sim).check_primary()
