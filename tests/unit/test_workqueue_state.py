"""Unit tests of the work queue's replicated state machine (stack/workqueue/state.py) and
of one member's replica (stack/workqueue/replica.py) on an in-memory total-order bus: no
stack, no sockets, no clock."""
import dataclasses

import pytest

from raygroups.stack.address import Address
from raygroups.stack.errors import MessageTooLarge
from raygroups.stack.message import Message
from raygroups.stack.view import View, ViewId
from raygroups.stack.workqueue import (NoSuchQueue, NotAcquired, Phase, QueueFull,
                                       QueueNotPrimary, QueueOutcomeUnknown, Replica,
                                       StaleEpoch, WorkQueueConfig)
from raygroups.stack.workqueue import codec
from raygroups.stack.workqueue.codec import (ACQUIRE, CANCEL, CONSUME, CREATE, DEQUEUE, ENQUEUE,
                                             OWNER_RELEASE, REJECT, RELEASE)
from raygroups.stack.workqueue.state import (FULL, MALFORMED, NO_QUEUE, NOT_ACQUIRED, NOT_OWNER,
                                             OK, RETRY, STALE_EPOCH, TOO_LARGE, QueueState,
                                             next_owner)

A, B, C, D = (bytes([i]) * 16 for i in range(1, 5))


def fresh(members=(A, B, C), epoch=1, **kw) -> QueueState:
    s = QueueState(**kw)
    s.begin_epoch(epoch, list(members))
    return s


def run(s, sender, *cmds, epoch=None):
    """Apply commands (without cseq) in one batch; returns [(code, data)]."""
    batch = [[i, *c] for i, c in enumerate(cmds)]
    return [(code, data) for _, code, data in s.apply(sender, s.epoch if epoch is None else epoch,
                                                      batch)]


def setup_queue(s, name="q", alternate=None, owner=A, **limits):
    assert run(s, owner, [CREATE, name, alternate, limits.get("depth"), limits.get("bytes")]) == \
        [(OK, None)]
    assert run(s, owner, [CONSUME, name]) == [(OK, None)]
    assert s.queues[name].owner == owner


def publish(s, sender, name, *seqs):
    return run(s, sender, *[[ENQUEUE, name, k, b"body-%d" % k] for k in seqs])


def acquire(s, member, name="q", n=1):
    [(code, data)] = run(s, member, [ACQUIRE, name, n])
    return code, [(e.mid, (e.tepoch, e.tok)) for e in data or ()]


def settle(s, member, op, name, mid, token):
    [(code, _)] = run(s, member, [op, name, mid[0], mid[1], token[0], token[1]])
    return code


# -- the state machine ------------------------------------------------------------------------
def test_publish_then_acquire_in_publish_order_by_the_owner_only():
    s = fresh()
    setup_queue(s)
    assert publish(s, B, "q", 1, 2) == [(OK, None), (OK, None)]
    assert publish(s, C, "q", 1) == [(OK, None)]
    assert acquire(s, B)[0] == NOT_OWNER  # only the owner's consumers acquire
    code, got = acquire(s, A, n=5)
    assert code == OK and [m for m, _ in got] == [(B, 1), (B, 2), (C, 1)]
    assert len({t for _, t in got}) == 3  # every acquisition has its own token
    assert s.queues["q"].available == 0 and len(s.queues["q"].acquired) == 3


def test_release_requeues_at_the_original_position_and_marks_redelivery():
    s = fresh()
    setup_queue(s)
    publish(s, B, "q", 1, 2, 3)
    _, [(m1, t1), (m2, t2)] = acquire(s, A, n=2)
    assert settle(s, A, RELEASE, "q", m2, t2) == OK
    assert settle(s, A, RELEASE, "q", m1, t1) == OK
    _, got = acquire(s, A, n=3)
    assert [m for m, _ in got] == [m1, m2, (B, 3)]  # requeued ones first, in their order
    assert s.queues["q"].msgs[m1].deliveries == 2


