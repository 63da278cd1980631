"""The replicated work queue on real Channels (UDP on loopback, static discovery), several
members in one process: seed 001's four tests, plus state transfer to a joiner while
messages are being published, and a stale consumer's accept refused after a partition.

Deadlines are generous and never asserted as timings (bench/workqueue.py measures)."""
import asyncio
import itertools
from collections import Counter

import pytest

from raygroups.stack import StackConfig
from raygroups.stack.runtime.workqueue import QueueChannel
from raygroups.stack.workqueue import (AcquireTimeout, NoSuchQueue, NotAcquired, QueueFull,
                                       QueueNotPrimary, StaleEpoch, WorkQueueConfig)

from raygroups.stack.runtime.ports import free_ports

from ..aio import until

_ids = itertools.count()
WQ = WorkQueueConfig(time_slice_s=0.05)


def config(ports, i, faults=False, expected=None):
    opts = dict(transport__ip_multicast=False, initial_hosts=[("127.0.0.1", p) for p in ports],
                port=ports[i], primary__expected_size=expected or len(ports))
    if faults:
        opts["faults__drop_up"] = 0.0  # the fault layer, to cut a member off on purpose
    return StackConfig.local(**opts)


async def start(n, extra=0, faults=False, wq=WQ):
    """n connected members (ports for ``extra`` more that may join later)."""
    ports = free_ports(n + extra)
    cluster = f"wq-{next(_ids)}-{ports[0]}"
    chans = []
    for i in range(n):
        ch = QueueChannel(cluster, name=f"m{i}", config=config(ports, i, faults, n),
                          queue_config=wq)
        await ch.connect(timeout=20)
        chans.append(ch)
    await until(lambda: all(c.view is not None and len(c.view) == n for c in chans), 20,
                f"{n}-member view")
    for c in chans:
        await c.queues.wait_active(20)
    return cluster, ports, chans


async def stop(chans):
    for c in chans:
        try:
            await c.close(timeout=2)
        except Exception:
            pass


def digests(chans):
    return {c.queues.info()["digest"] for c in chans}


def test_four_senders_four_receivers_numbered():
    """Seed test 1: 4 senders publishing numbered messages, 4 receivers on different
    members: the received set equals the sent set, no duplicates."""
    async def main():
        _, _, chans = await start(4)
        try:
            queues = [await c.queue("numbers") for c in chans]
            per_sender = 400
            total = 4 * per_sender

            async def sender(i, q):
                bodies = [f"{i}:{k}".encode() for k in range(per_sender)]
                for k in range(0, 100):          # one by one
                    await q.publish(bodies[k])
                for k in range(100, per_sender, 50):  # and in batches
                    await q.publish_many(bodies[k:k + 50])

            received = []

            async def receiver(q):
                while len(received) < total:
                    got = await q.acquire_many(20, timeout=0.5)
                    received.extend(d.body for d in got)
                    if got:
                        await q.settle_many("accept", got)

            await asyncio.wait_for(asyncio.gather(
                *[sender(i, q) for i, q in enumerate(queues)],
                *[receiver(q) for q in queues]), 120)
            sent = {f"{i}:{k}".encode() for i in range(4) for k in range(per_sender)}
            dup = [b for b, n in Counter(received).items() if n > 1]
            assert not dup, dup[:5]
            assert set(received) == sent
            await until(lambda: len(digests(chans)) == 1 and
                        all(q.depth() == 0 for q in queues), 10, "same state everywhere")
        finally:
            await stop(chans)
    asyncio.run(main())


def test_release_then_dequeue_on_any_member():
    """Seed test 2: acquire then release; the message can then be dequeued on any
    member."""
    async def main():
        _, _, chans = await start(4)
        try:
            queues = [await c.queue("rel") for c in chans]
            for k in range(1, 4):
                await queues[0].publish(b"msg-%d" % k)
                d = await queues[0].acquire(timeout=10)
                assert d.body == b"msg-%d" % k and not d.redelivered
                await d.release()
                again = await queues[k].acquire(timeout=10)  # on member k
                assert again.id == d.id and again.body == d.body and again.redelivered
                await again.accept()
                with pytest.raises(NotAcquired):
                    await d.accept()  # the first acquisition is over
            await until(lambda: all(q.depth() == 0 for q in queues) and
                        len(digests(chans)) == 1, 10, "empty everywhere")
        finally:
            await stop(chans)
    asyncio.run(main())


