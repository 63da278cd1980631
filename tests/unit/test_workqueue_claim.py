"""Unit tests of the owner's standing claim (stack/workqueue/state.py, ``Queue.claim``): an
ACQUIRE that finds fewer messages than its consumers want leaves the rest standing, and
each message that becomes available is acquired in the command that brings it, with no
ACQUIRE of the owner's own (one ordered multicast instead of two). On the state machine,
on the in-memory total-order bus of test_workqueue_state, and with journals."""
import msgpack
import pytest

from raygroups.stack.workqueue import Replica, WorkQueueConfig
from raygroups.stack.workqueue.codec import CONSUME, LEVEL, OWNER_RELEASE, RELEASE
from raygroups.stack.workqueue.replica import STREAM_LEVEL
from raygroups.stack.workqueue.state import (CLAIM_LEVEL, LIFECYCLE_LEVEL, OK, SNAPSHOT_V1,
                                             QueueState)

from .test_workqueue_durable import durable_bus, durable_queue, promise_round, restarted, \
    settle_all
from .test_workqueue_state import A, B, C, Bus, acquire, fresh, publish, run, settle, \
    setup_queue


def leveled(level=CLAIM_LEVEL) -> QueueState:
    """A state whose every member announced ``level``, with queue "q" owned by A."""
    s = fresh()
    for m in s.members:
        assert run(s, m, [LEVEL, level]) == [(OK, None)]
    setup_queue(s)
    return s


def held(s, name="q") -> list:
    return sorted(e.mid for e in s.queues[name].acquired.values())


# -- the state machine ------------------------------------------------------------------------
def test_a_standing_claim_takes_each_publish_in_the_command_that_brings_it():
    s = leveled()
    code, got = acquire(s, A, n=3)
    assert (code, got) == (OK, []) and s.queues["q"].claim == 3
    publish(s, B, "q", 1, 2)
    q = s.queues["q"]
    assert q.available == 0 and held(s) == [(B, 1), (B, 2)] and q.claim == 1
    assert [(n, o, [e.mid for e in es]) for n, o, es in s.claimed] == \
        [("q", A, [(B, 1)]), ("q", A, [(B, 2)])]  # one per command, with its owner
    publish(s, C, "q", 1, 2)
    assert q.claim == 0 and held(s) == [(B, 1), (B, 2), (C, 1)] and q.available == 1
    assert s.standing() == {}  # a claim taken in full stands no more


@pytest.mark.parametrize("level", [LIFECYCLE_LEVEL, STREAM_LEVEL])
def test_no_claim_stands_while_a_member_of_an_older_build_is_in_the_epoch(level):
    s = fresh()
    for m, lv in zip(s.members, (CLAIM_LEVEL, CLAIM_LEVEL, level)):
        run(s, m, [LEVEL, lv])
    setup_queue(s)
    assert acquire(s, A, n=3) == (OK, []) and s.queues["q"].claim == 0
    publish(s, B, "q", 1)
    assert held(s) == [] and s.queues["q"].available == 1  # as that build does


def test_a_claim_ends_when_its_owner_releases_when_ownership_moves_and_as_an_epoch_begins():
    s = leveled()
    run(s, B, [CONSUME, "q"])
    acquire(s, A, n=2)
    publish(s, C, "q", 1)
    [e] = s.queues["q"].acquired.values()
    assert settle(s, A, RELEASE, "q", e.mid, (e.tepoch, e.tok)) == OK
    q = s.queues["q"]
    assert q.claim == 0 and q.available == 1  # not taken straight back
    assert acquire(s, A, n=2)[1][0][0] == (C, 1) and q.claim == 1  # the released one first
    assert run(s, A, [OWNER_RELEASE, "q"]) == [(OK, None)]
    assert q.owner == B and q.claim == 0
    publish(s, C, "q", 2)
    assert q.available == 1  # nobody's claim
    acquire(s, B, n=5)
    assert q.claim == 4
    s.begin_epoch(2, [A, B, C])
    assert q.claim == 0 and s.standing() == {}


def test_claims_are_the_epoch_s_not_in_snapshots_but_in_the_digest_and_a_journal_s_image():
    """Fresh seed 16210218: claims had gone into snapshot version 3, which holds message
    timestamps that the version-1 snapshot a joiner had received left out, so two replicas
    in step hashed apart. A claim is the epoch's, like the levels: a snapshot (taken as an
    epoch begins, when none stands) leaves it out, whatever its version."""
    s = leveled()
    acquire(s, A, n=2)
    snap = s.snapshot()
    assert msgpack.unpackb(snap)[0] == SNAPSHOT_V1  # the format an older build reads
    t = QueueState()
    t.restore(snap)
    assert t.queues["q"].claim == 0 and t.digest() != s.digest()  # the digest tells
    t.stand(s.standing())
    assert s.standing() == {"q": 2} and t.digest() == s.digest()
    publish(s, B, "q", 1)
    publish(t, B, "q", 1)  # the state with its claims goes on exactly alike
    assert held(t) == held(s) == [(B, 1)] and t.digest() == s.digest()
    s.begin_epoch(2, [A, B, C])
    assert s.standing() == {}


