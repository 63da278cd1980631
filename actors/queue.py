"""The replicated work queue through Ray: client handles and the member side.

```python
from raygroups.actors import Group
q = Group.attach("orders").queue("jobs", alternate="jobs.dead")
q.publish(b"job-17")                 # returns once replicated on a majority of the primary
# a durable group (Group.launch(..., durable=True), actors/durable.py): every member
# journals all its queues; queue(name, durable=True) raises QueueNotDurable elsewhere, and
# a publish returns once a majority has it on disk
d = q.acquire(timeout_s=5)           # a Delivery, held by this consumer only
d.accept()                           # done: forgotten everywhere
d.release()                          # back on the queue, deliverable on any member
d.reject()                           # to the alternate queue, exactly once
q.purge()                            # drop what is available (not held); how many
q.delete()                           # the queue and what it holds, everywhere
```

The lifecycle (RabbitMQ-like policies, each a replicated command): ``Group.queue(name,
max_depth=, max_bytes=, overflow="reject_publish" | "dead_letter_oldest", ttl_s=)`` and
``Group.queues()``. A lifecycle call raises QueueUnsupported while a member of an older build
is in the view (a rolling upgrade).

Every call has an async twin (``publish_async``, ``acquire_async``, ``accept_async``, ...).
Batches go in one Ray call each (``publish_many``, ``acquire_many``, ``settle_many``): the
data path is the members' own sockets, Ray carries only the calls. A batch travels in
columns (the ids of a publish as one publisher and its sequence numbers; an acquisition as
bodies and one small tuple per delivery), and a member settles a batch with one call into
its replica (``QueueHost.settle``).

Batches keyed for replay (a Spark micro-batch's partition, ``integration/queue_stream.py``):
``acquire_keyed(key, n, client=...)`` acquires under ``key``; asked again with the same key
while the member still holds what it gave, it returns the same deliveries (a task re-run
reads the same messages) instead of new ones; ``settle_keys(op, keys)`` settles everything
held under the keys. The ``client`` whose lease covers them is the caller's, renewed with
``renew(client)`` (a replay moves them to the asking client).

Settles to make again (``actors/queue_owed.py``): ``settle_many(op, ds, owe=True)`` and
``settle_keys(op, keys, owe=True)`` owe what a live member refused for now (a view change:
QueueNotPrimary, QueueOutcomeUnknown) or what a call did not get through with: the member
would otherwise keep it, leased to this process, and it would never be redelivered. The
handle (and its ``on()`` handles) settles it again at every tick of the lease keeper
(``actors/queue_lease.py``) and on ``settle_owed()`` while its member is in the group
(``group.member_names()``), and drops it once the member is not (the queue then redelivers
it); ``owed()`` counts it.

Member side: ``QueueHost`` belongs to a ``MemberActor``; ``attach(channel)`` puts the work
queue service (stack/runtime/workqueue.py) on each new channel before it connects, and the
``QueueMethods`` mixin gives the actor its ``queue_*`` methods. A Delivery is held by the
member actor that acquired it (the consumer is that member); settling goes back to it. When
that member crashes, what it held is requeued and another member delivers it.

Consumers that vanish: every acquisition through a handle is leased to the calling process
(``CLIENT``, one id per process) for ``lease_s`` (default 30 s). While the process holds
deliveries, the process's lease keeper (``actors/queue_lease.py``, a daemon thread) renews
the lease on each member that holds them every ``lease_s / 3``; a process that dies (a
driver killed, a Spark worker gone) stops renewing, and the member releases what that
process held once the lease ran out, so another consumer gets it (counted as
``lease_released`` in the member's queue info).

Errors are the work queue's own, re-raised unwrapped: QueueNotPrimary (a minority),
QueueOutcomeUnknown, QueueFull, NoSuchQueue, StaleEpoch, NotAcquired, AcquireTimeout,
QueueUnsupported, MessageTooLarge, QueueNotDurable, QueueDiskError (the member's journal
failed: it left the group).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional

from raygroups.stack.workqueue import AcquireTimeout, QueueOutcomeUnknown, WorkQueueConfig

from . import queue_lease
from .queue_lease import CLIENT
from .queue_owed import Owed, owes_again

CALL_TIMEOUT_S = 60.0
LEASE_S = 30.0
"""Default lease of a process's acquisitions (renewed every third of it while it lives)."""
LEASE_BOUNDS_S = (0.5, 3600.0)
"""A member clamps the lease a client asks for to this range."""

