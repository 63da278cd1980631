"""Unit tests of durable queues (stack/workqueue/durable.py and the durable replica): what a
replica journals, that it counts and reports only what is on disk, that replay gives its
state back exactly, and that a group whose every member restarted from its journal forms
its queue again (and waits when a majority of the last epoch did not come back). On the
in-memory total-order bus of test_workqueue_state; the journal is a list."""
from raygroups.stack.address import Address
from raygroups.stack.workqueue import Phase, Replica, WorkQueueConfig
from raygroups.stack.workqueue import durable
from raygroups.stack.workqueue.durable import ADOPT, REC, SNAP, Tracker
from raygroups.stack.workqueue.replica import _positions

from .test_workqueue_state import Bus

CFG = WorkQueueConfig(interest_linger_s=0.0)


class Disk:
    """One member's journal: records and the last snapshot, as a restart reads them."""

    def __init__(self):
        self.records, self.snapshot, self.tracker, self.n = [], None, Tracker(), 0

    def append(self, data: bytes) -> int:
        self.n += 1
        self.records.append((self.n, data))
        return self.n

    def sync(self, r: Replica) -> None:
        """Write everything the replica journaled, sync it and its snapshots, tell the
        replica."""
        snaps = self.tracker.route(r.take_journal(), self.append, lambda: self.n)
        for upto, img, _adopt in snaps:
            self.snapshot = (upto, img)
            self.records = [x for x in self.records if x[0] > upto]
        pos = self.tracker.durable(self.n, (u for u, _i, a in snaps if a))
        if pos is not None:
            r.on_durable(pos)

    def replay(self, cfg=CFG) -> durable.Recovered:
        return durable.replay(cfg, self.snapshot[1] if self.snapshot else None,
                              [d for _, d in self.records])


def durable_bus(n=3, cfg=CFG) -> tuple:
    bus = Bus(n, cfg)
    bus.replicas = [Replica(a, cfg, clock=lambda: bus.clock, durable=True) for a in bus.addrs]
    return bus, [Disk() for _ in range(n)]


def durable_queue() -> tuple:
    """Three durable replicas in one view with queue "q", settled: (bus, disks)."""
    bus, disks = durable_bus()
    bus.view()
    settle_all(bus, disks)
    bus.replicas[0].create("q")
    settle_all(bus, disks)
    return bus, disks


def settle_all(bus, disks, rounds=5) -> None:
    for _ in range(rounds):
        bus.flush()
        for r, d in zip(bus.replicas, disks):
            d.sync(r)
    bus.flush()


def promise_round(bus, disks) -> None:
    """The ballot's round after a view (durable.py): every disk syncs the epoch's promise,
    then the promises go out; the epoch takes effect."""
    for r, d in zip(bus.replicas, disks):
        if r.local not in bus.cut:
            d.sync(r)
    bus.flush()


def restarted(bus, disks, which, cfg=CFG) -> list:
    """New incarnations (new uids) of the members ``which``, from their journals; the
    others are fresh members with no journal."""
    k = 100 + len(bus.addrs) * bus.counter  # uids never used before
    bus.addrs = [Address(bytes([k + i]) * 16, f"m{i}") for i in range(len(bus.addrs))]
    reps = []
    for i, a in enumerate(bus.addrs):
        if i in which:
            reps.append(Replica(a, cfg, clock=lambda: bus.clock, durable=True,
                                recovered=disks[i].replay(cfg)))
        else:
            reps.append(Replica(a, cfg, clock=lambda: bus.clock, durable=True))
    bus.replicas = reps
    bus.pid = 0  # the stack's primary components begin a lineage again
    return reps


def test_a_durable_call_completes_once_a_majority_has_it_on_disk():
    bus, disks = durable_queue()
    a, b, c = bus.replicas
    req = a.publish("q", b"x")
    bus.flush()
    assert all(r.state.queues["q"].depth == 1 for r in bus.replicas)  # applied everywhere
    assert not req.done  # on no disk yet
    disks[0].sync(a)
    bus.flush()
    assert not req.done  # one of three
    disks[2].sync(c)
    bus.flush()
    assert req.done and req.error is None