# -- the replica ------------------------------------------------------------------------------
def waiting_owner(older_build=False, config=None) -> tuple:
    """Three replicas, queue "q" empty, a waiting for 10 messages: (bus, its call)."""
    bus = Bus(3, config)
    if older_build:
        bus.replicas[2].level = STREAM_LEVEL  # announces the level of the build before claims
    bus.view()
    a = bus.replicas[0]
    a.create("q")
    bus.flush()
    w = a.acquire("q", 10, many=True)
    bus.flush()
    return bus, w


def test_an_owner_waiting_on_an_empty_queue_gets_a_publish_with_no_acquire_of_its_own():
    bus, w = waiting_owner()
    a, b, _c = bus.replicas
    assert a.state.queues["q"].claim == 10
    assert a.stats["acquires_sent"] == 1
    b.publish("q", b"x")
    bus.flush()
    assert w.done and [d.body for d in w.result] == [b"x"] and not w.result[0].redelivered
    assert a.stats["acquires_sent"] == 1 and a.stats["claimed"] == 1


def test_with_an_older_build_in_the_view_the_owner_acquires_as_before():
    bus, w = waiting_owner(older_build=True)
    a, b, _c = bus.replicas
    assert a.stats["acquires_sent"] == 0  # nothing to take, nothing asked
    b.publish("q", b"x")
    bus.flush()
    assert w.done and [d.body for d in w.result] == [b"x"]
    assert a.stats["acquires_sent"] == 1 and a.stats["claimed"] == 0  # asked once it came


def test_what_a_claim_takes_between_two_calls_waits_for_the_next_call_until_interest_lapses():
    bus, w = waiting_owner(config=WorkQueueConfig(interest_linger_s=1.0))
    a, b, c = bus.replicas
    b.publish("q", b"x")
    bus.flush()
    assert w.done and [d.body for d in w.result] == [b"x"]
    b.publish("q", b"y")  # the claim takes it while a's consumer is between two calls
    bus.flush()
    assert [d.body for d in a.local_queues["q"].ready] == [b"y"]
    w2 = a.acquire("q", 10, many=True)
    assert w2.done and [(d.body, d.redelivered) for d in w2.result] == [(b"y", False)]
    assert a.stats["orphans_released"] == 0
    b.publish("q", b"z")
    bus.flush()
    assert [d.body for d in a.local_queues["q"].ready] == [b"z"]
    bus.clock += 2.0  # nobody asks again: interest lapses and it goes back
    a.tick()
    bus.flush()
    assert not a.local_queues["q"].ready and a.stats["orphans_released"] == 1
    w3 = c.acquire("q", 1)
    bus.flush()
    assert [(d.body, d.redelivered) for d in w3.result] == [(b"z", True)]  # as prefetched


def test_a_claimed_message_is_handed_out_only_once_a_majority_has_its_publish_on_disk():
    bus, disks = durable_queue()
    a, b, c = bus.replicas
    w = a.acquire("q", 5, many=True)
    settle_all(bus, disks)
    b.publish("q", b"x")
    bus.flush()
    assert a.stats["claimed"] == 1 and not w.done  # acquired, on no disk yet
    disks[1].sync(b)
    bus.flush()
    assert not w.done  # one of three
    disks[2].sync(c)
    bus.flush()
    assert w.done and [d.body for d in w.result] == [b"x"]  # b and c: a majority, not a


def test_a_claim_survives_compaction_and_a_claimed_message_comes_back_flagged_after_a_power_cut():
    cfg = WorkQueueConfig(interest_linger_s=0.0, journal_compact_bytes=300)
    bus, disks = durable_bus(3, cfg)
    bus.view()
    a, b, _c = bus.replicas
    a.create("q")
    a.create("fill")
    settle_all(bus, disks)
    w = a.acquire("q", 5, many=True)
    settle_all(bus, disks)
    before = a.stats["journal_compactions"]
    for i in range(20):  # the journals compact while the claim stands
        b.publish("fill", b"f%d" % i)
    settle_all(bus, disks)
    assert a.stats["journal_compactions"] > before
    out = disks[0].replay(cfg)
    assert out.state.queues["q"].claim == a.state.queues["q"].claim == 5
    b.publish("q", b"x")
    settle_all(bus, disks)
    assert w.done and not w.result[0].redelivered and a.stats["claimed"] == 1
    reps = restarted(bus, disks, which={0, 1, 2}, cfg=cfg)  # every member, from its journal
    bus.view()
    promise_round(bus, disks)
    settle_all(bus, disks)
    acq = reps[1].acquire("q", 5, many=True)
    settle_all(bus, disks)
    assert [(d.body, d.redelivered) for d in acq.result] == [(b"x", True)]
