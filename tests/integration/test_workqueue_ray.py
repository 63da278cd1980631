"""The work queue through the Ray ``Group`` API (issue 7 acceptance): seed 001's four tests
on a real local Ray cluster, one 4-member group for the module (each member its own actor
process, talking over its own sockets). No wall-clock assertions: every wait is for a
condition with a generous deadline."""
import asyncio
import os
import random
import threading
import time
from collections import Counter

import pytest

pytest_plugins = ["tests.ray_fixtures"]


from raygroups.actors import Group  # noqa: E402
from raygroups.actors.queue import WorkQueueHandle  # noqa: E402
from raygroups.stack.workqueue import (AcquireTimeout, NoSuchQueue,  # noqa: E402
                                       NotAcquired, QueueFull, QueueOutcomeUnknown)

from ..aio import wait_until  # noqa: E402

WAIT_S = 60.0


@pytest.fixture(scope="module")
def group(ray_session):
    g = Group.launch(f"t-queue-{os.getpid()}", members=4, timeout=WAIT_S,
                     metrics_interval_s=0)
    yield g
    g.shutdown()


def test_public_api_shape(group):
    q = Group.attach(group.cluster).queue("api", alternate="api.dead")
    assert isinstance(q, WorkQueueHandle)
    q.publish(b"job-17")
    d = q.acquire(timeout_s=5)
    assert d.body == b"job-17" and not d.redelivered
    d.accept()
    with pytest.raises(AcquireTimeout):
        q.acquire(timeout_s=0.3)


def test_four_senders_four_receivers(group):
    """4 senders publishing numbered messages, 4 receivers on different members: the
    received set equals the sent set, without duplicates."""
    names = group.member_names()
    assert len(names) == 4
    handles = [group.queue("numbers", member=n) for n in names]
    per_sender = 300

    async def main():
        received = []

        async def sender(i, q):
            bodies = [f"{i}:{k}".encode() for k in range(per_sender)]
            await q.publish_async(bodies[0])
            for k in range(1, per_sender, 50):
                await q.publish_many_async(bodies[k:k + 50])

        async def receiver(q):
            while len(received) < 4 * per_sender:
                got = await q.acquire_many_async(50, timeout_s=0.5)
                received.extend(d.body for d in got)
                if got:
                    await q.settle_many_async("accept", got)

        await asyncio.wait_for(asyncio.gather(*[sender(i, q) for i, q in enumerate(handles)],
                                              *[receiver(q) for q in handles]), 180)
        return received

    received = asyncio.run(main())
    assert not [b for b, n in Counter(received).items() if n > 1]
    assert set(received) == {f"{i}:{k}".encode() for i in range(4) for k in range(per_sender)}
    assert all(h.depth() == 0 for h in handles)


def test_release_then_dequeue_on_any_member(group):
    names = group.member_names()
    q0 = group.queue("rel", member=names[0])
    for other in names[1:]:
        q0.publish(b"again-" + other.encode())
        d = q0.acquire(timeout_s=10)
        d.release()
        again = q0.on(other).acquire(timeout_s=20)
        assert again.id == d.id and again.redelivered and again.member == other
        again.accept()
        with pytest.raises(NotAcquired):
            d.accept()


def test_reject_goes_to_the_alternate_once(group):
    names = group.member_names()
    q = group.queue("orders", alternate="orders.dead", member=names[1])
    dead = group.queue("orders.dead", member=names[2])
    q.publish(b"bad-order")
    d = q.acquire(timeout_s=10)
    d.reject()
    with pytest.raises(NotAcquired):
        d.reject()
    got = dead.acquire(timeout_s=10)
    assert got.id == d.id and got.body == b"bad-order"
    got.accept()
    with pytest.raises(AcquireTimeout):
        dead.acquire(timeout_s=0.5)
    assert all(q.on(n).info().get("rejected") == 1 for n in names)


def _drain(q) -> list:
    got = q.acquire_many(100, timeout_s=1)
    if got:
        q.settle_many("accept", got)
    return sorted(d.body for d in got)


