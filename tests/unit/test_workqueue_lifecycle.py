"""Unit tests of the work queue's lifecycle (stack/workqueue/state.py, replica.py): purge,
delete, the overflow policies, the message TTL and EXPIRE, the duplicate check ahead of the
limits, the gate on every member's queue level, and snapshots of version 1 and 2."""
import msgpack
import pytest

from raygroups.stack.workqueue import (NoSuchQueue, Phase, QueueFull, QueueUnsupported,
                                       Replica, WorkQueueConfig)
from raygroups.stack.workqueue.codec import (ACQUIRE, CONSUME, CREATE, DECLARE, DELETE,
                                             DEQUEUE, ENQUEUE, EXPIRE, LEVEL, PURGE, REJECT)
from raygroups.stack.workqueue.state import (FULL, LIFECYCLE_LEVEL, MALFORMED, NO_QUEUE,
                                             NOT_ACQUIRED, OK, UNSUPPORTED, QueueState)

from .test_workqueue_state import A, B, C, Bus, acquire, publish, run, settle


def lifecycle(members=(A, B, C)) -> QueueState:
    """A state whose epoch's members all announced the lifecycle's level."""
    s = QueueState()
    s.begin_epoch(1, list(members))
    for m in members:
        assert run(s, m, [LEVEL, LIFECYCLE_LEVEL]) == [(OK, None)]
    return s


def declare(s, name="q", alternate=None, depth=None, nbytes=None, overflow="reject_publish",
            ttl_s=None, owner=A):
    assert run(s, owner, [DECLARE, name, alternate, depth, nbytes, overflow, ttl_s]) == \
        [(OK, None)]
    assert run(s, owner, [CONSUME, name]) == [(OK, None)]


def stamped(s, sender, name, seq, ts, body=None):
    [(code, _)] = run(s, sender, [ENQUEUE, name, seq, body or b"body-%d" % seq, ts])
    return code


def queues_of(s):
    """The queues of the snapshot (the digest also counts the batches applied)."""
    return msgpack.unpackb(s.snapshot(), raw=False)[5]


def seqs(s, name):
    return sorted(mid[1] for mid in s.queues[name].msgs)


# -- purge and delete -------------------------------------------------------------------------
def test_purge_drops_the_available_messages_and_keeps_what_consumers_hold():
    s = lifecycle()
    declare(s, "q", alternate="dead")
    publish(s, B, "q", 1, 2, 3, 4)
    _, got = acquire(s, A, n=1)
    assert run(s, C, [PURGE, "q"]) == [(OK, 3)]
    assert seqs(s, "q") == [1] and s.queues["q"].available == 0
    assert s.queues["q"].counters[5] == 3 and not s.queues["dead"].msgs  # dropped, not moved
    assert settle(s, A, DEQUEUE, "q", *got[0]) == OK  # the held one is still settlable
    assert run(s, C, [PURGE, "q"]) == [(OK, 0)]
    assert run(s, C, [PURGE, "nope"]) == [(NO_QUEUE, None)]


def test_delete_removes_the_queue_and_its_held_deliveries_become_unsettlable():
    s = lifecycle()
    declare(s, "q")
    publish(s, B, "q", 1, 2, 3)
    _, got = acquire(s, A, n=1)
    assert run(s, C, [DELETE, "q"]) == [(OK, 3)]
    assert "q" not in s.queues
    assert publish(s, B, "q", 4) == [(NO_QUEUE, None)]
    assert run(s, A, [ACQUIRE, "q", 1]) == [(NO_QUEUE, None)]
    assert settle(s, A, DEQUEUE, "q", *got[0]) == NO_QUEUE
    assert run(s, C, [DELETE, "q"]) == [(NO_QUEUE, None)]
    # created again: a new, empty queue; the old delivery is not held by anyone there
    assert run(s, A, [CREATE, "q", None, None, None]) == [(OK, None)]
    assert s.queues["q"].depth == 0
    assert settle(s, A, DEQUEUE, "q", *got[0]) == NOT_ACQUIRED