log = logging.getLogger("raygroups.queue")


def _ids(published: tuple) -> list:
    """Message ids from ``QueueHost.publish``'s (publisher, [sequence numbers])."""
    pub, seqs = published
    return [(pub, seq) for seq in seqs]


# ==========================================================================================
# client side
# ==========================================================================================
class Delivery:
    """A message acquired through a member actor. ``body``, ``id`` ((publisher uuid hex,
    sequence)), ``redelivered``; settle with ``accept``/``release``/``reject`` (or their
    ``_async`` twins), once."""
    __slots__ = ("handle", "queue", "member", "body", "id", "token", "redelivered")

    def __init__(self, handle: "WorkQueueHandle", queue: str, member: str, body: bytes,
                 id: tuple, token: tuple, redelivered: bool):
        self.handle, self.queue, self.member, self.body = handle, queue, member, body
        self.id, self.token, self.redelivered = id, token, redelivered

    def accept(self) -> None:
        self.handle._settle("accept", [self])

    def release(self) -> None:
        self.handle._settle("release", [self])

    def reject(self) -> None:
        self.handle._settle("reject", [self])

    async def accept_async(self) -> None:
        await self.handle._settle_async("accept", [self])

    async def release_async(self) -> None:
        await self.handle._settle_async("release", [self])

    async def reject_async(self) -> None:
        await self.handle._settle_async("reject", [self])

    def __repr__(self) -> str:
        return (f"Delivery({self.queue!r}, seq={self.id[1]}, member={self.member}, "
                f"redelivered={self.redelivered}, {len(self.body)} bytes)")