def test_the_lifecycle_through_the_group_api(group):
    """g.queues(), purge, delete, both overflow policies and a TTL, through the Group handle
    and its members: every member lists the same queues with the same figures."""
    names = group.member_names()
    q = group.queue("life", alternate="life.dead", member=names[0])
    dead = group.queue("life.dead", member=names[3])
    q.publish_many([b"a", b"b", b"c"])
    held = q.acquire(timeout_s=10)
    listed = group.queues(member=names[0])
    assert listed["life"]["depth"] == 3 and listed["life"]["acquired"] == 1
    assert listed["life"]["alternate"] == "life.dead" and "life.dead" in listed
    assert q.purge() == 2  # what is available; the held one stays the consumer's
    held.accept()
    wait_until(lambda: all(group.queues(member=n)["life"]["purged"] == 2 and
                       group.queues(member=n)["life"]["depth"] == 0 for n in names),
           "every member saw the purge", timeout=WAIT_S)
    # overflow: reject_publish refuses, dead_letter_oldest moves the oldest to the alternate
    capped = group.queue("life.capped", max_depth=2, member=names[1])
    capped.publish_many([b"1", b"2"])
    with pytest.raises(QueueFull):
        capped.publish(b"3")
    oldest = group.queue("life.oldest", alternate="life.dead", max_depth=2,
                         overflow="dead_letter_oldest", member=names[2])
    oldest.publish_many([b"1", b"2", b"3"])
    info = group.queues(member=names[2])
    assert info["life.oldest"]["overflow"] == "dead_letter_oldest"
    assert info["life.oldest"]["overflowed"] == 1 and info["life.oldest"]["depth"] == 2
    assert _drain(oldest) == [b"2", b"3"] and _drain(dead) == [b"1"]
    # a TTL: what nobody acquired in time goes to the alternate
    ttl = group.queue("life.ttl", alternate="life.dead", ttl_s=0.5, member=names[1])
    ttl.publish(b"late")
    wait_until(lambda: group.queues(member=names[3])["life.ttl"]["expired"] == 1, "the expiry",
               WAIT_S)
    assert _drain(dead) == [b"late"] and group.queues()["life.ttl"]["ttl_s"] == 0.5
    # delete: gone everywhere; later calls and held deliveries raise NoSuchQueue
    capped_held = capped.acquire(timeout_s=10)
    assert capped.delete() == 2
    with pytest.raises(NoSuchQueue):
        capped.publish(b"4")
    with pytest.raises(NoSuchQueue):
        capped_held.accept()
    wait_until(lambda: all("life.capped" not in group.queues(member=n) for n in names),
           "every member deleted it", timeout=WAIT_S)
    listed = [group.queues(member=n) for n in names]
    assert all(set(x) == set(listed[0]) for x in listed)


def test_batches_settle_every_message_exactly_once(group):
    """publish_many, then acquire_many and settle_many in batches of random sizes, each
    delivery accepted, released or rejected at random (seeded): every message ends accepted
    once or rejected once (then once in the alternate queue), a released one comes back
    marked redelivered with its id, and the ids are the ones publish_many returned."""
    seed = 19082
    print(f"seed {seed}")
    rng = random.Random(seed)
    names = group.member_names()
    q = group.queue("batches", alternate="batches.dead", member=names[0])
    dead = group.queue("batches.dead", member=names[1])
    bodies = [b"batch-%d" % k for k in range(600)]
    ids = q.publish_many(bodies)
    assert len(set(ids)) == 600 and [seq for _p, seq in ids] == sorted(seq for _p, seq in ids)
    id_of = dict(zip(bodies, ids))
    accepted, rejected, released = [], [], set()
    while len(accepted) + len(rejected) < len(bodies):
        ds = q.acquire_many(rng.randint(1, 120), timeout_s=10)
        assert ds, "the queue stopped giving messages"
        by_op: dict = {}
        for d in ds:
            assert d.id == id_of[d.body] and d.member == names[0]
            assert d.redelivered == (d.body in released)
            by_op.setdefault(rng.choices(("accept", "release", "reject"), (6, 3, 1))[0],
                             []).append(d)
        for op, group_of in by_op.items():
            q.settle_many(op, group_of)
        accepted += [d.body for d in by_op.get("accept", ())]
        rejected += [d.body for d in by_op.get("reject", ())]
        released |= {d.body for d in by_op.get("release", ())}
    assert sorted(accepted + rejected) == sorted(bodies)
    dead_got = []
    while len(dead_got) < len(rejected):
        ds = dead.acquire_many(100, timeout_s=10)
        assert ds, "rejected messages missing from the alternate queue"
        dead.settle_many("accept", ds)
        dead_got += [d.body for d in ds]
    assert sorted(dead_got) == sorted(rejected)
    with pytest.raises(NotAcquired):
        q.settle_many("accept", ds[:1])  # settled once already (in the alternate queue's
        # handle: a token is the member's; another settle of it is refused)
    assert q.depth() == 0 and dead.depth() == 0


VANISHING_CONSUMER = """
import os, sys
from raygroups.actors import Group
q = Group.attach(sys.argv[1]).queue("leased", member=sys.argv[2], lease_s=1.0)
d = q.acquire(timeout_s=30)
print("ACQUIRED", d.id[0], d.id[1], flush=True)
os._exit(0)  # gone without settling and without renewing
"""


