"""Simulator schedule of the campaign across Ray hosts' lost publishes: a group of three
(``expected_size`` 3, launched together: each may bootstrap it) runs the replicated work
queue, then loses a majority of its primary component, either two of the three at once or,
as on the hosts, one and then one of the primary view of two that went on (each lost member
crashed or cut off). The survivor is left alone, not primary. The lost members come back as
fresh incarnations of a process Ray restarted: a new UUID, no primary component known, and
``primary.bootstrap`` False (``actors/member.join_config``); in some runs they first form a
view of their own, cut off from the survivor (one of them restarted again a few times, a
flapping process), then everything heals. In some runs one lost member was only cut off
and comes back as itself.

Checked on every run: the primary components form one lineage, each holding a majority of
the one before it (``History.check_primary_lineage``), one primary per id, view agreement,
no internal errors; and what MySQL Group Replication's design promises after the heal, no
more: when the healed view holds a majority of the last primary component, the group is
primary again, and the work queue, drained, lost no acknowledged publish
(``QueueHistory.check``); otherwise (the survivor beside two fresh incarnations: those are
new members, not the ones lost) it stays non-primary for good (raygroups has no override
like MySQL's ``group_replication_force_members``) and acknowledges no publish after the
loss. Without the bootstrap flag, the fresh pair's view of two is primary (a majority of
``expected_size``, every state at primary id 0): a second lineage, and once a flapping
restart has raised its view ids above the survivor's primary id, its empty queue state wins
the heal and acknowledged publishes are lost, as on the hosts."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.sim import Simulation, SimOptions

from .history import History
from .queue_history import QueueHistory
from .test_workqueue_sim import ALT, MAIN, Workload, one_view, start

CFG = StackConfig.local(primary__expected_size=3)
RESTARTED = CFG.with_options(primary__bootstrap=False)  # as member.join_config after a restart


def alone(driver) -> bool:
    """The survivor sits in a view of itself, not primary."""
    v = driver.member.view
    return v is not None and len(v) == 1 and not v.primary


def last_primary(sim) -> frozenset:
    """The member uids of the last primary component any member installed (the highest
    primary id, then view id)."""
    best = max((v for m in sim.members for v in m.views if v.primary),
               key=lambda v: (v.primary_id, v.view_id.id, v.view_id.coord.uid))
    return frozenset(a.uid for a in best.members)


@pytest.mark.seeds(40)
@pytest.mark.regressions(16310238)  # the oracle read the survivor's view while it rejoined
def test_fresh_incarnations_never_start_a_second_lineage(sim_seed):
    sim = Simulation(sim_seed, buggify=True)
    rng = sim.rng
    sim.options = SimOptions(loss=rng.choice([0.0, 0.02, 0.05]), duplicate=0.01,
                             reorder=0.03, delay_s=(0.0005, 0.003))
    h = QueueHistory(sim, MAIN, ALT)
    drivers = start(sim, 3, CFG)
    create = drivers[0].create(MAIN, ALT)
    sim.run_until(lambda: create.done, 5, "queue created")
    assert create.error is None, create.error
    w = Workload(sim, h, drivers)
    w.run(rng.uniform(0.3, 1.0))
    survivor, *lost = rng.sample(drivers, 3)
    cut = set()  # the lost members cut off (alive, each alone) rather than crashed

    def lose(d) -> None:
        if rng.random() < 0.5:
            d.crash()
        else:
            cut.add(d)
        sim.partition([x.member for x in drivers if x not in cut and x.member.alive])

    if rng.random() < 0.5:  # the hosts' shape: a primary view of two goes on, then loses one
        lose(lost[1])
        w.until(lambda: one_view([survivor, lost[0]]) and survivor.member.view.primary and
                len(survivor.member.view) == 2, 30, "a primary view of two")
        w.run(rng.uniform(0.3, 1.0))
        lose(lost[0])
    else:
        lose(lost[0])
        lose(lost[1])
    w.until(lambda: alone(survivor), 30, "the survivor alone, not primary")
    w.run(rng.uniform(0.2, 1.0))
    before = len(h.publishes)  # publishes made before the majority was lost
    back = rng.choice(sorted(cut, key=drivers.index)) if cut and rng.random() < 0.3 else None
    fresh = [d for d in lost if d is not back]
    for d in fresh:
        sim.run_for(rng.uniform(0, 0.3))
        d.member.config = RESTARTED
        d.restart()
    if rng.random() < 0.6:  # the fresh incarnations meet without the survivor first
        apart = [d for d in lost if d.member.alive]
        sim.partition([survivor.member], [d.member for d in apart])
        w.until(lambda: one_view(apart), 30, "the lost members' view without the survivor")
        w.run(rng.uniform(0.5, 2.0))
        for _ in range(rng.choice([0, 0, 2, 4])):  # a flapping process, restarted again
            rng.choice(fresh).restart()
            w.until(lambda: one_view(apart), 30, "the lost members' view again")
            w.run(rng.uniform(0.2, 1.0))
    last = last_primary(sim)  # before the heal: the views after it may go on changing
    sim.heal()
    w.until(lambda: one_view(drivers), 30, "one view after the heal")
    w.run(rng.uniform(1.0, 2.0))

    view = {d.member.address.uid for d in drivers if d.member.alive}  # the healed view's
    if 2 * len(last & view) > len(last):
        w.until(lambda: one_view(drivers) and all(d.active for d in drivers), 30,
                "primary again with a majority of the last primary component")
        w.run(0.5)
        w.drain()
        h.check([d.replica for d in drivers])
        assert h.calls["accept_ok"] > 0, h.calls
    else:
        # stuck for good: the fresh incarnations are new members, not the ones lost (so
        # only a member back of a lost primary view of two, the one it had lost, is here)
        assert back is None or len(last) == 2, (back, last)
        if any(d.member.view.primary for d in drivers):
            raise AssertionError("primary without a majority of the last primary component; "
                                 f"reproduce with --sim-seed={sim_seed}")
        late = [st for st in list(h.publishes.values())[before:] if st == "ok"]
        assert not late, (f"{len(late)} publishes acknowledged after the majority was lost; "
                          f"reproduce with --sim-seed={sim_seed}")
    assert h.calls["publish_ok"] > 0, h.calls
    checks = History(sim)
    checks.check_primary()
    checks.check_views()
    checks.check_errors()


@pytest.mark.seeds(20)
def test_a_member_restarted_before_the_first_start_does_not_hold_it_up(sim_seed):
    """A launch of three (``expected_size`` 3) where one member's process was restarted
    before any primary component formed: its fresh incarnation may not bootstrap, the two
    first incarnations may, and two of three is a majority: the view of all three is
    primary. With two restarted members, one first incarnation is no majority: no view is
    primary, ever."""
    for restarted, primary in ((1, True), (2, False)):
        sim = Simulation(sim_seed, SimOptions(loss=0.02, duplicate=0.01, reorder=0.03,
                                              delay_s=(0.0005, 0.003)))
        order = sim.rng.sample(range(3), 3)
        members = [sim.add_member("g", f"m{i}", RESTARTED if order[i] < restarted else CFG)
                   for i in range(3)]

        def formed() -> bool:
            views = [m.view for m in members]
            return all(v is not None and len(v) == 3 for v in views) and \
                len({v.view_id for v in views}) == 1
        sim.run_until(formed, 30, "one view of three")
        sim.run_for(2.0)
        assert all(m.view.primary is primary for m in members), \
            ([m.view for m in members], restarted, sim_seed)
        if not primary:
            assert not any(v.primary for m in members for v in m.views), sim_seed
