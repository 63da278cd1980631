"""The durable queue's journal driver (stack/runtime/queue_journal.py) on real files: an idle
journal syncs a write at once on the loop, a busy one groups writes on its thread."""
import asyncio

from raygroups.stack.runtime.queue_journal import QueueJournal
from raygroups.stack.workqueue.config import WorkQueueConfig
from raygroups.stack.workqueue.durable import REC, Entry

from ..aio import until


def entry(n: int) -> Entry:
    return Entry(REC, b"record-%d" % n, (1, n, 0), None)


def run(tmp_path, idle, body) -> None:
    async def main():
        qj = QueueJournal(str(tmp_path), "orders", WorkQueueConfig(journal_idle_sync_s=idle))
        durable: list = []
        qj.start(asyncio.get_running_loop(), durable.append, durable.append)
        try:
            await body(qj, durable)
        finally:
            qj.close()
    asyncio.run(main())


def test_a_write_to_an_idle_journal_is_durable_when_write_returns(tmp_path):
    async def body(qj, durable):
        fsyncs = qj.journal.stats.fsyncs
        qj.write([entry(1)])
        assert durable == [(1, 1, 0)] and qj.inline_syncs == 1
        assert qj.journal.durable == qj.journal.last_appended
        assert qj.journal.stats.fsyncs == fsyncs + 1
    run(tmp_path, 10.0, body)


def test_a_write_soon_after_another_is_synced_by_the_thread(tmp_path):
    async def body(qj, durable):
        qj.write([entry(1)])
        qj.write([entry(2), entry(3)])  # within journal_idle_sync_s of the first
        assert durable == [(1, 1, 0)] and qj.inline_syncs == 1
        await until(lambda: durable[-1] == (1, 3, 0), 10, "durable", step=0.001)
        assert qj.inline_syncs == 1
    run(tmp_path, 10.0, body)


def test_with_no_idle_sync_every_write_goes_to_the_thread(tmp_path):
    async def body(qj, durable):
        qj.write([entry(1)])
        assert durable == []
        await until(lambda: durable == [(1, 1, 0)], 10, "durable", step=0.001)
        assert qj.inline_syncs == 0
    run(tmp_path, None, body)
