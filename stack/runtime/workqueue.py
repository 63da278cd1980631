"""The replicated work queue on a real Channel (asyncio) (the Qpid new-cluster design).

    ch = Channel("orders", config=StackConfig.local())
    queues = WorkQueues(ch)                      # before connect(); or QueueChannel(...)
    await ch.connect()
    jobs = await queues.queue("jobs", alternate="jobs.dead")
    await jobs.publish(b"job-17")                # replicated on a majority, in total order
    d = await jobs.acquire(timeout=5)            # held by this consumer only
    await d.accept()                             # or d.release() / d.reject()

The service sits between the stack and the application: every delivery passes through it
synchronously and in delivery order (queue traffic is taken out; the application's own
messages and views go on to ``receive()``/``events()`` as before), and its queue position
takes part in every view's state exchange (joiners get the queues from the reconciliation,
the application's own ``get_state``/``set_state`` state transfer is left as it is).
Calls complete when their ordered message was delivered and applied by a majority of the
epoch's members (see stack/workqueue/replica.py); calls made in the same loop turn travel
in one multicast. Every member of the group must run the service: each primary view starts
its epoch from every member's position in that view's state exchange.

Durable queues: ``WorkQueues(ch, journal_dir=...)`` journals every queue of this member in
that directory (stack/runtime/queue_journal.py), and a call completes once a majority has
it on disk. A member started on a journal recovers its queues from it; a group whose every
member restarted forms its queues again from the most advanced journal among a majority of
the last epoch's members (the others are updated from it). A journal of another group
raises ``JournalMismatch`` here. A member whose journal fails (a full disk) leaves the
group: its calls raise ``QueueDiskError``.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any, Iterable, Optional

from ..errors import GroupClosed, NotPrimary, RaygroupsError
from ..view import Left, ViewChange
from ..workqueue import ties
from ..workqueue.config import WorkQueueConfig
from ..errors import JournalError
from ..workqueue.errors import AcquireTimeout, QueueClosed, QueueDiskError
from ..workqueue.replica import Delivery as _Acquired
from ..workqueue.replica import Phase, Replica, Request, arbitrators
from .channel import Channel
from .queue_journal import QueueJournal
from .stores import outlives_cluster

log = logging.getLogger("raygroups.workqueue")


class Delivery:
    """A message this consumer holds: ``await d.accept()`` (done, removed everywhere),
    ``await d.release()`` (back on the queue) or ``await d.reject()`` (to the alternate
    queue, exactly once; dropped when the queue has none)."""
    __slots__ = ("queue", "acquired")

    def __init__(self, queue: "WorkQueue", acquired: _Acquired):
        self.queue, self.acquired = queue, acquired

    @property
    def body(self) -> bytes:
        return self.acquired.body

    @property
    def id(self) -> tuple:
        """(publisher uid, sequence): the message's identity, the same on every member."""
        return self.acquired.mid

    @property
    def token(self) -> tuple:
        """(epoch, number) of this acquisition."""
        return self.acquired.token

    @property
    def redelivered(self) -> bool:
        return self.acquired.redelivered

    async def accept(self) -> None:
        await self.queue.settle("accept", self)

    async def release(self) -> None:
        await self.queue.settle("release", self)

    async def reject(self) -> None:
        await self.queue.settle("reject", self)

    def __repr__(self) -> str:
        return f"Delivery({self.queue.name!r}, {self.acquired!r})"