def test_accept_removes_everywhere_and_only_once():
    s = fresh()
    setup_queue(s)
    publish(s, B, "q", 1)
    _, [(m, t)] = acquire(s, A)
    assert settle(s, A, DEQUEUE, "q", m, t) == OK
    assert s.queues["q"].depth == 0 and s.queues["q"].bytes == 0
    assert settle(s, A, DEQUEUE, "q", m, t) == NOT_ACQUIRED
    assert settle(s, A, RELEASE, "q", m, t) == NOT_ACQUIRED
    assert settle(s, B, DEQUEUE, "q", m, t) == NOT_ACQUIRED


def test_settle_needs_the_holder_and_its_token():
    s = fresh()
    setup_queue(s)
    publish(s, B, "q", 1)
    _, [(m, t)] = acquire(s, A)
    assert settle(s, B, DEQUEUE, "q", m, t) == NOT_ACQUIRED      # another member
    assert settle(s, A, DEQUEUE, "q", m, (t[0], t[1] + 1)) == NOT_ACQUIRED  # another token
    assert settle(s, A, DEQUEUE, "q", (B, 9), t) == NOT_ACQUIRED
    assert settle(s, A, DEQUEUE, "nope", m, t) == NO_QUEUE


def test_reject_moves_to_the_alternate_exactly_once():
    s = fresh()
    events = []
    s.listener = events.append
    setup_queue(s, "q", alternate="q.dead")
    assert "q.dead" in s.queues  # created with it
    publish(s, B, "q", 1)
    _, [(m, t)] = acquire(s, A)
    assert settle(s, A, REJECT, "q", m, t) == OK
    assert settle(s, A, REJECT, "q", m, t) == NOT_ACQUIRED
    assert list(s.queues["q.dead"].msgs) == [m] and s.queues["q"].depth == 0
    assert [e[0] for e in events if e[0] in ("reject", "rejected")] == ["reject", "rejected"]
    assert s.queues["q.dead"].msgs[m].body == b"body-1"


def test_reject_without_alternate_discards():
    s = fresh()
    setup_queue(s)
    publish(s, B, "q", 1)
    _, [(m, t)] = acquire(s, A)
    assert settle(s, A, REJECT, "q", m, t) == OK
    assert all(q.depth == 0 for q in s.queues.values())


def test_rejected_messages_go_beyond_the_alternates_limits():
    s = fresh()
    setup_queue(s, "q", alternate="dead")
    s.queues["dead"].max_depth = 1
    publish(s, B, "q", 1, 2)
    _, got = acquire(s, A, n=2)
    for m, t in got:
        assert settle(s, A, REJECT, "q", m, t) == OK
    assert s.queues["dead"].depth == 2  # a move, not new data


def test_depth_and_bytes_limits():
    s = fresh()
    setup_queue(s, "d", depth=2)
    assert publish(s, B, "d", 1, 2, 3) == [(OK, None), (OK, None), (FULL, None)]
    setup_queue(s, "b", bytes=11)
    assert publish(s, B, "b", 1, 2) == [(OK, None), (FULL, None)]  # 6 + 6 bytes > 11
    s2 = fresh(max_message_size=4)
    setup_queue(s2)
    assert publish(s2, B, "q", 1) == [(TOO_LARGE, None)]
    assert publish(s, B, "nope", 1) == [(NO_QUEUE, None)]


def test_a_batch_from_another_epoch_is_refused_whole():
    s = fresh(epoch=3)
    setup_queue(s)
    assert [c for c, _ in publish(s, B, "q", 1)] == [OK]
    before = s.applied
    assert run(s, B, [ENQUEUE, "q", 2, b"x"], [ENQUEUE, "q", 3, b"y"], epoch=2) == \
        [(RETRY, None), (RETRY, None)]
    assert s.queues["q"].depth == 1 and s.applied == before + 1


