"""Simulator campaign for the work queue's lifecycle: five members publish, acquire, accept,
release and reject while queues are purged, one is deleted, a queue with a TTL expires
messages to its alternate and overflows its oldest messages there (``dead_letter_oldest``),
a capped queue refuses publishes (``reject_publish``) while publishers retry with the same
message ids, every member's wall clock is skewed, and members crash, restart, split and
heal. Then every queue is drained and the history is checked (tests/sim/queue_history.py):
what was purged, deleted, expired or overflowed is accounted for, nothing acknowledged is
otherwise lost, nothing purged or deleted is accepted, no publish to the deleted queue is
acknowledged after its delete, no retry of a stored message is refused as full, and the
replicas end identical."""
import pytest

from raygroups.stack.sim import Simulation, SimOptions
from raygroups.stack.workqueue import NoSuchQueue, QueueUnsupported, WorkQueueConfig
from raygroups.stack.workqueue.codec import ENQUEUE, PURGE
from raygroups.stack.workqueue.state import MALFORMED, QueueState

from .history import History
from .queue_history import QueueHistory
from .test_workqueue_sim import ALT, MAIN, Workload, faults, in_step, one_view, start

CAP, TMP = "capped", "scratch"
WQ = WorkQueueConfig(time_slice_s=0.05, expire_interval_s=0.25, lifecycle_wait_s=2.0)
TTL_S, MAIN_DEPTH, CAP_DEPTH = 1.0, 30, 8


class LifecycleWorkload(Workload):
    """The base workload, publishing to three queues, retrying the capped queue's
    publishes, purging now and then and deleting the scratch queue once."""

    def __init__(self, sim, h, drivers):
        super().__init__(sim, h, drivers)
        self.to_retry: list = []  # (driver, incarnation, body, request) on the capped queue
        self.delete_at = sim.now + sim.rng.uniform(0.5, 3.0)
        self.deleting = None

    def publish(self, d, body: bytes) -> None:
        r = self.sim.rng.random()
        if r < 0.6:
            self.h.publish(d, MAIN, body)
        elif r < 0.85:
            self.to_retry.append((d, d.incarnation, body, self.h.publish(d, CAP, body)))
        else:
            self.h.publish(d, TMP, body)  # refused (NoSuchQueue) once it was deleted

    def pick(self, draining: bool) -> str:
        r = self.sim.rng.random()
        if draining:
            return ALT if r < 0.35 else CAP if r < 0.6 else MAIN
        return ALT if r < 0.2 else TMP if r < 0.3 else MAIN

    def step(self, draining: bool = False) -> None:
        super().step(draining)
        if draining:
            self.to_retry = []  # a retry after the drain took the message would store it anew
            return
        rng = self.sim.rng
        live = [d for d in self.drivers if d.member.alive]
        keep = []
        for d, inc, body, req in self.to_retry:  # retry once what completed ok or unknown
            if not req.done:
                keep.append((d, inc, body, req))
            elif d.member.alive and d.incarnation == inc and \
                    (req.error is None or self.h._outcome(req) == "info"):
                self.h.republish(d, CAP, body, req.args[1])
        self.to_retry = keep
        if rng.random() < 0.02:
            self.h.lifecycle("purge", rng.choice(live), rng.choice([MAIN, ALT]))
        failed = self.deleting is not None and self.deleting.done and \
            self.deleting.error is not None and not isinstance(self.deleting.error, NoSuchQueue)
        if self.sim.now >= self.delete_at and (self.deleting is None or failed):
            self.deleting = self.h.lifecycle("delete", rng.choice(live), TMP)

    def deleted(self) -> bool:
        return all(TMP not in d.replica.state.queues for d in self.drivers if d.member.alive)