class WorkQueue:
    """One queue, as seen from this member."""

    def __init__(self, service: "WorkQueues", name: str, alternate: Optional[str]):
        self.service, self.name, self.alternate = service, name, alternate

    async def publish(self, body: bytes) -> tuple:
        """Returns the message id (publisher, sequence) once a majority applied it."""
        req = await self.service._call(lambda cb: self.service.replica.publish(self.name, body, cb))
        return (self.service.replica.uid, req.args[1])

    async def republish(self, body: bytes, seq: int) -> tuple:
        """Publish again this member's message ``seq`` (the second half of its id), as a
        retry after QueueOutcomeUnknown: stored once, and not refused as full while it is
        still on the queue."""
        svc = self.service
        await svc._call(lambda cb: svc.replica.republish(self.name, body, seq, cb))
        return (svc.replica.uid, seq)

    async def publish_many(self, bodies: Iterable[bytes]) -> list:
        """Publish in batches (one multicast carries many); returns the ids. Raises the
        first error after every publish completed (the others took effect)."""
        svc = self.service
        r = svc._replica()
        name = self.name
        reqs = await svc._many([lambda cb, b=b: r.publish(name, b, cb) for b in bodies])
        return [(r.uid, x.args[1]) for x in reqs]

    async def acquire(self, timeout: Optional[float] = None) -> Delivery:
        """The next message for this consumer: it waits (stopped) while another member owns
        the queue. Raises AcquireTimeout when nothing came within ``timeout`` seconds."""
        got = await self._acquire(1, timeout, many=False)
        if not got:
            raise AcquireTimeout(f"nothing acquired from {self.name!r} in {timeout}s")
        return got[0]

    async def acquire_many(self, n: int, timeout: Optional[float] = None) -> list:
        """Up to ``n`` messages, as soon as at least one is here and nothing more is on its
        way; [] when nothing came within ``timeout``."""
        return await self._acquire(n, timeout, many=True)

    async def _acquire(self, n: int, timeout: Optional[float], many: bool) -> list:
        svc = self.service
        r = svc._replica()
        fut, req = svc._future(lambda cb: r.acquire(self.name, n, cb, many=many))
        svc._after_input()
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            r.cancel(req)  # what it holds goes back, unless "many" keeps what it has
            svc._after_input()
        except asyncio.CancelledError:
            r.cancel(req)
            svc._after_input()
            raise
        if fut.done() and not fut.cancelled():
            fut.exception()  # retrieved: a failure is raised from ``req`` below
        if req.error is not None:
            raise req.error
        return [Delivery(self, d) for d in (req.result or ())]

    async def settle(self, op: str, delivery: Delivery) -> None:
        svc = self.service
        await svc._call(lambda cb: svc.replica.settle(op, delivery.acquired, cb))

    async def accept(self, delivery: Delivery) -> None:
        await self.settle("accept", delivery)

    async def release(self, delivery: Delivery) -> None:
        await self.settle("release", delivery)

    async def reject(self, delivery: Delivery) -> None:
        await self.settle("reject", delivery)

    async def settle_many(self, op: str, deliveries: Iterable[Delivery]) -> None:
        """Settle many in one batch; raises the first error after all completed."""
        svc = self.service
        r = svc._replica()
        await svc._many([lambda cb, d=d: r.settle(op, d.acquired, cb) for d in deliveries])

    async def purge(self) -> int:
        """Drop every available (not acquired) message of the queue, everywhere; how many.
        Raises QueueUnsupported while an older build is in the view."""
        return (await self.service._call(lambda cb: self.service.replica.purge(self.name, cb))).result

    async def delete(self) -> int:
        """Delete the queue everywhere, with what it holds; how many messages went. Later
        calls on it raise NoSuchQueue; deliveries held from it can no longer be settled."""
        return (await self.service._call(
            lambda cb: self.service.replica.delete(self.name, cb))).result

    def depth(self) -> int:
        """Messages on the queue (available and acquired), as this member knows it."""
        return self.service._replica().depth(self.name)

    def info(self) -> dict:
        """The queue's figures and limits (not the whole service's: its digest costs a pass
        over every message of every queue)."""
        return self.service._replica().queues().get(self.name, {})


def queue_ties(config: Any, durable: bool) -> tuple:
    """(whether a durable replica counts the even split's tie, ties.py; a warning or None).
    Only with ``primary.tie_breaker="store"`` and a store that outlives the group."""
    if not durable or config.primary.tie_breaker != "store":
        return False, None
    if outlives_cluster(config.store.url):
        return True, None
    return False, (f"durable queues take the even split's tie only from a store that "
                   f"outlives the group (file://, s3://), not {config.store.url!r}: on an "
                   f"even split the durable queue waits for the other half")