def test_member_left_requeues_its_acquisitions_and_stale_tokens_fail():
    s = fresh((A, B, C), epoch=1)
    setup_queue(s)
    run(s, B, [CONSUME, "q"])
    publish(s, C, "q", 1, 2)
    _, [(m1, t1)] = acquire(s, A)
    run(s, A, [OWNER_RELEASE, "q"])
    assert s.queues["q"].owner == B
    _, [(m2, t2)] = acquire(s, B)
    s.begin_epoch(2, [B, C])  # A left (crash or partition): what it held comes back
    q = s.queues["q"]
    assert q.msgs[m1].holder is None and q.available == 1
    assert q.msgs[m2].holder == B  # B stayed: its acquisition carries over
    assert A not in q.consumers
    assert settle(s, B, DEQUEUE, "q", m2, t2) == OK  # still valid in the new epoch
    s.begin_epoch(3, [A, B, C])  # A is back (a merge): its old delivery is stale
    assert settle(s, A, DEQUEUE, "q", m1, t1) == STALE_EPOCH


def test_ownership_moves_round_interested_members_in_member_order():
    s = fresh((A, B, C, D))
    setup_queue(s, owner=C)
    for m in (A, D):
        run(s, m, [CONSUME, "q"])
    q = s.queues["q"]
    assert q.owner == C and q.consumers == [C, A, D]
    run(s, C, [OWNER_RELEASE, "q"])
    assert q.owner == D          # next after C in member order A B C D
    run(s, D, [OWNER_RELEASE, "q"])
    assert q.owner == A          # circular
    run(s, B, [OWNER_RELEASE, "q"])
    assert q.owner == A          # only the owner can pass it on
    run(s, A, [CANCEL, "q"])
    assert q.owner == C and A not in q.consumers
    run(s, D, [CANCEL, "q"])
    run(s, C, [OWNER_RELEASE, "q"])
    assert q.owner == C          # nobody else interested: keeps it
    run(s, C, [CANCEL, "q"])
    assert q.owner is None       # nobody interested: unowned
    run(s, B, [CONSUME, "q"])
    assert q.owner == B          # the first interested member takes it


def test_owner_leaving_passes_ownership_on():
    s = fresh((A, B, C))
    setup_queue(s, owner=B)
    run(s, A, [CONSUME, "q"])
    run(s, C, [CONSUME, "q"])
    s.begin_epoch(2, [A, C])
    assert s.queues["q"].owner == C  # after B in the old order


def test_next_owner():
    assert next_owner([A, B, C], B, {A, C}) == C
    assert next_owner([A, B, C], C, {A, C}) == A
    assert next_owner([A, B, C], C, {C}) == C
    assert next_owner([A, B, C], C, {C}, skip=C) is None
    assert next_owner([A, B, C], D, {B, C}) == B


def test_snapshot_restore_is_exact():
    s = fresh()
    setup_queue(s, "q", alternate="dead")
    run(s, B, [CONSUME, "q"])
    publish(s, B, "q", 1, 2, 3, 4)
    _, got = acquire(s, A, n=3)
    settle(s, A, RELEASE, "q", *got[1])
    settle(s, A, REJECT, "q", *got[2])
    copy = QueueState()
    copy.restore(s.snapshot())
    assert copy.digest() == s.digest() and copy.content() == s.content()
    for x in (s, copy):  # they go on identically
        acquire(x, A, n=2)
        publish(x, C, "q", 1)
        run(x, A, [OWNER_RELEASE, "q"])
    assert copy.digest() == s.digest()
    assert copy.queues["q"].owner == B


def test_malformed_commands_are_refused_alike():
    s = fresh()
    setup_queue(s)
    res = s.apply(B, s.epoch, [[1, ENQUEUE, "q"], [2, 99], [3, ENQUEUE, "q", "x", b"b"],
                               "junk", [4, CREATE, 7, None, None, None],
                               [5, ENQUEUE, "q", 1, b"ok"]])
    assert [code for _, code, _ in res] == [MALFORMED] * 5 + [OK]
    assert s.apply(B, s.epoch, "junk") == []