# -- overflow ---------------------------------------------------------------------------------
def test_reject_publish_refuses_and_dead_letter_oldest_moves_the_oldest_available():
    s = lifecycle()
    declare(s, "r", depth=2)
    assert publish(s, B, "r", 1, 2, 3) == [(OK, None), (OK, None), (FULL, None)]
    declare(s, "d", alternate="d.dead", depth=3, overflow="dead_letter_oldest")
    publish(s, B, "d", 1, 2, 3)
    _, got = acquire(s, A, "d", n=1)  # seq 1 is held: it stays
    assert publish(s, B, "d", 4, 5) == [(OK, None), (OK, None)]
    assert seqs(s, "d") == [1, 4, 5] and seqs(s, "d.dead") == [2, 3]
    assert s.queues["d"].counters[7] == 2 and s.queues["d"].counters[8] == 0
    # everything available went, the rest is held: no room, refused, nothing moved
    _, more = acquire(s, A, "d", n=2)
    assert publish(s, B, "d", 6) == [(FULL, None)]
    assert seqs(s, "d") == [1, 4, 5] and seqs(s, "d.dead") == [2, 3]


def test_dead_letter_oldest_by_bytes_and_without_an_alternate_drops_and_counts():
    s = lifecycle()
    declare(s, "d", nbytes=30, overflow="dead_letter_oldest")
    for k in (1, 2, 3):
        assert run(s, B, [ENQUEUE, "d", k, b"x" * 10]) == [(OK, None)]
    assert run(s, B, [ENQUEUE, "d", 4, b"y" * 15]) == [(OK, None)]  # needs two to go
    assert seqs(s, "d") == [3, 4] and s.queues["d"].bytes == 25
    assert s.queues["d"].counters[7] == 2 and s.queues["d"].counters[8] == 2
    assert run(s, B, [ENQUEUE, "d", 5, b"z" * 31]) == [(FULL, None)]  # never fits
    assert seqs(s, "d") == [3, 4]


def test_a_queue_that_is_its_own_alternate_drops_what_it_dead_letters():
    s = lifecycle()
    declare(s, "q", alternate="q", depth=2, overflow="dead_letter_oldest", ttl_s=1.0)
    stamped(s, B, "q", 1, 0.0)
    stamped(s, B, "q", 2, 0.0)
    assert stamped(s, B, "q", 3, 0.0) == OK  # seq 1 goes, not round and round
    assert seqs(s, "q") == [2, 3] and s.queues["q"].counters[8] == 1
    run(s, A, [EXPIRE, 5.0])
    assert seqs(s, "q") == [] and s.queues["q"].counters[8] == 3


@pytest.mark.parametrize("overflow", ["reject_publish", "dead_letter_oldest"])
def test_a_retried_publish_is_a_duplicate_before_it_meets_the_limits(overflow):
    s = lifecycle()
    declare(s, "q", alternate="dead", depth=2, overflow=overflow)
    publish(s, B, "q", 1, 2)
    before = queues_of(s)
    assert publish(s, B, "q", 2) == [(OK, None)]  # the same message: stored once, not full
    assert stamped(s, B, "q", 1, 5.0) == OK
    assert queues_of(s) == before and not s.queues["dead"].msgs


# -- the TTL ----------------------------------------------------------------------------------
def test_expire_dead_letters_what_outlived_the_ttl_by_the_publishers_timestamps():
    s = lifecycle()
    declare(s, "q", alternate="dead", ttl_s=10.0)
    assert stamped(s, B, "q", 1, 100.0) == OK
    assert stamped(s, C, "q", 1, 105.0) == OK
    assert publish(s, B, "q", 2) == [(OK, None)]  # no timestamp: counted from the next EXPIRE
    assert stamped(s, B, "q", 3, 100.0) == OK
    _, got = acquire(s, A, n=1)  # B's 1 is held: a consumer's message does not expire
    assert run(s, A, [EXPIRE, 109.0]) == [(OK, None)]
    assert s.queues["q"].depth == 4
    assert run(s, A, [EXPIRE, 111.0]) == [(OK, None)]  # B's 3 (100 + 10 <= 111)
    assert sorted(s.queues["dead"].msgs) == [(B, 3)]
    assert run(s, A, [EXPIRE, 119.0]) == [(OK, None)]  # C's 1, and B's 2 (seen at 109)
    assert sorted(s.queues["dead"].msgs) == [(B, 2), (B, 3), (C, 1)]
    assert list(s.queues["q"].msgs) == [(B, 1)] and s.queues["q"].counters[6] == 3
    assert settle(s, A, REJECT, "q", *got[0]) == OK  # to the alternate, as before


