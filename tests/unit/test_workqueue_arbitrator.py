"""An arbitrator in the work queue (Galera's garbd): it votes in the epochs' majorities and
holds nothing; calls complete with a majority of the members that hold the queues; a view
whose holders lack the newest epoch, or that holds exactly half of the epoch with an
arbitrator among the half, is not primary for the queue."""
from raygroups.stack.view import View, ViewId
from raygroups.stack.workqueue import Phase, QueueArbitrator, WorkQueueConfig

from .test_workqueue_state import Bus

CFG = WorkQueueConfig(interest_linger_s=0.0)
ARB = WorkQueueConfig(interest_linger_s=0.0, arbitrator=True)


def group(n: int, arbitrator_at: int, queue: bool = True) -> Bus:
    """``n`` replicas, one an arbitrator; with ``queue``: in one view, "jobs" created."""
    bus = Bus(n, CFG)
    bus.replicas[arbitrator_at].config = ARB
    if queue:
        bus.view()
        bus.replicas[0].create("jobs")
        bus.flush()
    return bus


def test_the_arbitrator_votes_and_holds_nothing():
    bus = group(3, 2, queue=False)
    a, b, arb = bus.replicas
    bus.view()
    assert (a.phase, b.phase, arb.phase) == (Phase.ACTIVE, Phase.ACTIVE, Phase.ARBITER)
    assert arb.exchange_data()[:2] == [a.state.epoch, -1]
    a.create("jobs")
    reqs = [b.publish("jobs", b"%d" % i) for i in range(5)]
    bus.flush()
    assert all(r.done and r.error is None for r in reqs)
    assert not arb.state.queues and arb.stats["batches_arbitrated"] >= 2
    assert a.state.arbiters == {arb.uid} and a.state.holders() == [a.uid, b.uid]
    for call in (arb.publish("jobs", b"x"), arb.acquire("jobs"), arb.create("other")):
        assert call.done and isinstance(call.error, QueueArbitrator)
    # the lifecycle's level: every holder announced it; the arbitrator never does
    purge = a.purge("jobs")
    bus.flush()
    assert purge.error is None and purge.result == 5


def test_one_holder_and_the_arbitrator_keep_the_queue_and_complete_calls():
    bus = group(3, 2)
    a, b, arb = bus.replicas
    bus.only(a, arb)  # b lost: a and the arbitrator are 2 of 3
    assert a.phase is Phase.ACTIVE
    p = a.publish("jobs", b"alone")
    bus.flush()
    assert p.done and p.error is None  # a majority of the holders: a itself
    bus.cut = set()
    bus.view()
    assert b.phase is Phase.ACTIVE and b.state.digest() == a.state.digest()


def test_a_2_2_split_with_the_arbitrator_keeps_one_side():
    bus = group(5, 4)
    a, b, c, d, arb = bus.replicas
    bus.only(a, b, arb)  # 3 of 5: primary
    p = b.publish("jobs", b"side")
    bus.flush()
    assert a.phase is Phase.ACTIVE and p.done and p.error is None
    bus.only(c, d, primary=False)
    assert c.phase is Phase.NOT_PRIMARY and isinstance(c.publish("jobs", b"no").error,
                                                       Exception)
    bus.cut = set()
    bus.view()
    assert c.phase is Phase.ACTIVE and d.phase is Phase.ACTIVE
    assert len({r.state.digest() for r in (a, b, c, d)}) == 1
    assert [e.body for e in c.state.queues["jobs"].msgs.values()] == [b"side"]


def test_holders_without_the_arbitrator_s_newest_epoch_do_not_take_the_queue():
    """Were a view primary with only holders of older epochs than its arbitrator's (the
    stack's own rule already prevents it), their state would lack the newest epoch's."""
    bus = group(3, 2)
    a, b, arb = bus.replicas
    bus.only(a, arb)
    a.publish("jobs", b"only a has it")
    bus.flush()
    bus.only(b, arb)  # as if primary
    assert b.phase is Phase.NOT_PRIMARY and b.stats["no_quorum"] == 1