# -- the replica, on an in-memory total-order bus ---------------------------------------------
class Bus:
    """Replicas in one view; ``flush()`` hands everything sent (ordered messages in one total
    order, unicasts to their destination) to every member, until nothing is left."""

    def __init__(self, n=3, config=None):
        self.addrs = [Address(bytes([i + 1]) * 16, f"m{i}") for i in range(n)]
        self.clock = 0.0
        self.config = config or WorkQueueConfig(interest_linger_s=0.0)
        self.replicas = [Replica(a, self.config, clock=lambda: self.clock) for a in self.addrs]
        self.counter = 0
        self.pid = 0
        self.cut = set()  # replicas that receive nothing (isolated)

    def view(self, members=None, primary=True):
        self.counter += 1
        if primary:
            self.pid += 1
        members = members or self.addrs
        v = View(ViewId(members[0], self.counter), tuple(members), primary,
                 self.pid if primary else 0)
        # the state exchange of the primary layer: every member's position, then the view
        here = [r for r in self.replicas if r.local in members and r.local not in self.cut]
        positions = {r.uid: r.exchange_data() for r in here}
        for r in here:
            r.on_exchange([members[0].uid, self.counter], positions)
            r.on_view(v)
        self.flush()
        return v

    def only(self, *keep, primary=True):
        """A view of the replicas ``keep`` (in this order); the others receive nothing."""
        self.cut = {r.local for r in self.replicas if r not in keep}
        return self.view([r.local for r in keep], primary)

    def flush(self, rounds=50):
        for _ in range(rounds):
            out = [(r, o) for r in self.replicas if r.local not in self.cut
                   for o in r.take_outgoing()]
            if not out:
                return
            for r, (dest, payload, _ordered) in out:
                for x in self.replicas:
                    if x.local in self.cut or (dest is not None and x.local != dest) or \
                            (x.view is not None and r.local not in x.view.members):
                        continue
                    x.on_message(Message(dest, payload, sender=r.local))


def test_replicas_reconcile_and_serve():
    bus = Bus()
    bus.view()
    assert all(r.phase is Phase.ACTIVE for r in bus.replicas)
    a, b, c = bus.replicas
    assert b.stats["batches_sent"] == 1  # its queue level (LEVEL), once per epoch
    done = []
    a.create("jobs", "jobs.dead", callback=done.append)
    reqs = [b.publish("jobs", b"%d" % i) for i in range(10)]
    bus.flush()
    assert done and done[0].error is None
    assert all(r.done and r.error is None for r in reqs)
    assert b.stats["batches_sent"] == 2  # ten publishes in one turn: one multicast
    acq = c.acquire("jobs", 3)
    bus.flush()
    assert acq.done and [d.body for d in acq.result] == [b"0", b"1", b"2"]
    s = [c.settle("accept", acq.result[0]), c.settle("release", acq.result[1]),
         c.settle("reject", acq.result[2])]
    bus.flush()
    assert all(r.done and r.error is None for r in s)
    assert len({r.state.digest() for r in bus.replicas}) == 1
    q = a.state.queues
    assert q["jobs"].depth == 8 and q["jobs.dead"].depth == 1


def test_call_completes_only_when_a_majority_applied_it():
    bus = Bus(3)
    bus.view()
    a, b, c = bus.replicas
    a.create("q")
    bus.flush()
    bus.cut = {b.local, c.local}  # a alone applies its own batch
    req = a.publish("q", b"x")
    bus.flush()
    assert a.state.queues["q"].depth == 1 and not req.done
    bus.cut = {c.local}
    b.on_message(Message(None, codec.encode([codec.BATCH, a.state.epoch,
                                             [[req.cseq, ENQUEUE, "q", req.args[1], b"x"]]]),
                         sender=a.local))
    bus.flush()  # b applied it and reports APPLIED: 2 of 3
    assert req.done and req.error is None


def test_an_older_applied_report_arriving_late_does_not_undo_a_newer_one():
    """APPLIED goes by multicast (to everyone) or unicast (to the senders): two streams with
    no order between them, so b's report of 0 batches may arrive after its report of 1."""
    bus = Bus(3)
    bus.view()
    a, b, c = bus.replicas
    a.create("q")
    bus.flush()
    bus.cut = {c.local}
    req = a.publish("q", b"x")
    out = a.take_outgoing()
    for dest, payload, _ in out:
        b.on_message(Message(dest, payload, sender=a.local))
        a.on_message(Message(dest, payload, sender=a.local))
    applied = b.state.applied
    late = Message(None, codec.encode([codec.APPLIED, b.state.epoch, applied - 1]),
                   sender=b.local)
    now = Message(a.local, codec.encode([codec.APPLIED, b.state.epoch, applied]),
                  sender=b.local)
    a.on_message(now)
    assert req.done and req.error is None
    a.on_message(late)
    assert a.acks[b.uid] == (b.state.epoch, applied)
    req2 = a.publish("q", b"y")
    for dest, payload, _ in a.take_outgoing():
        a.on_message(Message(dest, payload, sender=a.local))
    assert not req2.done  # only a applied it: a late report of b must not count for it