def test_replay_gives_the_state_back_exactly_through_epochs_and_compactions():
    cfg = WorkQueueConfig(interest_linger_s=0.0, journal_compact_bytes=300)
    bus, disks = durable_bus(3, cfg)
    bus.view()
    a, b, c = bus.replicas
    a.create("q", "q.dead")
    settle_all(bus, disks)
    for i in range(30):
        b.publish("q", b"m%d" % i)
        if i % 7 == 0:
            settle_all(bus, disks)
    settle_all(bus, disks)
    acq = c.acquire("q", 4)
    settle_all(bus, disks)
    c.settle("accept", acq.result[0])
    c.settle("reject", acq.result[1])
    settle_all(bus, disks)
    bus.only(a, c)  # b cut off: a new epoch without it
    settle_all(bus, disks)
    a.publish("q", b"after")
    settle_all(bus, disks)
    assert a.stats["journal_compactions"] >= 1
    for r, d in zip((a, c), (disks[0], disks[2])):
        out = d.replay(cfg)
        state = out.state
        assert not out.cut and out.incarnations == [r.uid]
        assert (state.epoch, state.applied) == (r.state.epoch, r.state.applied)
        assert state.digest() == r.state.digest()
        assert state.levels == r.state.levels


def test_replay_stops_at_an_adoption_whose_snapshot_never_came():
    bus, disks = durable_bus()
    bus.view()
    a, b, c = bus.replicas
    a.create("q")
    settle_all(bus, disks)
    before = (c.state.epoch, c.state.applied, c.state.digest())
    bus.only(a, b)
    a.publish("q", b"while c was away")
    settle_all(bus, disks)
    bus.cut = set()
    bus.view()  # c is stale: once the epoch is promised, it adopts a's state
    promise_round(bus, disks)
    entries = c.take_journal()
    assert [e.kind for e in entries][:1] == [ADOPT]
    # the marker and what came after it reached the disk, the snapshot did not
    disks[2].records += [(100 + i, e.data) for i, e in enumerate(entries) if e.data]
    out = disks[2].replay()
    assert out.cut
    assert (out.state.epoch, out.state.applied, out.state.digest()) == before


def test_positions_after_an_adoption_wait_for_its_snapshot():
    t = Tracker()
    numbers = iter(range(1, 10))
    snaps = t.route([durable.Entry(REC, b"a", (1, 1)),
                     durable.Entry(ADOPT, b"m", (2, 0), b"image"),
                     durable.Entry(REC, b"b", (2, 1)),
                     durable.Entry(SNAP, None, None, b"compacted")],
                    lambda data: next(numbers), lambda: 3)
    assert snaps == [(2, b"image", True), (3, b"compacted", False)]
    assert t.durable(3) == (1, 1)  # the adopted state is not on disk yet
    assert t.durable(3) is None
    assert t.durable(3, adopted=[2]) == (2, 1)


def test_every_member_restarted_from_its_journal_forms_the_queue_again():
    bus, disks = durable_bus()
    bus.view()
    a, b, c = bus.replicas
    a.create("q")
    reqs = [b.publish("q", b"m%d" % i) for i in range(5)]
    settle_all(bus, disks)
    assert all(r.done and r.error is None for r in reqs)
    old_epoch, old_uids = a.state.epoch, [r.uid for r in bus.replicas]
    reps = restarted(bus, disks, which={0, 1, 2})
    for r, old in zip(reps, old_uids):
        assert r.exchange_data()[3] == [old]  # it stands for its old incarnation
    bus.view()  # primary id 1 again, below the journals' epoch
    assert all(r.phase is Phase.PROMISE for r in reps)
    promise_round(bus, disks)
    assert all(r.phase is Phase.ACTIVE for r in reps)
    assert all(r.state.epoch > old_epoch for r in reps)
    settle_all(bus, disks)  # the new epoch on most disks of the last one: established
    assert all(not r.joint and r.exchange_data()[4] == [] for r in reps)
    acq = reps[2].acquire("q", 5)
    settle_all(bus, disks)
    assert sorted(d.body for d in acq.result) == [b"m%d" % i for i in range(5)]