class WorkQueues:
    """The work queue service of one Channel. Create it before ``channel.connect()``."""

    def __init__(self, channel: Channel, config: Optional[WorkQueueConfig] = None,
                 journal_dir: Optional[str] = None):
        """``journal_dir``: durable queues, journaled there (opened and replayed now)."""
        if channel.stack is not None:
            raise RuntimeError("create WorkQueues before connecting the channel")
        self.channel = channel
        self.config = config or WorkQueueConfig()
        self.journal = QueueJournal(journal_dir, channel.cluster, self.config) \
            if journal_dir is not None else None
        self.replica: Optional[Replica] = None
        self._outq: collections.deque = collections.deque()
        self._flush_scheduled = False
        self._sender: Optional[asyncio.Task] = None
        self._ticker: Optional[asyncio.Task] = None
        self._wake: Optional[asyncio.Event] = None
        self._closed = False
        self._closed_by: Optional[QueueClosed] = None
        self.send_errors = 0
        self._arbs: set = set()  # the arbitrators of the last state exchange
        # deliveries pass through us first, synchronously, in delivery order
        self._app_messages, self._app_event = channel._on_messages, channel._on_event
        channel._on_messages, channel._on_event = self._on_messages, self._on_event
        # every view's state exchange carries our queue position
        channel._exchange_handlers = (self._exchange_data, self._on_exchange)

    # -- wiring -------------------------------------------------------------------------
    def _replica(self) -> Replica:
        if self.replica is None:
            if self.channel.stack is None:
                raise GroupClosed("connect() the channel first")
            loop = asyncio.get_running_loop()
            j = self.journal
            use_ties, why = queue_ties(self.channel.config, j is not None)
            if why:
                log.warning("%s: %s", self.channel.name, why)
            self.replica = Replica(self.channel.stack.local, self.config, clock=loop.time,
                                   wall=time.time, durable=j is not None,
                                   recovered=j.recovered if j is not None else None,
                                   ties=use_ties)
            if j is not None:
                j.start(loop, self._on_durable, self._on_journal_error)
            self._wake = asyncio.Event()
            self._sender = loop.create_task(self._send_loop())
            self._ticker = loop.create_task(self._tick_loop())
        return self.replica

    def _exchange_data(self) -> list:
        return self._replica().exchange_data()

    def _on_exchange(self, view_id: list, data: dict) -> None:
        positions = {a.uid: d for a, d in data.items()}
        self._arbs = arbitrators(positions)
        self._replica().on_exchange(view_id, positions)

    def arbitrators(self) -> set:
        """UUIDs (bytes) of the arbitrators in the last view's state exchange (their queue
        position says so), and this member's own when it is one."""
        own = {self.channel.stack.local.uid} \
            if self.config.arbitrator and self.channel.stack is not None else set()
        return self._arbs | own

    def _on_messages(self, batch: list) -> None:
        r = self._replica()
        rest = [m for m in batch if not r.on_message(m)]
        self._after_input()
        if rest:
            self._app_messages(rest)

    def _on_event(self, ev: Any) -> None:
        t = type(ev)
        if t is ViewChange:
            self._outq.clear()  # what the old view's epoch sent would be refused anyway
            self._replica().on_view(ev.view)
            self._after_input()
        elif t is Left and self.replica is not None and not self._closed:
            asyncio.get_running_loop().create_task(self.close())  # we left the group
        self._app_event(ev)

    # -- sending ------------------------------------------------------------------------
    def _after_input(self) -> None:
        """Collect what the replica wants sent at the end of this loop turn, so calls made
        in the same turn share a multicast."""
        if not self._flush_scheduled and not self._closed:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.replica is None or self._closed:
            return
        if self.journal is not None:
            self.journal.write(self.replica.take_journal())
            self._ask_ties()
        out = self.replica.take_outgoing()
        if out:
            self._outq.extend(out)
            self._wake.set()

    def _ask_ties(self) -> None:
        """The replica's even-split ties (ties.py), from the channel's discovery store."""
        replica = self.replica
        ties.ask_all(replica, self.channel.runtime.store, self.channel.cluster,
                     lambda: replica is self.replica and not self._closed, self._after_input)

    def _on_durable(self, pos: tuple) -> None:
        if self.replica is not None and not self._closed:
            self.replica.on_durable(pos)
            self._after_input()

    def _on_journal_error(self, err: JournalError) -> None:
        """Fail-stop: the queues cannot be durable here any more; the member leaves."""
        if self._closed:
            return
        log.error("%s: journal failed (%s); leaving the group", self.channel.name, err)
        error = QueueDiskError(f"{self.channel.name}: its journal failed ({err}); it left "
                               f"the group")
        asyncio.get_running_loop().create_task(self._leave(error))

    async def _leave(self, error: QueueDiskError) -> None:
        await self.close(error)
        try:
            await self.channel.close()
        except Exception:
            log.exception("leaving after the journal failed")

    async def _send_loop(self) -> None:
        ch = self.channel
        while not self._closed:
            if not self._outq:
                self._wake.clear()
                await self._wake.wait()
                continue
            dest, payload, ordered = self._outq.popleft()
            try:
                await ch.send(payload, dest=dest, ordered=ordered)
            except NotPrimary:
                self.send_errors += 1  # the view changed: the replica knows and resends
            except GroupClosed:
                return
            except RaygroupsError as e:  # a bounded buffer is full: try again shortly
                self.send_errors += 1
                log.debug("work queue send refused (%s); retrying", e)
                self._outq.appendleft((dest, payload, ordered))
                await asyncio.sleep(0.005)
            except Exception:
                log.exception("work queue send failed")

    async def _tick_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.config.tick_s)
            if self.replica is not None and self.replica.phase is Phase.ACTIVE:
                self.replica.tick()
                self._flush()

    # -- calls --------------------------------------------------------------------------
    def _future(self, make) -> tuple:
        if self._closed:
            raise self._closed_by or QueueClosed("the work queue service is closed")
        fut = asyncio.get_running_loop().create_future()

        def done(req: Request) -> None:
            if not fut.done():
                if req.error is not None:
                    fut.set_exception(req.error)
                else:
                    fut.set_result(req)
        req = make(done)
        return fut, req

    async def _many(self, makers: list) -> list:
        """Many calls, one future: the requests once all completed; raises the first
        error (after all completed)."""
        if self._closed:
            raise self._closed_by or QueueClosed("the work queue service is closed")
        self._replica()
        fut = asyncio.get_running_loop().create_future()
        left = [len(makers)]
        reqs: list = []

        def done(_req: Request) -> None:
            left[0] -= 1
            if left[0] == 0 and not fut.done():
                fut.set_result(None)
        for make in makers:
            reqs.append(make(done))
        self._after_input()
        if makers:
            await fut
        for x in reqs:
            if x.error is not None:
                raise x.error
        return reqs

    async def _call(self, make) -> Request:
        self._replica()
        fut, _req = self._future(make)
        self._after_input()
        return await fut

    async def queue(self, name: str, alternate: Optional[str] = None,
                    max_depth: Optional[int] = None, max_bytes: Optional[int] = None,
                    overflow: Optional[str] = None, ttl_s: Optional[float] = None) -> WorkQueue:
        """Create the queue (and its alternate) if it does not exist yet, replicated; the
        first creation's limits win. ``overflow``: "reject_publish" (default, QueueFull) or
        "dead_letter_oldest"; ``ttl_s``: a message TTL. Returns this member's handle on it."""
        await self._call(lambda cb: self.replica.create(name, alternate, max_depth, max_bytes,
                                                        cb, overflow, ttl_s))
        return WorkQueue(self, name, alternate)

    def queues(self) -> dict:
        """{name: figures and limits} of every queue of the group, as this member holds them."""
        return self._replica().queues()

    async def wait_active(self, timeout: float = 30.0) -> None:
        """Until this member serves calls (in a primary component, state reconciled)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self._replica().phase is not Phase.ACTIVE:
            if loop.time() > end:
                raise asyncio.TimeoutError(f"work queues not active: {self.replica.phase}")
            await asyncio.sleep(0.005)

    @property
    def disk_error(self) -> Optional[QueueDiskError]:
        """Why the service closed when its journal failed (it left the group), else None."""
        e = self._closed_by
        return e if isinstance(e, QueueDiskError) else None

    @property
    def active(self) -> bool:
        return self.replica is not None and self.replica.phase is Phase.ACTIVE

    def info(self) -> dict:
        return self._replica().info()

    async def close(self, error: Optional[QueueClosed] = None) -> None:
        """Fail what is under way (QueueClosed, or QueueOutcomeUnknown for calls already
        sent) and stop; the channel stays as it is. The journal syncs what it holds and
        closes."""
        if self._closed:
            return
        if self.replica is not None:
            self.replica.close(error)
        self._closed = True
        self._closed_by = error
        if self.journal is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.journal.close)
        for t in (self._sender, self._ticker):
            if t is not None:
                t.cancel()
        if self._wake is not None:
            self._wake.set()


class QueueChannel(Channel):
    """A Channel with the work queue service on top (``channel.queues``)."""

    def __init__(self, cluster: str, name: Optional[str] = None, config=None,
                 queue_config: Optional[WorkQueueConfig] = None,
                 journal_dir: Optional[str] = None, **kwargs: Any):
        super().__init__(cluster, name, config, **kwargs)
        self.queues = WorkQueues(self, queue_config, journal_dir)

    async def queue(self, name: str, alternate: Optional[str] = None, **limits) -> WorkQueue:
        return await self.queues.queue(name, alternate, **limits)

    async def close(self, timeout: float = 10.0) -> None:
        await self.queues.close()
        await super().close(timeout)