def test_local_ack_mode_completes_on_local_delivery():
    bus = Bus(3, WorkQueueConfig(ack="local"))
    bus.view()
    a = bus.replicas[0]
    a.create("q")
    bus.flush()
    bus.cut = {r.local for r in bus.replicas[1:]}
    req = a.publish("q", b"x")
    bus.flush()
    assert req.done and req.error is None


def test_stale_member_gets_the_donors_state():
    bus = Bus(3)
    bus.view()
    a, b, c = bus.replicas
    a.create("q")
    bus.flush()
    bus.cut = {c.local}  # c misses what follows
    reqs = [a.publish("q", b"%d" % i) for i in range(5)]
    bus.flush()
    assert all(r.done for r in reqs) and c.state.queues["q"].depth == 0
    bus.cut = set()
    bus.view()  # the next primary view: c is behind and gets the state
    assert c.stats["snapshots_received"] == 1 and a.stats["snapshots_sent"] == 1
    assert len({r.state.digest() for r in bus.replicas}) == 1
    assert c.phase is Phase.ACTIVE and c.state.queues["q"].depth == 5


def test_the_epoch_is_decided_in_the_views_own_exchange_so_a_crash_after_it_strands_nothing():
    """The work queue campaign's seed 14000110 in miniature. The last epoch is {a, b}; the
    merge view of all five is primary; a, its donor, crashes right after installing it. The
    epoch of the merge view was decided from the positions in its state exchange, before
    anyone could crash out of a second round: b began it, so the next view (b..e, a
    majority of the five) serves, and the others get b's state."""
    bus = Bus(5)
    bus.view()
    a, b, c, d, e = bus.replicas
    a.create("q")
    bus.flush()
    bus.view([a.local, b.local, c.local])
    bus.view([a.local, b.local])
    assert a.state.members == [a.uid, b.uid]
    pubs = [a.publish("q", b"%d" % i) for i in range(3)]
    bus.flush()
    assert all(p.done and p.error is None for p in pubs)
    members = [r.local for r in bus.replicas]
    bus.counter += 1
    bus.pid += 1
    merged = View(ViewId(a.local, bus.counter), tuple(members), True, bus.pid)
    positions = {r.uid: r.exchange_data() for r in bus.replicas}
    for r in bus.replicas:
        r.on_exchange([a.uid, bus.counter], positions)
        r.on_view(merged)
    bus.cut = {a.local}  # a crashes before its snapshots go out
    assert b.phase is Phase.ACTIVE and b.state.members == [r.uid for r in bus.replicas]
    bus.view([b.local, c.local, d.local, e.local])
    assert all(r.phase is Phase.ACTIVE for r in (b, c, d, e))
    assert {r.state.queues["q"].depth for r in (b, c, d, e)} == {3}


def test_a_member_missing_from_the_exchange_keeps_the_queue_waiting():
    """No position from a member (or a malformed one): every member decides alike that
    the view cannot serve the queue."""
    bus = Bus(3)
    bus.view()
    a, b, c = bus.replicas
    bus.counter += 1
    bus.pid += 1
    v = View(ViewId(a.local, bus.counter), (a.local, b.local, c.local), True, bus.pid)
    for bad in ({a.uid: a.exchange_data(), b.uid: b.exchange_data()},
                {a.uid: a.exchange_data(), b.uid: b.exchange_data(), c.uid: [1, "x", []]}):
        for r in bus.replicas:
            r.on_exchange([a.uid, bus.counter], bad)
            r.on_view(v)
        assert all(r.phase is Phase.NOT_PRIMARY for r in bus.replicas)
        assert all(r.stats["positions_missing"] >= 1 for r in bus.replicas)
        bus.counter += 1
        v = View(ViewId(a.local, bus.counter), v.members, True, bus.pid)