def test_without_a_majority_of_the_last_epoch_back_the_queue_waits():
    bus, disks = durable_bus()
    bus.view()
    a, b, c = bus.replicas
    a.create("q")
    b.publish("q", b"kept")
    settle_all(bus, disks)
    reps = restarted(bus, disks, which={0})  # one journal of three; two fresh members
    bus.view()
    assert all(r.phase is Phase.NOT_PRIMARY for r in reps)
    assert reps[0].stats["no_quorum"] == 1


def test_a_malformed_durable_position_is_refused():
    u = b"a" * 16
    order = [u]
    ok = [1, 2, [u], [b"x" * 16], [[u]], [1, 0], [u, 3], True]
    assert _positions({u: ok}, order)[u] == (1, 2, [u], [b"x" * 16], [[u]], [1, 0], [u, 3],
                                             True, None)  # a build before the ballot
    assert _positions({u: ok + [7]}, order)[u][8] == 7
    assert _positions({u: [1, 2, [u]]}, order)[u][3:] == ([], [], [], [], False, None)
    for bad in ([1, 2, [u], [b"x"]],                       # a field missing
                [1, 2, [u], ["not bytes"], [], [], [], True],
                [1, 2, [u], [b"x"] * 17, [], [], [], True],  # too many incarnations
                [1, 2, [u], [], [[u]], [], [], True],        # provisional without its base
                [1, 2, [u], [], [[u]], [1], [], True],
                [1, 2, [u], [], [], [], [], 1],              # not a bool
                [1, 2, [u], [], [], [], [], True, "7"],      # promised: not an int
                [1, 2, [u], [], [[u]] * 9, [1, 0], [], True]):  # too many lists
        assert _positions({u: bad}, order) is None, bad


def five_then_two_join() -> tuple:
    """Five durable replicas: a, b and c form epoch B with a queue, on every disk; then d
    and e join (epoch E: a, b and c begin it from their own state, d and e take a's)."""
    bus, disks = durable_bus(5)
    a, b, c, d, e = bus.replicas
    bus.only(a, b, c)
    a.create("q")
    settle_all(bus, disks)
    bus.cut = set()
    bus.view()
    promise_round(bus, disks)
    return bus, disks


def test_a_call_completes_only_once_its_epoch_is_on_most_disks_of_the_epoch_before():
    """Epoch B = {a, b, c}; d and e join (epoch E, all five). A publish in E applied and
    synced by a, d and e (three of five) does not complete while b and c have not synced
    E: every member of B could restart from a journal at B, and b and c, a majority of
    B, would form the queue from B without it. Once b has E on disk it completes."""
    bus, disks = five_then_two_join()
    a, b, c, d, e = bus.replicas
    assert a.joint == [[a.uid, b.uid, c.uid]]
    assert a.exchange_data()[4] == [[a.uid, b.uid, c.uid]]
    req = a.publish("q", b"x")
    for _ in range(3):
        bus.flush()
        for r, disk in ((a, disks[0]), (d, disks[3]), (e, disks[4])):
            disk.sync(r)
    bus.flush()
    assert all(r.synced[0] == a.state.epoch for r in (a, d, e))
    assert not req.done and a.joint
    disks[1].sync(b)
    bus.flush()
    assert req.done and req.error is None and not a.joint
    assert a.stats["epochs_established"] == 1


def test_a_view_without_most_of_the_epochs_an_unestablished_one_came_from_waits():
    bus, _disks = five_then_two_join()  # E, not on b's nor c's disk
    a, b, c, d, e = bus.replicas
    bus.only(a, d, e)  # three of E's five, one of B's three
    assert all(r.phase is Phase.NOT_PRIMARY for r in (a, d, e))
    assert a.stats["no_quorum_joint"] == 1