def test_half_of_the_epoch_with_the_arbitrator_is_not_primary_for_the_queue():
    """Exactly half of an epoch of three holders and an arbitrator: even if the stack's
    tie-breaker made it primary, its one holder may lack what two holders confirmed."""
    bus = group(4, 3)
    a, b, c, arb = bus.replicas
    bus.only(c, arb)  # half of 4, the next primary id: the lease's case
    assert c.phase is Phase.NOT_PRIMARY


def test_an_arbitrator_first_in_the_view_leaves_expire_to_the_first_holder():
    bus = Bus(3, WorkQueueConfig(interest_linger_s=0.0, expire_interval_s=0.5))
    bus.replicas[0].config = ARB
    arb, a, b = bus.replicas
    bus.view()
    a.create("ttl", ttl_s=1.0)
    bus.flush()
    a.publish("ttl", b"old")
    bus.flush()
    assert a.state.queues["ttl"].depth == 1
    for t in (2.0, 3.0):
        bus.clock = t
        for r in bus.replicas:
            r.tick()
        bus.flush()
    assert a.state.queues["ttl"].depth == 0 and a.stats["expires_sent"] >= 1
    assert arb.stats["expires_sent"] == 0


def only_at(bus: Bus, members: list, *at) -> None:
    """A primary view of ``members`` whose state exchange completed only at the replicas
    ``at`` (the others were in the next view before it finished)."""
    bus.counter += 1
    bus.pid += 1
    addrs = [r.local for r in members]
    v = View(ViewId(addrs[0], bus.counter), tuple(addrs), True, bus.pid)
    positions = {r.uid: r.exchange_data() for r in members}
    for r in at:
        r.on_exchange([addrs[0].uid, bus.counter], positions)
        r.on_view(v)


def test_an_epoch_only_the_arbitrator_began_does_not_keep_the_queue_away():
    """Fresh seed 16140394: after a 2+2 split healed, a view's state exchange completed at
    the arbitrator alone; its epoch was then ahead of every holder's for good, and the queue
    never came back. Its holders are all here, and in earlier epochs: it completed nothing."""
    bus = group(5, 4)
    a, b, c, d, arb = bus.replicas
    only_at(bus, bus.replicas, arb)
    assert arb.state.epoch > a.state.epoch
    bus.view()
    assert [r.phase for r in bus.replicas] == [Phase.ACTIVE] * 4 + [Phase.ARBITER]
    p = c.publish("jobs", b"after")
    bus.flush()
    assert p.done and p.error is None


def test_an_epoch_the_arbitrator_began_with_absent_holders_keeps_the_queue_away():
    """Six holders and an arbitrator. The epoch {a, b, c, arbitrator} formed at a, b and
    the arbitrator only, and completed a publish there (2 of its 3 holders); c, d, e, f are
    most of the epoch before, but they and the arbitrator lack it."""
    bus = group(7, 6)
    a, b, c, d, e, f, arb = bus.replicas
    bus.cut = {x.local for x in (c, d, e, f)}
    only_at(bus, [a, b, c, arb], a, b, arb)
    p = a.publish("jobs", b"only a and b have it")
    bus.flush()
    assert p.done and p.error is None
    bus.only(c, d, e, f, arb)  # as if primary
    assert c.phase is Phase.NOT_PRIMARY and c.stats["no_quorum"] == 1


def test_an_arbitrator_that_moved_on_no_longer_counts_for_the_holders_epoch():
    """{a, b, arbitrator} completes a publish; {a, c, d, arbitrator} then forms at the
    arbitrator alone (so it completed nothing: c and d never began it). c, d and the
    arbitrator are 3 of the 5 of the epoch c and d are in, but the arbitrator moved on
    from it: counting it would take the queue without a's publish."""
    bus = group(5, 4)
    a, b, c, d, arb = bus.replicas
    bus.only(a, b, arb)
    p = a.publish("jobs", b"a and b have it")
    bus.flush()
    assert p.done and p.error is None
    bus.cut = {b.local}
    only_at(bus, [a, c, d, arb], arb)
    bus.only(c, d, arb)  # as if primary
    assert c.phase is Phase.NOT_PRIMARY and c.stats["no_quorum"] == 1