def test_acquire_then_crash_then_dequeue_elsewhere():
    """Seed test 3: acquire, then the member crashes (its stack and sockets stop, it does
    not leave): the message is requeued and dequeued on another member."""
    async def main():
        _, _, chans = await start(4)
        try:
            queues = [await c.queue("crash") for c in chans]
            await queues[0].publish(b"precious")
            d = await queues[2].acquire(timeout=10)
            assert d.body == b"precious"
            await chans[2]._shutdown()  # crash: no leave, no goodbye
            survivors = [q for i, q in enumerate(queues) if i != 2]
            again = await survivors[1].acquire(timeout=30)
            assert again.id == d.id and again.redelivered
            await again.accept()
            await until(lambda: all(q.depth() == 0 for q in survivors), 10, "dequeued")
            assert len(digests([c for i, c in enumerate(chans) if i != 2])) == 1
        finally:
            await stop([c for i, c in enumerate(chans) if i != 2])
    asyncio.run(main())


def test_reject_goes_to_the_alternate_exactly_once():
    """Seed test 4: acquire then reject: the message is on the alternate queue, once."""
    async def main():
        _, _, chans = await start(4)
        try:
            queues = [await c.queue("orders", alternate="orders.dead") for c in chans]
            dead = [await c.queue("orders.dead") for c in chans]
            await queues[1].publish(b"bad-order")
            d = await queues[3].acquire(timeout=10)
            await d.reject()
            with pytest.raises(NotAcquired):
                await d.reject()  # a second reject does nothing
            await until(lambda: all(q.depth() == 0 for q in queues) and
                        all(x.depth() == 1 for x in dead), 10, "on the alternate")
            got = await dead[0].acquire(timeout=10)
            assert got.id == d.id and got.body == b"bad-order"
            await got.accept()
            with pytest.raises(AcquireTimeout):
                await dead[2].acquire(timeout=0.5)
            assert all(q.info()["rejected"] == 1 for q in queues)
        finally:
            await stop(chans)
    asyncio.run(main())


def test_the_lifecycle_on_channels():
    """purge, delete, both overflow policies and a TTL on real Channels: every member
    lists the same queues (``queues()``), and expiry uses the publishers' wall clocks."""
    async def main():
        _, _, chans = await start(3)
        try:
            q = [await c.queue("life", alternate="life.dead") for c in chans]
            await q[0].publish_many([b"a", b"b", b"c"])
            held = await q[1].acquire(timeout=10)
            assert await q[2].purge() == 2
            await held.accept()
            capped = await chans[1].queue("capped", max_depth=1)
            first = await capped.publish(b"1")
            with pytest.raises(QueueFull):
                await capped.publish(b"2")
            assert await capped.republish(b"1", first[1]) == first  # stored once, not full
            oldest = await chans[2].queue("oldest", alternate="life.dead", max_depth=1,
                                          overflow="dead_letter_oldest")
            await oldest.publish_many([b"1", b"2"])
            timed = await chans[0].queue("timed", alternate="life.dead", ttl_s=0.3)
            await timed.publish(b"late")
            await until(lambda: all(c.queues.queues()["timed"]["expired"] == 1 for c in chans),
                        10, "expired everywhere")
            assert await capped.delete() == 1
            with pytest.raises(NoSuchQueue):
                await capped.publish(b"3")
            await until(lambda: len({str(sorted(c.queues.queues().items())) for c in chans}) == 1,
                        10, "the same queues everywhere")
            listed = chans[0].queues.queues()
            assert "capped" not in listed and listed["life"]["purged"] == 2
            assert listed["oldest"]["overflowed"] == 1 and listed["life.dead"]["depth"] == 2
        finally:
            await stop(chans)
    asyncio.run(main())