class WorkQueueHandle:
    """A queue of a group, used through its member actors (``Group.queue``). ``member``:
    always this member (e.g. one consumer per member); None: whichever member the group
    handle uses (it moves on when that one is gone)."""

    def __init__(self, group: Any, name: str, alternate: Optional[str] = None,
                 member: Optional[str] = None, max_depth: Optional[int] = None,
                 max_bytes: Optional[int] = None, create: bool = True,
                 lease_s: float = LEASE_S, overflow: Optional[str] = None,
                 ttl_s: Optional[float] = None, durable: bool = False,
                 _owed: Optional[Owed] = None):
        """``lease_s``: how long a member keeps this process's acquisitions after its last
        renewal (renewed automatically while the process lives). ``max_depth``,
        ``max_bytes``: the queue's limits (messages, body bytes; default the members'
        WorkQueueConfig); ``overflow``: what a publish beyond them does, "reject_publish"
        (default: QueueFull) or "dead_letter_oldest" (the oldest available messages go to
        the alternate, or are dropped without one, so that it fits); ``ttl_s``: messages
        older than this (from their publish) go to the alternate, or are dropped. The
        first creation's settings win. ``durable``: the queue must survive every member
        stopping at once (QueueNotDurable when the members journal nothing: launch the group
        with ``durable=True``); durability is the member's, so every queue of a durable
        group is journaled, this one asked durable or not."""
        self.group, self.name, self.alternate, self.member = group, name, alternate, member
        self.lease_s = lease_s
        self._limits = (max_depth, max_bytes)
        self._owed = _owed if _owed is not None else Owed(
            group, name, self._settle_tokens, self._settle_keys_at,
            released=lambda m, n: queue_lease.KEEPER.done(group, m, n),
            owing=lambda owed: queue_lease.KEEPER.watch(owed, lease_s))
        if create:
            policy = {k: v for k, v in (("overflow", overflow), ("ttl_s", ttl_s),
                                        ("durable", durable or None))
                      if v is not None}  # only when set: a member of an older build
            self.group._call("queue_declare", name, alternate, max_depth, max_bytes,
                             member=member, **policy)

    def __repr__(self) -> str:
        return f"WorkQueueHandle({self.group.cluster!r}, {self.name!r}, member={self.member})"

    def on(self, member: str) -> "WorkQueueHandle":
        """The same queue, used through ``member``."""
        return WorkQueueHandle(self.group, self.name, self.alternate, member, create=False,
                               lease_s=self.lease_s, _owed=self._owed)

    # -- publishing -----------------------------------------------------------------------
    def publish(self, body: bytes) -> tuple:
        """Returns the message id once a majority of the primary component applied it.
        Raises QueueOutcomeUnknown when the member it went to vanished with it in flight:
        the handle never publishes it again through another member, which could store it
        twice (the member may have multicast it before it went)."""
        return self.publish_many([body])[0]

    def publish_many(self, bodies: list) -> list:
        """Many messages in one call (batched into few multicasts); their ids. Raises as
        ``publish`` does (then some of them may have taken effect)."""
        return _ids(self.group._call("queue_publish", self.name, list(bodies),
                                     member=self.member, unsure=QueueOutcomeUnknown))

    async def publish_async(self, body: bytes) -> tuple:
        return (await self.publish_many_async([body]))[0]

    async def publish_many_async(self, bodies: list) -> list:
        return _ids(await self.group._acall("queue_publish", self.name, list(bodies),
                                            member=self.member, unsure=QueueOutcomeUnknown))

    # -- acquiring ------------------------------------------------------------------------
    def acquire(self, timeout_s: Optional[float] = None) -> Delivery:
        """The next message; waits while another member owns the queue. Raises
        AcquireTimeout when nothing came within ``timeout_s``."""
        got = self.acquire_many(1, timeout_s, _many=False)
        if not got:
            raise AcquireTimeout(f"nothing acquired from {self.name!r} in {timeout_s}s")
        return got[0]

    def acquire_many(self, n: int, timeout_s: Optional[float] = None,
                     _many: bool = True) -> list:
        """Up to ``n`` messages (at least one unless ``timeout_s`` passed: then [])."""
        got = self.group._call("queue_acquire", self.name, n, timeout_s, _many, CLIENT,
                               self.lease_s, member=self.member,
                               timeout=(timeout_s or 0) + CALL_TIMEOUT_S)
        return self._leased(got)

    async def acquire_async(self, timeout_s: Optional[float] = None) -> Delivery:
        got = await self.acquire_many_async(1, timeout_s, _many=False)
        if not got:
            raise AcquireTimeout(f"nothing acquired from {self.name!r} in {timeout_s}s")
        return got[0]

    async def acquire_many_async(self, n: int, timeout_s: Optional[float] = None,
                                 _many: bool = True) -> list:
        got = await self.group._acall("queue_acquire", self.name, n, timeout_s, _many,
                                      CLIENT, self.lease_s, member=self.member,
                                      timeout=(timeout_s or 0) + CALL_TIMEOUT_S)
        return self._leased(got)

    def acquire_keyed(self, key: str, n: int, timeout_s: Optional[float] = None,
                      client: str = CLIENT) -> list:
        """Up to ``n`` messages under ``key`` (see the module doc): the deliveries the member
        still holds under ``key``, or new ones. ``client``: whose lease covers them; another
        client than this process's renews its lease itself (``renew``)."""
        got = self.group._call("queue_acquire", self.name, n, timeout_s, True, client,
                               self.lease_s, key, member=self.member,
                               timeout=(timeout_s or 0) + CALL_TIMEOUT_S)
        return self._leased(got) if client == CLIENT else self._deliveries(got)

    def settle_keys(self, op: str, keys: list, owe: bool = False,
                    timeout: float = CALL_TIMEOUT_S) -> dict:
        """accept/release/reject everything held under ``keys`` at this handle's member:
        {"settled": n, "failed": n, "held": n still held there under them afterwards}.
        ``owe``: keys the member still holds something under afterwards (it refused for
        now), or whose call failed, are owed (``settle_owed``); needs the handle's
        ``member``."""
        if owe and self.member is None:
            raise ValueError("settle_keys(owe=True) needs a handle on one member (on())")
        try:
            got = self.group._call("queue_settle_keys", self.name, op, list(keys),
                                   member=self.member, timeout=timeout)
        except Exception as e:
            if owe and owes_again(e):
                self._owed.add_keys(self.member, op, keys)
            raise
        if owe and got.get("held"):
            self._owed.add_keys(self.member, op, keys)
        return got

    def _settle_keys_at(self, member: str, op: str, keys: list) -> dict:
        """Owed keys settled again (``queue_owed.Owed``), each call within a lease tick."""
        return self.on(member).settle_keys(op, keys, owe=True,
                                           timeout=max(1.0, self.lease_s / 3))

    def renew(self, client: str = CLIENT) -> int:
        """Renew ``client``'s lease (``lease_s``) at this handle's member; how many
        deliveries it holds there."""
        return self.group._call("queue_renew", client, self.lease_s, member=self.member)

    def _deliveries(self, got: dict) -> list:
        """Deliveries from a member's answer (``QueueHost.acquire``'s columns)."""
        queue, member, pubs = got["queue"], got["member"], got["publishers"]
        return [Delivery(self, queue, member, body, (pubs[p], seq), (epoch, k), bool(again))
                for body, (p, seq, epoch, k, again) in zip(got["bodies"], got["meta"])]

    def _leased(self, got: dict) -> list:
        """The deliveries of a member's answer, leased to this process."""
        out = self._deliveries(got)
        queue_lease.KEEPER.add(self.group, got["member"], len(out), self.lease_s)
        return out

    # -- settling -------------------------------------------------------------------------
    def settle_many(self, op: str, deliveries: list, owe: bool = False) -> None:
        """accept/release/reject many deliveries (grouped per member, one call each); raises
        the first error. ``owe``: each member is asked even when another failed, and the
        deliveries a member refused for now (any error but its "not held" answers:
        NotAcquired, StaleEpoch, NoSuchQueue), or whose call failed, are owed: settled
        again while their member is in the group (``settle_owed``, and at every tick of
        the process's lease keeper)."""
        self._settle(op, deliveries, owe)

    async def settle_many_async(self, op: str, deliveries: list, owe: bool = False) -> None:
        await self._settle_async(op, deliveries, owe)

    def owed(self) -> dict:
        """What this queue's handles owe: {"deliveries", "keys"} now, and so far
        "settled" (again), "gone" (dropped: their member left the group, and the queue
        redelivers them) and "over_limit" (not kept: beyond the bound,
        ``queue_owed.MAX_OWED``; left to their lease)."""
        return self._owed.info()

    def owes(self, delivery: Delivery) -> bool:
        """Whether ``delivery``'s settle is owed (to be made again)."""
        return self._owed.owes(delivery)

    def settle_owed(self, only: Optional[list] = None) -> int:
        """Settle again what is owed now (``only``: of these deliveries), rather than at
        the lease keeper's next tick; how many were settled (deliveries, and jobs under
        keys). Those a member still refuses stay owed; those of a member no longer in the
        group are dropped."""
        return self._owed.settle(only)

    @staticmethod
    def _by_member(deliveries: list) -> dict:
        out: dict = {}
        for d in deliveries:
            out.setdefault((d.member, d.queue), []).append(d)
        return out

    def _settled(self, member: str, op: str, ds: list, errs: list, owe: bool) -> None:
        """Every delivery answered (done, or not ours any more) leaves the lease count but
        those owed (``owe``)."""
        again = [d for d, e in zip(ds, errs) if owes_again(e)] if owe else []
        self._owed.add_deliveries(member, op, again)  # those it does not keep: released
        queue_lease.KEEPER.done(self.group, member, len(ds) - len(again))

    def _settle_at(self, member: str, queue: str, op: str, ds: list, owe: bool,
                   timeout: float = CALL_TIMEOUT_S) -> list:
        """Settle ``ds`` at ``member``: [None or the error] per delivery. ``owe``: a call
        that failed answers its error for each, and what is refused for now is owed."""
        try:
            errs = self.group._call("queue_settle", queue, op, [d.token for d in ds],
                                    member=member, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - owed (unless "not held"), or raised
            if not owe:
                raise
            errs = [e] * len(ds)
        self._settled(member, op, ds, errs, owe)
        return errs

    def _settle_tokens(self, member: str, op: str, ds: list) -> list:
        """The owed deliveries ``ds`` of ``member`` settled again (``queue_owed.Owed``),
        each call within a lease tick (one that times out is owed again: a later try of
        a settle that took effect meanwhile answers NotAcquired, and is done)."""
        return self._settle_at(member, ds[0].queue, op, ds, True,
                               timeout=max(1.0, self.lease_s / 3))

    def _settle(self, op: str, deliveries: list, owe: bool = False) -> None:
        errs = [e for (member, queue), ds in self._by_member(deliveries).items()
                for e in self._settle_at(member, queue, op, ds, owe)]
        first = next((e for e in errs if e is not None), None)
        if first is not None:
            raise first

    async def _settle_async(self, op: str, deliveries: list, owe: bool = False) -> None:
        errs: list = []
        for (member, queue), ds in self._by_member(deliveries).items():
            try:
                got = await self.group._acall("queue_settle", queue, op,
                                              [d.token for d in ds], member=member)
            except Exception as e:  # noqa: BLE001 - owed (unless "not held"), or raised
                if not owe:
                    raise
                got = [e] * len(ds)
            self._settled(member, op, ds, got, owe)
            errs += got
        first = next((e for e in errs if e is not None), None)
        if first is not None:
            raise first

    # -- the lifecycle ----------------------------------------------------------------------
    def purge(self) -> int:
        """Drop every available (not acquired) message of the queue, on every member; how
        many went. What consumers hold stays theirs."""
        return self.group._call("queue_purge", self.name, member=self.member,
                                unsure=QueueOutcomeUnknown)

    def delete(self) -> int:
        """Delete the queue on every member, with everything on it; how many messages went.
        Later calls on it raise NoSuchQueue; deliveries held from it can no longer be
        settled (NoSuchQueue). Declaring it again makes a new, empty queue. Neither is sent
        again through another member when its member vanished with it in flight
        (QueueOutcomeUnknown)."""
        return self.group._call("queue_delete", self.name, member=self.member,
                                unsure=QueueOutcomeUnknown)

    async def purge_async(self) -> int:
        return await self.group._acall("queue_purge", self.name, member=self.member,
                                       unsure=QueueOutcomeUnknown)

    async def delete_async(self) -> int:
        return await self.group._acall("queue_delete", self.name, member=self.member,
                                       unsure=QueueOutcomeUnknown)

    # -- reading --------------------------------------------------------------------------
    def info(self) -> dict:
        """depth, available, acquired, bytes, limits, overflow, ttl_s, owner, counters
        (enqueued, dequeued, rejected, requeued, purged, expired, overflowed, dropped), as
        the member sees them."""
        return self.group._call("queue_info", self.name, member=self.member)

    def depth(self) -> int:
        return self.info().get("depth", 0)


# ==========================================================================================
# member side
# ==========================================================================================
class QueueHost:
    """The work queue service of one member actor, across its channels (a rejoin makes a
    new channel, hence a new service)."""

    def __init__(self, member_name: str, config: Any = None,
                 journal_dir: Optional[str] = None):
        """``config``: a WorkQueueConfig, or a dict of its fields (from the member's spec:
        ``MemberSpec.extra["workqueue"]``), or None for the defaults. ``journal_dir``: this
        member journals its queues there (durable: actors/durable.py), one journal for all
        of them, found again when the member starts on it."""
        self.member_name = member_name
        if isinstance(config, dict):
            config = WorkQueueConfig(**config)
        self.config = config or WorkQueueConfig()
        self.journal_dir = journal_dir
        self.service = None
        self.held: dict = {}    # (queue, token) -> runtime Delivery handed to a client
        self.holder: dict = {}  # (queue, token) -> the client (process id) that holds it
        self.keyed: dict = {}   # (queue, key) -> {token: None} held under that key
        self.key_of: dict = {}  # (queue, token) -> the key it was acquired under
        self.keying: dict = {}  # (queue, key) -> asyncio.Lock while a call acquires for it
        self.leases: dict = {}  # client -> (monotonic deadline, lease_s)
        self.lease_released = 0
        self._sweeper: Optional[asyncio.Task] = None

    async def attach(self, channel: Any) -> None:
        """Before ``channel.connect()``: the work queues ride on this channel, once the
        previous channel's service closed (and with it a durable member's journal, which
        the new service opens and replays again)."""
        from raygroups.stack.runtime.workqueue import WorkQueues
        old, self.service = self.service, None
        if old is not None:
            await old.close()
        self.held, self.holder, self.keyed, self.key_of = {}, {}, {}, {}
        self.service = WorkQueues(channel, self.config, self.journal_dir)

    @property
    def durable(self) -> bool:
        """This member journals its queues (a durable group's data member)."""
        return self.journal_dir is not None and not self.config.arbitrator

    @property
    def arbitrator(self) -> bool:
        """This member is an arbitrator (``WorkQueueConfig.arbitrator``): it votes, holds no
        queue, and every queue call on it raises QueueArbitrator at once."""
        return self.config.arbitrator

    def arbitrators(self) -> set:
        """UUIDs (bytes) of the arbitrators of this member's last view (from its state
        exchange), this member's own included when it is one."""
        return self.service.arbitrators() if self.service is not None else set()

    def _no_arbitrator(self) -> None:
        from raygroups.stack.workqueue import QueueArbitrator
        if self.arbitrator:
            raise QueueArbitrator(f"{self.member_name} is an arbitrator: it votes in the "
                                  f"group and holds no queues")

    def _svc(self):
        from raygroups.stack.workqueue import QueueNotPrimary
        self._no_arbitrator()
        failed = self.service.disk_error if self.service is not None else None
        if failed is not None:
            raise failed  # its journal failed: it left the group (fail-stop)
        if self.service is None or self.service.channel.stack is None:
            raise QueueNotPrimary(f"{self.member_name} has no channel")
        return self.service

    async def _active(self):
        """The service once it serves calls; QueueNotPrimary after 30 s without."""
        from raygroups.stack.workqueue import QueueNotPrimary
        self._no_arbitrator()
        try:
            await self._svc().wait_active(30.0)
        except asyncio.TimeoutError:
            raise QueueNotPrimary(f"{self.member_name}: the work queues are not active "
                                  f"(not in a primary component)") from None
        return self._svc()

    async def declare(self, name: str, alternate: Optional[str] = None,
                      max_depth: Optional[int] = None, max_bytes: Optional[int] = None,
                      overflow: Optional[str] = None, ttl_s: Optional[float] = None,
                      durable: bool = False) -> dict:
        """``durable``: QueueNotDurable unless this member journals (every queue of a
        journaling member is durable, asked or not)."""
        if durable and not self.durable:
            from raygroups.stack.workqueue import QueueNotDurable
            self._no_arbitrator()
            raise QueueNotDurable(f"{self.member_name} journals nothing: launch the group "
                                  f"with durable=True (raygroups up --durable) for durable "
                                  f"queues")
        q = await (await self._active()).queue(name, alternate, max_depth, max_bytes,
                                               overflow, ttl_s)
        return q.info()

    async def lifecycle(self, op: str, name: str) -> int:
        """purge or delete ``name``: how many messages went."""
        from raygroups.stack.runtime.workqueue import WorkQueue
        return await getattr(WorkQueue(await self._active(), name, None), op)()

    def queues(self) -> dict:
        """{name: figures and limits} of every queue, as this member holds them."""
        self._no_arbitrator()
        if self.service is None or self.service.replica is None:
            return {}
        return self.service.queues()

    async def publish(self, name: str, bodies: list) -> tuple:
        """(publisher UUID hex, [sequence numbers]): the ids of ``bodies``, in order."""
        from raygroups.stack.runtime.workqueue import WorkQueue
        q = WorkQueue(self._svc(), name, None)
        ids = await q.publish_many(bodies)
        return (ids[0][0].hex() if ids else "", [seq for _pub, seq in ids])

    def renew(self, client: str, lease_s: float) -> int:
        """Extend ``client``'s lease by ``lease_s`` from now; how many deliveries it holds."""
        lease_s = min(max(lease_s, LEASE_BOUNDS_S[0]), LEASE_BOUNDS_S[1])
        self.leases[client] = (time.monotonic() + lease_s, lease_s)
        return sum(1 for c in self.holder.values() if c == client)

    async def _sweep(self) -> None:
        """Release what clients whose lease ran out held (they vanished)."""
        while self.holder:
            await asyncio.sleep(LEASE_BOUNDS_S[0] / 2)
            now = time.monotonic()
            gone = {c for c, (deadline, _) in self.leases.items() if deadline < now}
            if not gone:
                continue
            for c in gone:
                del self.leases[c]
            expired: dict = {}
            for (name, token), c in list(self.holder.items()):
                if c in gone:
                    expired.setdefault(name, []).append(list(token))
            for name, tokens in expired.items():
                errs = await self.settle(name, "release", tokens)
                released = sum(e is None for e in errs)
                self.lease_released += released
                log.warning("%s: released %d deliveries of %r whose consumer stopped "
                            "renewing its lease", self.member_name, released, name)
        self._sweeper = None

    def _hold(self, client: Optional[str], lease_s: float) -> None:
        if client is not None:
            self.renew(client, lease_s)
            if self._sweeper is None:
                self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def _columns(self, name: str, ds: list) -> dict:
        """The answer to an acquisition: the runtime deliveries ``ds`` in columns (bodies,
        and per delivery its publisher's index, sequence number, token and redelivered)."""
        pubs: dict = {}
        bodies, meta = [], []
        for d in ds:
            a = d.acquired
            pub = a.mid[0]
            p = pubs.get(pub)
            if p is None:
                p = pubs[pub] = len(pubs)
            bodies.append(a.body)
            meta.append((p, a.mid[1], a.token[0], a.token[1], a.redelivered))
        return {"queue": name, "member": self.member_name, "bodies": bodies, "meta": meta,
                "publishers": [pub.hex() for pub in pubs]}

    def _replay(self, name: str, key: str, client: Optional[str],
                lease_s: float) -> Optional[dict]:
        """What ``key`` still holds, now held by ``client``; None when the key holds
        nothing."""
        tokens = list(self.keyed.get((name, key), ()))
        if not tokens:
            return None
        self._hold(client, lease_s)
        if client is not None:
            for t in tokens:
                self.holder[(name, t)] = client
        return self._columns(name, [self.held[(name, t)] for t in tokens])

    async def acquire(self, name: str, n: int = 1, timeout_s: Optional[float] = None,
                      many: bool = True, client: Optional[str] = None,
                      lease_s: float = LEASE_S, key: Optional[str] = None) -> dict:
        """``client`` (a process id) holds what is acquired under a lease of ``lease_s``
        (renewed by ``renew``); None: held until settled or this member goes. ``key``: a
        replayable acquisition (the deliveries this member still holds under ``key``, if
        any, else new ones recorded under it)."""
        if key is None:
            return await self._acquire(name, n, timeout_s, many, client, lease_s, None)
        lock = self.keying.setdefault((name, key), asyncio.Lock())
        try:
            async with lock:  # a second call for the key (a speculative task) replays
                again = self._replay(name, key, client, lease_s)
                if again is not None:
                    return again
                return await self._acquire(name, n, timeout_s, many, client, lease_s, key)
        finally:
            if not lock.locked() and self.keying.get((name, key)) is lock:
                del self.keying[(name, key)]

    async def _acquire(self, name: str, n: int, timeout_s: Optional[float], many: bool,
                       client: Optional[str], lease_s: float, key: Optional[str]) -> dict:
        from raygroups.stack.runtime.workqueue import WorkQueue
        q = WorkQueue(self._svc(), name, None)
        if many:
            got = await q.acquire_many(n, timeout_s)
        else:
            try:
                got = [await q.acquire(timeout_s)]
            except AcquireTimeout:
                got = []
        if got:
            self._hold(client, lease_s)
        held, holder = self.held, self.holder
        for d in got:
            token = d.acquired.token
            held[(name, token)] = d
            if client is not None:
                holder[(name, token)] = client
        if got and key is not None:
            self.keyed[(name, key)] = dict.fromkeys(d.acquired.token for d in got)
            self.key_of.update(((name, d.acquired.token), key) for d in got)
        return self._columns(name, got)

    async def settle_keys(self, name: str, op: str, keys: list) -> dict:
        """Settle everything held under ``keys``: {"settled": n, "failed": n, "held": n},
        ``held`` the deliveries still held here under them afterwards (those this member
        refused for now, such as in a view change: settle them again)."""
        tokens = [t for k in keys for t in self.keyed.get((name, k), ())]
        errs = await self.settle(name, op, tokens)
        failed = sum(e is not None for e in errs)
        held = sum(len(self.keyed.get((name, k), ())) for k in keys)
        return {"settled": len(errs) - failed, "failed": failed, "held": held}

    async def settle(self, name: str, op: str, tokens: list) -> list:
        """[None or the error] per token. The deliveries held here are settled in one
        batch (``WorkQueue.settle_many``: one call into the replica, one multicast). The
        replica tells a failed batch's first error only, so then each delivery of the
        batch is settled again on its own for its own answer: the replica refuses a token
        it no longer holds (NotAcquired), so nothing is settled twice, and a delivery the
        batch did settle answers NotAcquired, which here means done. (So does one that a
        concurrent settle of the same token took meanwhile, such as the release of a lease
        that ran out: it is no longer held either way, and a released one is redelivered.)
        When the batch's outcome is unknown (QueueOutcomeUnknown: sent, and the member left
        the primary component before a majority confirmed it; the primary side may have
        applied it), a delivery whose retry fails answers that, not the retry's own error:
        the retry's QueueNotPrimary says only that the retry took no effect, and the client
        must not read it as "not accepted" (the campaign across hosts found a job accepted
        by the batch on the primary side and reported to its client as not accepted)."""
        from raygroups.stack.workqueue import NoSuchQueue, NotAcquired, StaleEpoch
        self._svc()  # QueueNotPrimary without a channel
        out: list = []
        todo: dict = {}  # token -> (index in out, runtime Delivery)
        for t in tokens:
            t = tuple(t)
            d = self.held.get((name, t))
            if d is None or t in todo:
                out.append(NotAcquired(f"{name!r}: no delivery {t} held at "
                                       f"{self.member_name}"))
            else:
                todo[t] = (len(out), d)
                out.append(None)
        if not todo:
            return out
        first = next(iter(todo.values()))[1]
        try:
            await first.queue.settle_many(op, [d for _i, d in todo.values()])
        except Exception as batch_error:  # noqa: BLE001 - each delivery's own answer below
            unknown = batch_error if isinstance(batch_error, QueueOutcomeUnknown) else None

            async def one(t: tuple, i: int, d: Any) -> None:
                try:
                    await d.queue.settle(op, d)
                except NotAcquired:
                    pass  # the batch settled it
                except Exception as e:  # noqa: BLE001 - handed to the client
                    out[i] = unknown or e
                    if not isinstance(e, (StaleEpoch, NoSuchQueue)):
                        return  # still ours: it may be settled again (not: deleted)
                self._forget(name, t)
            await asyncio.gather(*[one(t, i, d) for t, (i, d) in todo.items()])
            return out
        for t in todo:
            self._forget(name, t)
        return out

    def _forget(self, name: str, token: tuple) -> None:
        self.held.pop((name, token), None)
        self.holder.pop((name, token), None)
        key = self.key_of.pop((name, token), None)
        if key is not None:
            entry = self.keyed.get((name, key), {})
            entry.pop(token, None)
            if not entry:
                self.keyed.pop((name, key), None)

    def info(self, name: Optional[str] = None) -> dict:
        """One queue's figures, or the service's with ``leases`` (clients holding
        deliveries, deliveries leased, deliveries released because a lease ran out)."""
        self._no_arbitrator()
        if self.service is None or self.service.replica is None:
            return {}
        if name is not None:  # without the service's digest, a pass over every message
            return self.service.queues().get(name, {})
        info = self.service.info()
        info["durable"] = self.durable
        info["journal_dir"] = self.journal_dir
        info["leases"] = {"clients": len(set(self.holder.values())),
                          "leased": len(self.holder), "lease_released": self.lease_released}
        return info

    async def close(self) -> None:
        if self.service is not None:
            await self.service.close()


class QueueMethods:
    """Mixin of ``MemberActor``: its ``queue_*`` methods. Needs ``self.queue_host``."""

    async def queue_declare(self, name: str, alternate: Optional[str] = None,
                            max_depth: Optional[int] = None,
                            max_bytes: Optional[int] = None, overflow: Optional[str] = None,
                            ttl_s: Optional[float] = None, durable: bool = False) -> dict:
        return await self.queue_host.declare(name, alternate, max_depth, max_bytes, overflow,
                                             ttl_s, durable)

    async def queue_purge(self, name: str) -> int:
        return await self.queue_host.lifecycle("purge", name)

    async def queue_delete(self, name: str) -> int:
        return await self.queue_host.lifecycle("delete", name)

    def queue_list(self) -> dict:
        return self.queue_host.queues()

    async def queue_publish(self, name: str, bodies: list) -> list:
        return await self.queue_host.publish(name, bodies)

    async def queue_acquire(self, name: str, n: int = 1, timeout_s: Optional[float] = None,
                            many: bool = True, client: Optional[str] = None,
                            lease_s: float = LEASE_S, key: Optional[str] = None) -> dict:
        return await self.queue_host.acquire(name, n, timeout_s, many, client, lease_s, key)

    async def queue_settle_keys(self, name: str, op: str, keys: list) -> dict:
        return await self.queue_host.settle_keys(name, op, keys)

    def queue_renew(self, client: str, lease_s: float = LEASE_S) -> int:
        return self.queue_host.renew(client, lease_s)

    async def queue_settle(self, name: str, op: str, tokens: list) -> list:
        return await self.queue_host.settle(name, op, tokens)

    def queue_info(self, name: Optional[str] = None) -> dict:
        return self.queue_host.info(name)