def test_expire_without_an_alternate_drops_and_counts_and_applies_alike_everywhere():
    states = [lifecycle(), lifecycle()]
    for s in states:
        declare(s, "q", ttl_s=1.0)
        stamped(s, B, "q", 1, 10.0)
        stamped(s, B, "q", 2, 12.0)
        run(s, C, [EXPIRE, 11.5])  # the expirer's clock, not the replica's
    assert states[0].digest() == states[1].digest()
    s = states[0]
    assert seqs(s, "q") == [2] and s.queues["q"].counters[6] == 1 and s.queues["q"].counters[8] == 1
    assert run(s, C, [EXPIRE, "soon"]) == [(MALFORMED, None)]
    assert stamped(s, B, "q", 3, float("nan")) == MALFORMED and seqs(s, "q") == [2]


# -- the gate ---------------------------------------------------------------------------------
def test_lifecycle_commands_do_nothing_unless_every_member_announced_the_level():
    s = QueueState()
    s.begin_epoch(1, [A, B, C])
    run(s, A, [CREATE, "q", None, None, None])
    publish(s, B, "q", 1)
    run(s, A, [LEVEL, LIFECYCLE_LEVEL])
    run(s, B, [LEVEL, LIFECYCLE_LEVEL])  # C (an older build) announces nothing
    before = queues_of(s)
    assert run(s, A, [PURGE, "q"], [DELETE, "q"], [DECLARE, "t", None, None, None,
                                                   "reject_publish", 5.0],
               [EXPIRE, 99.0]) == [(UNSUPPORTED, None)] * 4
    assert stamped(s, B, "q", 2, 1.0) == UNSUPPORTED
    assert queues_of(s) == before
    run(s, C, [LEVEL, LIFECYCLE_LEVEL])
    assert run(s, A, [PURGE, "q"]) == [(OK, 1)]
    s.begin_epoch(2, [A, B, C])  # a new epoch: everyone announces again
    assert run(s, A, [PURGE, "q"]) == [(UNSUPPORTED, None)]


def test_the_replica_waits_for_the_levels_then_refuses_with_queue_unsupported():
    bus = Bus(3, WorkQueueConfig(interest_linger_s=0.0, lifecycle_wait_s=2.0))
    bus.replicas[2].level = 1  # an older build: it announces nothing
    bus.view()
    a = bus.replicas[0]
    created = a.create("q")
    bus.flush()
    assert created.error is None
    reqs = [a.purge("q"), a.delete("q"), a.create("t", ttl_s=1.0)]
    bus.flush()
    assert not any(r.done for r in reqs)  # waiting for c's level
    bus.clock = 2.5
    a.tick()
    bus.flush()
    assert all(isinstance(r.error, QueueUnsupported) for r in reqs), reqs
    assert "q" in a.state.queues and "t" not in a.state.queues
    # c upgraded: the next view announces it, and the calls go through
    bus.replicas[2].level = LIFECYCLE_LEVEL
    bus.view()
    purge = a.purge("q")
    bus.flush()
    assert purge.done and purge.error is None and purge.result == 0


def test_a_lifecycle_call_waits_for_the_announcements_of_a_new_epoch():
    bus = Bus(3)
    a, b, c = bus.replicas
    purge = a.purge("q")  # before any view: it waits for the epoch's levels
    bus.view()
    assert purge.done and isinstance(purge.error, NoSuchQueue)
    assert a.state.level() == Replica.level  # every member announced this build's


# -- the replica: purge, delete, queues(), overflow, EXPIRE -----------------------------------
def test_replica_purge_delete_and_queues():
    bus = Bus(3)
    bus.view()
    a, b, c = bus.replicas
    a.create("jobs", "jobs.dead", max_depth=3, overflow="dead_letter_oldest")
    pubs = [b.publish("jobs", b"%d" % i) for i in range(5)]
    bus.flush()
    assert all(p.error is None for p in pubs)
    info = c.queues()
    assert info["jobs"]["depth"] == 3 and info["jobs"]["overflow"] == "dead_letter_oldest"
    assert info["jobs"]["overflowed"] == 2 and info["jobs.dead"]["depth"] == 2
    acq = c.acquire("jobs", 1)
    bus.flush()
    held = acq.result[0]
    purge = b.purge("jobs")
    bus.flush()
    assert purge.error is None and purge.result == 2
    delete = a.delete("jobs")
    bus.flush()
    assert delete.error is None and delete.result == 1
    assert set(b.queues()) == {"jobs.dead"}
    late = [c.settle("accept", held), b.publish("jobs", b"late"), c.purge("jobs")]
    bus.flush()
    assert all(isinstance(r.error, NoSuchQueue) for r in late), late
    assert len({r.state.digest() for r in bus.replicas}) == 1