def test_a_consumer_process_that_vanishes_loses_its_lease(group, ray_session):
    """A driver acquires and dies without settling: once its lease (1 s) runs out, the
    member releases the message and another consumer gets it, redelivered."""
    names = group.member_names()
    q = group.queue("leased", member=names[1])
    q.publish(b"orphan")
    r = ray_session.run_driver(VANISHING_CONSUMER, args=[group.cluster, names[1]])
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("ACQUIRED"))
    pub, seq = line.split()[1], int(line.split()[2])
    again = q.on(names[2]).acquire(timeout_s=WAIT_S)
    assert again.id == (pub, seq) and again.redelivered and again.body == b"orphan"
    again.accept()
    info = q.on(names[1]).info()
    assert info["dequeued"] == 1 and info["depth"] == 0 and info["acquired"] == 0
    assert group._call("queue_info", member=names[1])["leases"]["lease_released"] == 1


def test_a_living_consumer_keeps_its_deliveries_past_the_lease(group):
    """This process holds a delivery for several lease periods: the renewal thread keeps
    it, nobody else gets it, and the accept succeeds."""
    names = group.member_names()
    q = group.queue("kept", member=names[0], lease_s=0.6)
    q.publish(b"slow-job")
    d = q.acquire(timeout_s=10)
    with pytest.raises(AcquireTimeout):
        q.on(names[2]).acquire(timeout_s=3.0)  # 5 lease periods
    d.accept()
    assert group._call("queue_info", member=names[0])["leases"]["lease_released"] == 0


def test_a_publish_whose_member_dies_in_flight_is_never_sent_again(group):
    """A publish in flight when its member's process dies has an unknown outcome: the handle
    raises QueueOutcomeUnknown and does not publish it again through another member (which
    stored a job twice in the campaign across Ray hosts: the dead member had multicast it).
    The member is paused first (its stack neither reads nor sends), so the publish waits
    there and, here, never went out: the queue holds nothing."""
    names = sorted(group.member_names())
    victim = names[0]
    h = Group.attach(group.cluster)  # a fresh handle asks the members in name order
    q = h.queue("unsure")
    group.pause(victim, 30.0)
    out: dict = {}

    def publish() -> None:
        try:
            out["id"] = q.publish(b"once")
        except Exception as e:
            out["error"] = e
    t = threading.Thread(target=publish, daemon=True)
    t.start()
    time.sleep(1.0)
    assert t.is_alive(), f"the publish did not wait at the paused member: {out}"
    group.kill(victim, restart=True)
    t.join(WAIT_S)
    assert isinstance(out.get("error"), QueueOutcomeUnknown), out
    with pytest.raises(AcquireTimeout):
        group.queue("unsure", member=names[1]).acquire(timeout_s=3.0)
    deadline = time.monotonic() + WAIT_S  # the victim is back (fresh UUID) for the others
    while len(group.view().members) < 4 or victim not in group.member_names():
        assert time.monotonic() < deadline, group.view()
        time.sleep(0.2)


def test_acquire_then_kill_member_then_dequeue_elsewhere(group):
    """Last: the member's process dies (Ray restarts it; it rejoins with a fresh UUID and
    gets the queues through state transfer)."""
    names = group.member_names()
    victim, other = names[3], names[0]
    q = group.queue("crash", member=victim)
    q.publish(b"precious")
    d = q.acquire(timeout_s=10)
    group.crash(victim)
    again = q.on(other).acquire(timeout_s=WAIT_S)
    assert again.id == d.id and again.body == b"precious" and again.redelivered
    again.accept()


def test_keyed_acquisitions_replay_and_settle_by_key(group):
    """A Spark partition's acquisition: asked again under its key, the member gives the same
    deliveries (to whichever client asks now), not new ones; settle_keys settles exactly
    what the key holds; a key whose deliveries were all settled acquires afresh."""
    name = group.member_names()[0]
    q = group.queue("keyed", member=name, lease_s=5.0)
    q.publish_many([f"k{i}".encode() for i in range(30)])
    first = q.acquire_keyed("s/0/0", 10, timeout_s=5, client="stream-a")
    again = q.acquire_keyed("s/0/0", 10, timeout_s=5, client="stream-b")
    assert len(first) == 10 and [d.id for d in again] == [d.id for d in first]
    other = q.acquire_keyed("s/0/1", 10, timeout_s=5, client="stream-b")
    assert len(other) == 10 and not {d.id for d in other} & {d.id for d in first}
    assert q.renew("stream-b") == 20  # the replay moved the first key's 10 to stream-b
    assert q.settle_keys("accept", ["s/0/0"]) == {"settled": 10, "failed": 0, "held": 0}
    assert q.settle_keys("release", ["s/0/1"]) == {"settled": 10, "failed": 0, "held": 0}
    assert q.settle_keys("accept", ["s/0/0", "nothing"]) == {"settled": 0, "failed": 0, "held": 0}
    fresh = q.acquire_keyed("s/0/0", 30, timeout_s=5, client="stream-b")
    bodies = {d.body for d in fresh}
    assert {d.body for d in other} <= bodies and not {d.body for d in first} & bodies
    assert all(d.redelivered for d in fresh if d.body in {x.body for x in other})
    assert q.settle_keys("accept", ["s/0/0"])["settled"] == len(fresh) == 20