def lifecycle_history(seed: int) -> tuple:
    """The campaign's schedule for one seed: (history, drivers), before the check."""
    sim = Simulation(seed, SimOptions(loss=0.03, duplicate=0.01, reorder=0.03,
                                      delay_s=(0.0005, 0.003)), buggify=True)
    h = QueueHistory(sim, MAIN, ALT)
    skews = [sim.rng.uniform(-0.1, 0.1) for _ in range(5)]
    drivers = start(sim, wq=WQ, listener=h.listen, skew_s=lambda i: skews[i])
    reqs = [drivers[0].create(MAIN, ALT, max_depth=MAIN_DEPTH, overflow="dead_letter_oldest",
                              ttl_s=TTL_S),
            drivers[1].create(CAP, max_depth=CAP_DEPTH), drivers[2].create(TMP)]
    sim.run_until(lambda: all(r.done for r in reqs), 5, "queues created")
    assert all(r.error is None for r in reqs), reqs
    w = LifecycleWorkload(sim, h, drivers)
    w.run(0.5)
    faults(sim, drivers, w, between=lambda: h.lifecycle(
        "purge", next(d for d in drivers if d.member.alive), MAIN))
    w.until(w.deleted, 30, "the scratch queue deleted")
    last = h.lifecycle("purge", drivers[0], ALT)  # one in a stable group, under traffic
    w.until(lambda: last.done, 30, "the last purge")
    w.run(0.5)
    w.drain()
    return h, drivers


@pytest.mark.seeds(5)  # more in campaigns: --sim-seeds=50
@pytest.mark.regressions(16350262)  # a refusal answered from a state no majority confirmed
def test_work_queue_lifecycle_history(sim_seed):
    h, drivers = lifecycle_history(sim_seed)
    h.check([d.replica for d in drivers])
    History(h.sim).check_primary()
    assert h.calls["publish_ok"] > 0 and h.calls["accept_ok"] > 0, h.calls
    assert h.calls["purge_ok"] > 0 and h.calls["delete"] > 0, h.calls
    print(sim_seed, dict(h.calls), {q: {k: v for k, v in i.items() if k in (
        "enqueued", "purged", "expired", "overflowed", "dropped")}
        for q, i in drivers[0].queues().items()})


class OlderState(QueueState):
    """The state machine of a build before the lifecycle: a command it does not know, or an
    ENQUEUE with a timestamp, is malformed and changes nothing."""

    def _one(self, sender, c):
        if c[1] >= PURGE or (c[1] == ENQUEUE and len(c) != 5):
            return MALFORMED, None
        return super()._one(sender, c)


def _older(driver) -> None:
    driver.replica.level = 1  # announces nothing
    driver.replica.state.__class__ = OlderState


@pytest.mark.seeds(5)
def test_a_rolling_upgrade_gates_the_lifecycle(sim_seed):
    """Two of five members run an older build: publish, acquire and accept work across
    builds with identical replicas, while purge, delete and a queue with a TTL raise
    QueueUnsupported (after ``lifecycle_wait_s``) and no member applies them; once the last
    older member restarted on the new build, they work."""
    sim = Simulation(sim_seed, SimOptions(loss=0.02, delay_s=(0.0005, 0.003)))
    wq = WorkQueueConfig(time_slice_s=0.05, lifecycle_wait_s=1.0)
    drivers = start(sim, wq=wq, prepare=lambda i, d: _older(d) if i >= 3 else None)

    def call(make):
        r = make()
        sim.run_until(lambda: r.done, 10, "the call completed")
        return r

    def settled():
        sim.run_until(lambda: one_view(drivers) and all(d.active for d in drivers), 30,
                      "one primary view, everyone active")
        in_step(sim, drivers)

    assert call(lambda: drivers[0].create(MAIN)).error is None
    for i, d in enumerate(drivers):
        assert call(lambda: d.publish(MAIN, b"job-%d" % i)).error is None
    got = call(lambda: drivers[4].acquire(MAIN, timeout_s=2))
    assert call(lambda: drivers[4].settle("accept", got.result[0])).error is None
    for upgraded in (None, drivers[3], drivers[4]):
        if upgraded is not None:
            upgraded.restart()  # the new build, a fresh incarnation: state transfer
        settled()
        old = any(type(d.replica.state) is OlderState for d in drivers)
        reqs = [call(lambda: drivers[0].purge(MAIN)),
                call(lambda: drivers[1].create("timed", ttl_s=5.0))]
        if old:
            assert all(isinstance(r.error, QueueUnsupported) for r in reqs), reqs
            assert "timed" not in drivers[2].replica.state.queues
        else:
            assert all(r.error is None for r in reqs), reqs
            assert reqs[0].result == 4
        settled()
    assert call(lambda: drivers[2].delete("timed")).error is None
    settled()