def test_replica_full_queue_refuses_a_new_publish_but_not_a_retry():
    bus = Bus(3)
    bus.view()
    a, b, _ = bus.replicas
    a.create("jobs", max_depth=1)
    first = b.publish("jobs", b"one")
    bus.flush()
    second = b.publish("jobs", b"two")
    retry = b.republish("jobs", b"one", first.args[1])
    bus.flush()
    assert isinstance(second.error, QueueFull) and retry.error is None
    assert a.state.queues["jobs"].depth == 1


def test_the_epochs_first_member_sends_expire_with_its_wall_clock():
    bus = Bus(3, WorkQueueConfig(interest_linger_s=0.0, expire_interval_s=1.0))
    for r in bus.replicas:
        r.wall = lambda: 1000.0 + bus.clock
    bus.view()
    a, b, c = bus.replicas
    a.create("jobs", "jobs.dead", ttl_s=2.0)
    bus.flush()
    p = b.publish("jobs", b"old")  # stamped 1000.0 by b
    bus.flush()
    for t in (0.5, 1.0, 1.5, 2.0, 2.5):
        bus.clock = t
        for r in bus.replicas:
            r.tick()
        bus.flush()
    assert p.error is None
    assert a.stats["expires_sent"] >= 2 and not b.stats["expires_sent"] and \
        not c.stats["expires_sent"]
    assert all(r.state.queues["jobs.dead"].depth == 1 for r in bus.replicas)
    assert all(r.state.queues["jobs"].depth == 0 for r in bus.replicas)


# -- snapshots --------------------------------------------------------------------------------
def old_restore(data):
    """What a build before the lifecycle reads: version 1, nine fields per queue, eight per
    message (its restore would fail on anything else)."""
    v, _epoch, _applied, _members, _tok, queues = msgpack.unpackb(data, raw=False)
    assert v == 1
    for q in queues:
        name, alt, depth, nbytes, next_pos, owner, consumers, counters, msgs = q
        assert len(counters) == 5
        for pub, pseq, body, pos, holder, tok, tepoch, deliveries in msgs:
            pass


def test_snapshot_is_version_1_until_the_state_needs_version_2_and_both_restore():
    s = lifecycle()
    run(s, A, [CREATE, "q", "dead", 5, None], [CONSUME, "q"])
    publish(s, B, "q", 1, 2)
    stamped(s, C, "q", 1, 7.0)
    acquire(s, A, n=1)
    old_restore(s.snapshot())  # what an older joiner can read
    copy = QueueState()
    copy.restore(s.snapshot())
    assert copy.digest() == s.digest() and copy.content() == s.content()
    declare(s, "t", alternate="dead", overflow="dead_letter_oldest", ttl_s=3.0, depth=1)
    stamped(s, B, "t", 5, 1.0)
    stamped(s, B, "t", 6, 2.0)  # overflows seq 5 to the alternate
    data = s.snapshot()
    assert msgpack.unpackb(data, raw=False)[0] == 2
    copy = QueueState()
    copy.restore(data)
    assert copy.digest() == s.digest() and copy.content() == s.content()
    t = copy.queues["t"]
    assert (t.overflow, t.ttl_s, t.counters[7]) == ("dead_letter_oldest", 3.0, 1)
    for x in (s, copy):  # they go on identically, ages included
        for m in (A, B, C):
            run(x, m, [LEVEL, LIFECYCLE_LEVEL])
        run(x, A, [EXPIRE, 5.5])
    assert copy.digest() == s.digest() and not copy.queues["t"].msgs
    # purge counters are version 2 too; a deleted one is simply gone
    run(s, A, [DELETE, "t"])
    old_restore(s.snapshot())
    run(s, A, [PURGE, "q"])
    assert msgpack.unpackb(s.snapshot(), raw=False)[0] == 2


def test_a_joiner_gets_version_2_state_through_the_replica():
    bus = Bus(3)
    a, b, c = bus.replicas
    bus.cut = {c.local}
    bus.view([a.local, b.local])
    a.create("jobs", ttl_s=60.0)
    p = b.publish("jobs", b"x")
    bus.flush()
    assert p.error is None
    bus.cut = set()
    bus.view()
    assert c.phase is Phase.ACTIVE and c.stats["snapshots_received"] == 1
    assert c.state.queues["jobs"].ttl_s == 60.0
    assert len({r.state.digest() for r in bus.replicas}) == 1