@pytest.mark.parametrize("chunk", [256 * 1024, 512])
def test_joiner_gets_the_queues_through_state_transfer(chunk):
    """A member joining while messages are published gets the queue through state
    transfer (the streamed update: in one chunk, or in dozens of about ``chunk`` bytes while
    the donor moves on); nothing published during the transfer is lost or doubled."""
    wq = WorkQueueConfig(time_slice_s=0.05, update_chunk_bytes=chunk, update_window=2)

    async def main():
        cluster, ports, chans = await start(3, extra=1, wq=wq)
        try:
            q0 = await chans[0].queue("st", alternate="st.dead")
            await q0.publish_many([b"old-%d" % k for k in range(200)])
            d = await q0.acquire(timeout=10)  # held across the join
            stop_pub = asyncio.Event()
            published = []

            async def publisher():
                k = 0
                while not stop_pub.is_set():
                    await q0.publish(b"new-%d" % k)
                    published.append(b"new-%d" % k)
                    k += 1
            task = asyncio.create_task(publisher())
            await asyncio.sleep(0.1)
            joiner = QueueChannel(cluster, name="m3", config=config(ports, 3, expected=4),
                                  queue_config=wq)
            await joiner.connect(timeout=20)
            chans.append(joiner)
            await joiner.queues.wait_active(20)
            await asyncio.sleep(0.2)
            stop_pub.set()
            await task
            stats = joiner.queues.replica.stats
            assert stats["snapshots_received"] == 1  # from the donor, streamed
            assert stats["update_chunks"] >= (1 if chunk > 100_000 else 20), stats
            await until(lambda: len(digests(chans)) == 1, 10, "joiner equal to the others")
            qj = await joiner.queue("st")
            assert qj.depth() == 200 + len(published)
            bodies = []
            while True:
                got = await qj.acquire_many(100, timeout=1.0)
                if not got:
                    break
                bodies.extend(x.body for x in got)
                await qj.settle_many("accept", got)
            expected = {b"old-%d" % k for k in range(200)} - {d.body} | set(published)
            assert len(bodies) == len(set(bodies)) and set(bodies) == expected
            await d.accept()  # the acquisition made before the join is still valid
            await until(lambda: all(c.queues.replica.depth("st") == 0 for c in chans), 10)
        finally:
            await stop(chans)
    asyncio.run(main())


def test_stale_consumer_cannot_complete_after_a_partition():
    """A member holding a message is cut off: it refuses calls (not primary), the others
    requeue and deliver the message again; after the heal, the stale consumer's accept is
    refused with StaleEpoch (Jepsen's etcd lock lesson)."""
    async def main():
        _, _, chans = await start(4, faults=True)
        try:
            queues = [await c.queue("lock") for c in chans]
            await queues[0].publish(b"job")
            held = await queues[3].acquire(timeout=10)
            chans[3].stack.layer("faults").isolate()
            await until(lambda: len(chans[3].view) == 1 and
                        all(len(c.view) == 3 and c.queues.active for c in chans[:3]),
                        30, "m3 cut off")
            with pytest.raises(QueueNotPrimary):
                await held.accept()
            with pytest.raises(QueueNotPrimary):
                await queues[3].publish(b"minority")
            again = await queues[1].acquire(timeout=20)
            assert again.id == held.id and again.redelivered
            chans[3].stack.layer("faults").heal()
            await until(lambda: all(len(c.view) == 4 and c.queues.active for c in chans),
                        60, "merged again")
            with pytest.raises(StaleEpoch):
                await held.accept()
            await again.accept()
            await until(lambda: len(digests(chans)) == 1 and
                        all(q.depth() == 0 for q in queues), 10, "settled everywhere")
        finally:
            await stop(chans)
    asyncio.run(main())


def test_large_messages_and_limits():
    """A body far larger than a datagram goes through FRAG (ordered, reassembled) and comes
    out intact on another member; a queue at its depth or bytes limit refuses a publish
    with QueueFull, and MessageTooLarge is raised before anything is sent."""
    from raygroups.stack.errors import MessageTooLarge
    from raygroups.stack.workqueue import QueueFull

    async def main():
        _, _, chans = await start(3)
        try:
            big = bytes(range(256)) * (3 * 1024 * 1024 // 256)  # 3 MiB
            q0 = await chans[0].queue("big")
            await q0.publish(big)
            d = await (await chans[2].queue("big")).acquire(timeout=20)
            assert d.body == big
            await d.accept()
            small = await chans[1].queue("small", max_depth=2, max_bytes=10_000)
            await small.publish(b"1")
            await small.publish(b"2")
            with pytest.raises(QueueFull):
                await small.publish(b"3")
            d = await small.acquire(timeout=10)
            await d.accept()
            await small.publish(b"3")  # room again
            with pytest.raises(QueueFull):
                await small.publish(b"x" * 20_000)  # over the bytes limit
            with pytest.raises(MessageTooLarge):
                await small.publish(b"x" * (chans[1].queues.config.max_message_size + 1))
            await until(lambda: len(digests(chans)) == 1, 10)
        finally:
            await stop(chans)
    asyncio.run(main())