def settle(bus, pairs, rounds=5) -> None:
    """settle_all, syncing only the (replica, disk) ``pairs``."""
    for _ in range(rounds):
        bus.flush()
        for r, d in pairs:
            d.sync(r)
    bus.flush()


def two_epochs_from_one_state(promised: bool) -> None:
    """Epoch B on every disk. A view of all three begins an epoch (``promised``: every disk
    promised it first), only a syncs what it did there (three publishes), then every
    member loses power. b and c restart and form an epoch from B; a publish completes
    there (b and c have it on disk), but b crashes before it hears that the epoch is
    established. a and b restart: their journals hold two epochs from one state, a's with
    more batches. a and b must not take a's, nor the queue without "e2"; with c back, the
    queue has it."""
    bus, disks = durable_bus()
    a, b, c = bus.replicas
    bus.view()
    a.create("q")
    settle_all(bus, disks)
    bus.view()
    if promised:
        promise_round(bus, disks)
    early = [c.publish("q", b"e1-%d" % i) for i in range(3)]
    settle(bus, [(a, disks[0])])
    assert not any(r.done for r in early)  # on a's disk at most
    assert a.synced[0] == a.state.epoch or not promised
    _a1, b1, c1 = restarted(bus, disks, which={1, 2})  # a stays down
    bus.only(b1, c1)
    for _ in range(3):  # the ballot's round
        if b1.phase is Phase.ACTIVE and c1.phase is Phase.ACTIVE:
            break
        disks[1].sync(b1)
        disks[2].sync(c1)
        bus.flush()
    assert b1.phase is Phase.ACTIVE and b1.joint  # not established yet
    later = c1.publish("q", b"e2")
    bus.flush()
    disks[1].sync(b1)  # the epoch and "e2" on b's disk; b reports it, then crashes
    bus.flush()
    bus.cut.add(b1.local)
    settle(bus, [(c1, disks[2])])
    assert later.done and later.error is None  # on b's and c's disks
    assert b1.joint  # b never heard that the epoch is established
    a2, b2, _c2 = restarted(bus, disks, which={0, 1})  # c stays down
    bus.only(a2, b2)
    if a2.phase is not Phase.NOT_PRIMARY:  # it may wait for c; it must not go on without "e2"
        settle(bus, [(a2, disks[0]), (b2, disks[1])])
        assert b"e2" in [m.body for m in a2.state.queues["q"].msgs.values()]
    a3, b3, c3 = restarted(bus, disks, which={0, 1, 2})
    bus.view()
    settle_all(bus, disks)
    assert all(r.phase is Phase.ACTIVE for r in (a3, b3, c3))
    acq = b3.acquire("q", 10, many=True)
    settle_all(bus, disks)
    assert b"e2" in [d.body for d in acq.result]


def test_two_epochs_formed_from_one_state_across_a_power_cut_do_not_tie():
    """The durable ballot (Paxos's promise): the first epoch leaves no trace on a's disk
    before most disks promised its number. Without it, b and c numbered theirs alike and
    a's, with more batches, won: the acknowledged publish was gone."""
    two_epochs_from_one_state(promised=False)


def test_a_later_formation_numbers_itself_above_a_promised_epoch():
    """The first epoch was promised by every disk and is on a's with its batches: b and c,
    which promised it, number theirs above it, so theirs ranks first."""
    two_epochs_from_one_state(promised=True)


def test_a_durable_member_of_a_build_before_the_ballot_counts_as_promised():
    """It announces eight fields and never sends PROMISED (it forms at once, as that build
    does): a durable view with it goes on with the promises of the others, so a rolling
    upgrade from that build never waits for it."""
    bus, disks = durable_bus()
    a, b, c = bus.replicas
    b.exchange_data = lambda: Replica.exchange_data(b)[:8]
    bus.view()
    a.create("q")
    settle_all(bus, disks)
    bus.view()
    assert a.phase is Phase.PROMISE
    disks[0].sync(a)  # a's promise and b, which promises nothing: two of three
    bus.flush()
    assert a.phase is Phase.ACTIVE and c.phase is Phase.ACTIVE  # c counts a's and b