def test_minority_refuses_and_unknown_outcomes():
    bus = Bus(3)
    bus.view()
    a, b, c = bus.replicas
    a.create("q")
    bus.flush()
    bus.cut = {b.local, c.local}
    pending = a.publish("q", b"x")  # applied by a alone, not confirmed
    bus.flush()
    bus.cut = set()
    sent = a.publish("q", b"y")     # sent, never delivered
    a.take_outgoing()
    bus.view([a.local], primary=False)
    assert isinstance(pending.error, QueueOutcomeUnknown)
    assert isinstance(sent.error, QueueOutcomeUnknown)
    with_err = a.publish("q", b"z")
    assert isinstance(with_err.error, QueueNotPrimary) and \
        not isinstance(with_err.error, QueueOutcomeUnknown)
    acq = a.acquire("q")
    assert isinstance(acq.error, QueueNotPrimary)


def test_errors_are_typed():
    bus = Bus(1)
    bus.view()
    (a,) = bus.replicas
    a.create("q", max_depth=1)
    bus.flush()
    ok, full, missing = a.publish("q", b"1"), a.publish("q", b"2"), a.publish("nope", b"3")
    bus.flush()
    assert ok.error is None
    assert isinstance(full.error, QueueFull)
    assert isinstance(missing.error, NoSuchQueue)
    with pytest.raises(MessageTooLarge):
        a.publish("q", b"x" * (a.config.max_message_size + 1))
    acq = a.acquire("q")
    bus.flush()
    d = acq.result[0]
    first, second = a.settle("accept", d), a.settle("accept", d)
    bus.flush()
    assert first.error is None and isinstance(second.error, NotAcquired)


def test_stale_epoch_after_a_partition():
    bus = Bus(3)
    bus.view()
    a, b, c = bus.replicas
    a.create("q")
    a.publish("q", b"x")
    bus.flush()
    acq = c.acquire("q")
    bus.flush()
    held = acq.result[0]
    bus.cut = {c.local}  # c is cut off; a and b go on without it
    bus.view([a.local, b.local])
    assert a.state.queues["q"].acquired == {}  # requeued
    bus.cut = set()
    bus.view()  # c is back
    late = c.settle("accept", held)
    bus.flush()
    assert isinstance(late.error, StaleEpoch)


def test_ownership_time_slice_and_waiting_consumers():
    bus = Bus(2, WorkQueueConfig(time_slice_s=1.0, interest_linger_s=0.0))
    bus.view()
    a, b = bus.replicas
    a.create("q")
    bus.flush()
    wa, wb = a.acquire("q", 100, many=True), b.acquire("q")
    bus.flush()
    q = a.state.queues["q"]
    assert q.owner == a.uid and q.consumers == [a.uid, b.uid]
    for i in range(3):
        a.publish("q", b"%d" % i)
    bus.flush()
    assert wa.done and len(wa.result) == 3 and not wb.done  # b waits: a owned the queue
    assert q.owner == b.uid  # a has no consumer left: it cancelled, ownership passed on
    a.publish("q", b"late")
    bus.flush()
    assert wb.done and wb.result[0].body == b"late"
    assert q.owner is None and q.consumers == []  # b's consumer is done too


def test_time_slice_passes_ownership_while_busy():
    bus = Bus(2, WorkQueueConfig(time_slice_s=1.0, interest_linger_s=0.0))
    bus.view()
    a, b = bus.replicas
    a.create("q")
    bus.flush()
    wa, wb = a.acquire("q"), b.acquire("q")
    bus.flush()
    assert a.state.queues["q"].owner == a.uid
    wa2 = a.acquire("q")  # a stays busy (waiting consumers), but its slice ends
    bus.clock += 1.5
    for r in bus.replicas:
        r.tick()
    bus.flush()
    assert a.state.queues["q"].owner == b.uid and a.stats["time_slices"] == 1
    a.publish("q", b"x")
    bus.flush()
    assert wb.done and wb.result and not wa.done and not wa2.done


def test_config_defaults_documented():
    for f in dataclasses.fields(WorkQueueConfig):
        assert f.default is not dataclasses.MISSING
