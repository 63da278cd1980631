"""Simulator campaign for durable queues (the Qpid new-cluster design's persistent
cluster): five members journal every queue (a simulated disk that keeps only what was
synced), publish, acquire and settle at random through faults and members restarted from
their journals, then every member loses power at once, mid-traffic, and all restart from
their journals, which differ (each synced a different prefix). Checked as the replicated
queue is (tests/sim/queue_history.py): no acknowledged publish lost, nothing accepted
twice, every requeue accounted for, identical replicas; and one primary at a time."""
import random

import pytest

from raygroups.stack.sim import Simulation, SimOptions
from raygroups.stack.workqueue import WorkQueueConfig
from raygroups.stack.workqueue.sim_journal import SimJournal

from .history import History
from .queue_history import QueueHistory
from .test_workqueue_sim import ALT, MAIN, N, Workload, faults, one_view, start


def power_cut(sim, drivers, w, hist) -> None:
    """Every member crashes at once; after a while all restart from their journals, one
    by one, while the workload goes on at those already back. The stack's primary
    components begin a new lineage (``hist``: the check leaves the old one out)."""
    for d in drivers:
        d.crash()
    hist.new_era()
    sim.run_for(sim.rng.uniform(0.1, 1.0))
    for d in sim.rng.sample(drivers, len(drivers)):
        d.restart()
        w.run(sim.rng.uniform(0.0, 0.3))
    w.until(lambda: one_view(drivers) and all(d.active for d in drivers), 60,
            "every member back from its journal, active in one primary view")


@pytest.mark.seeds(15)  # thousands more in every campaign (README, "Safety campaigns")
@pytest.mark.regressions(16130001,  # a journal stood only for the incarnation that wrote
                         #            its state, not for a later one that adopted a newer
                         #            state and crashed before its snapshot: no majority
                         16130570,  # a provisional epoch from before a power cut taken over
                         #            a newer established one (acknowledged publish lost)
                         16130625, 16130659,  # waiting for ever on an established epoch
                         16131043, 16131446,  # a holder in a later, unestablished epoch
                         #                      taken for an arbitrator that saw one
                         16140233)  # members whose journals lacked the seal outranked by
#                                     one that had it, in the same epoch: publishes lost
def test_a_durable_queue_loses_no_acknowledged_publish_when_every_member_crashes(sim_seed):
    sim = Simulation(sim_seed, SimOptions(loss=0.02, duplicate=0.01, reorder=0.02,
                                          delay_s=(0.0005, 0.003)), buggify=True)
    h = QueueHistory(sim, MAIN, ALT)
    pick = random.Random(f"{sim_seed}:journal")  # its own generator: the schedule stays
    sync_s = pick.choice((0.0005, 0.003, 0.02))
    snapshot_s = pick.choice((0.005, 0.3))  # a snapshot's write: a small state, a large one
    wq = WorkQueueConfig(time_slice_s=0.05, journal_compact_bytes=pick.choice((512, 64 << 20)),
                         update_chunk_bytes=pick.choice((64, 256 * 1024)))
    print(f"journal: syncs of {sync_s}s, snapshots of {snapshot_s}s, compaction past "
          f"{wq.journal_compact_bytes} bytes")
    journals = [SimJournal(sync_s=sync_s, snapshot_s=snapshot_s) for _ in range(N)]
    drivers = start(sim, wq=wq, listener=h.listen, journal=lambda i: journals[i])
    hist = History(sim)
    create = drivers[0].create(MAIN, ALT)
    sim.run_until(lambda: create.done, 5, "queue created")
    assert create.error is None, create.error
    w = Workload(sim, h, drivers)
    w.run(0.5)
    if pick.random() < 0.5:
        faults(sim, drivers, w)  # crashed members come back from their journals
    w.run(pick.uniform(0.1, 1.0))
    power_cut(sim, drivers, w, hist)
    w.run(pick.uniform(0.0, 0.5))  # a second cut may come while members still load
    if pick.random() < 0.5:
        power_cut(sim, drivers, w, hist)
        w.run(0.3)
    w.drain()
    h.check([d.replica for d in drivers])
    hist.check_primary()
    assert h.calls["publish_ok"] > 0 and h.calls["accept_ok"] > 0, h.calls
    assert sum(j.syncs for j in journals) > 0
