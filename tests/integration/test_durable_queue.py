"""Durable queues on real Channels (UDP on loopback, each member journaling in its own
directory): every member closed, then all started again on their journals, finds every
acknowledged and unaccepted message and none of the accepted ones; a journal of another
group is refused. (Members killed -9 together, in real processes: test_durable_kill.py.)"""
import asyncio
import itertools

import pytest

from raygroups.stack.errors import JournalMismatch
from raygroups.stack.runtime.ports import free_ports
from raygroups.stack.runtime.workqueue import QueueChannel

from ..aio import until
from .test_workqueue import WQ, config

_ids = itertools.count()


async def start(cluster, ports, dirs):
    chans = []
    for i, d in enumerate(dirs):
        ch = QueueChannel(cluster, name=f"m{i}", config=config(ports, i),
                          queue_config=WQ, journal_dir=str(d))
        await ch.connect(timeout=20)
        chans.append(ch)
    await until(lambda: all(c.view is not None and len(c.view) == len(dirs) for c in chans),
                20, "one view")
    for c in chans:
        await c.queues.wait_active(30)
    return chans


def test_every_member_restarted_on_its_journal_keeps_what_was_acknowledged(tmp_path):
    dirs = [tmp_path / f"m{i}" for i in range(3)]

    async def main():
        ports = free_ports(3)
        cluster = f"durable-{next(_ids)}-{ports[0]}"
        chans = await start(cluster, ports, dirs)
        q = [await c.queue("orders") for c in chans]
        ids = await q[1].publish_many([b"job-%d" % i for i in range(50)])
        assert len(ids) == 50
        got = await q[2].acquire_many(10, timeout=10)
        for d in got:
            await d.accept()
        held = await q[0].acquire(timeout=10)  # acquired, never settled: comes back
        accepted = {d.body for d in got}
        stats = chans[0].queues.journal.journal.stats
        assert stats.fsyncs > 0
        for c in chans:
            await c.close(timeout=5)
        chans = await start(cluster, free_ports(3), dirs)
        q = [await c.queue("orders") for c in chans]
        assert all(c.queues.journal.recovered is not None for c in chans)
        left = []
        while True:
            batch = await q[0].acquire_many(50, timeout=3)
            if not batch:
                break
            left += batch
        bodies = {d.body for d in left}
        assert bodies == {b"job-%d" % i for i in range(50)} - accepted
        assert held.body in bodies and any(d.redelivered for d in left)
        for c in chans:
            await c.close(timeout=5)
    asyncio.run(main())


def test_a_journal_of_another_group_is_refused(tmp_path):
    async def main():
        ports = free_ports(1)
        ch = QueueChannel("first-group", name="m0", config=config(ports, 0),
                          queue_config=WQ, journal_dir=str(tmp_path))
        await ch.connect(timeout=20)
        await ch.queues.wait_active(20)
        await (await ch.queue("q")).publish(b"x")
        await ch.close(timeout=5)
        with pytest.raises(JournalMismatch):
            QueueChannel("second-group", name="m0", config=config(ports, 0),
                         queue_config=WQ, journal_dir=str(tmp_path))
    asyncio.run(main())
