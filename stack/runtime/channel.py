"""``Channel``: the asyncio face of one member (JGroups' JChannel).

Owns a Runtime (real sockets) and a Stack. Deliveries go into a bounded queue; when the
application falls ``max_queued`` behind, the channel tells the stack
(``stack.set_app_blocked``): flow control holds further deliveries and stops granting
credits, so senders block, while acks, probes and views keep flowing. Without a flow
control layer (gossip mode) the runtime stops reading sockets instead until it catches up.
"""
from __future__ import annotations

import asyncio
import collections
import os
import random
import uuid
from typing import Any, AsyncIterator, Callable, Iterable, Optional

from ..config import StackConfig
from ..errors import GroupClosed, JoinRejected, JoinTimeout, NotConnected, NotPrimary
from ..message import ORDERED, Message
from ..state_transfer import StateTransferFailed
from ..view import Left, View, ViewChange
from .host import Runtime
from .stores import prepare_channel


class Channel:
    def __init__(self, cluster: str, name: Optional[str] = None,
                 config: Optional[StackConfig] = None, max_queued: int = 100_000,
                 store: Any = None, get_state: Optional[Callable[[], bytes]] = None,
                 set_state: Optional[Callable[[bytes], None]] = None):
        """``store``: the StoreClient of store discovery (e.g. one that forwards to the
        node's DiscoverySupervisor); by default opened from ``config.store.url``. With a
        bootstrap file and no ``name``, the channel takes the next line's name (file order).
        ``get_state``/``set_state``: state transfer to joiners; get_state runs in delivery
        order, so state kept by applying messages as they are delivered matches exactly. A
        joiner whose state never comes gets a StateTransferFailed event and leaves (ERROR in
        ``member_attributes()`` meanwhile)."""
        self._state_handlers = (get_state, set_state)
        self._exchange_handlers: Optional[tuple] = None  # a service's (WorkQueues) part
        self.cluster = cluster
        self._named, self._store = name is not None, store
        self.name = name or uuid.uuid4().hex[:8]
        self.config = config or StackConfig.local()
        self.max_queued = max_queued
        self.runtime: Optional[Runtime] = None
        self.stack = None
        self._queue: collections.deque = collections.deque()
        self._ready: Optional[asyncio.Event] = None
        self._writable: Optional[asyncio.Event] = None
        self._joined: Optional[asyncio.Future] = None
        self._left: Optional[asyncio.Future] = None
        self._closed = False
        self._paused = False

    # -- lifecycle ----------------------------------------------------------------------
    async def connect(self, timeout: float = 30.0) -> View:
        """Found or join the group; returns the first view."""
        if self.stack is not None:
            raise RuntimeError("channel already connected")
        loop = asyncio.get_running_loop()
        self._ready, self._writable = asyncio.Event(), asyncio.Event()
        self._writable.set()
        self._joined, self._left = loop.create_future(), loop.create_future()
        # store discovery: the store client, a bootstrap file's identity (uid, name, port)
        cfg, uid, self.name, store = await prepare_channel(self.config, self.cluster,
                                                           self.name, self._named, self._store)
        self.runtime = Runtime(cfg.transport, cfg.needs_mcast_socket, watch=cfg.fd_sock.enabled)
        self.runtime.store = store
        await self.runtime.start()
        rng = random.Random(int.from_bytes(os.urandom(16), "big"))
        self.stack = cfg.build(self.cluster, self.name, self.runtime, rng, uid=uid)
        if self._state_handlers != (None, None):
            self.stack.layer("state_transfer").handlers(*self._state_handlers)
        if self._exchange_handlers is not None:
            self.stack.exchange_handlers(*self._exchange_handlers)
        self.runtime.attach(self.stack, self._on_event, self._on_messages,
                            auth=self.stack.transport.auth)
        self.stack.start()
        self.stack.connect()
        try:
            return await asyncio.wait_for(asyncio.shield(self._joined), timeout)
        except asyncio.TimeoutError:
            await self._shutdown()
            raise JoinTimeout(f"{self.name} did not join {self.cluster!r} in {timeout}s") from None
        except JoinRejected:
            await self._shutdown()
            raise

    async def close(self, timeout: float = 10.0) -> bool:
        """Leave gracefully (the others install a view without us), then release sockets.
        True when another member confirmed the leave (the coordinator sent the view without
        us, or, leaving as the coordinator, the others acknowledged it); False when nobody
        did within ``timeout``, when this member was alone in its view, or when the channel
        was closed already. Unconfirmed, the others exclude this member as a crash."""
        if self._closed or self.stack is None:
            return False
        self._closed = True
        alone = self.view is None or len(self.view) < 2
        self.stack.leave()
        confirmed = False
        try:
            left = await asyncio.wait_for(asyncio.shield(self._left), timeout)
            confirmed = left.reason == "left" and not alone
        except asyncio.TimeoutError:
            pass
        await self._shutdown()
        return confirmed

    async def _shutdown(self) -> None:
        self._closed = True
        if self.stack is not None:
            self.stack.stop()
        if self.runtime is not None:
            await self.runtime.close()
        if self._ready is not None:
            self._ready.set()

    # -- state --------------------------------------------------------------------------
    @property
    def view(self) -> Optional[View]:
        return self.stack.view if self.stack is not None else None

    @property
    def left(self) -> Optional[Left]:
        """How this member left the group, once it has: ``reason`` is "left" for a graceful
        leave, else why it was excluded or gave up (e.g. "recovery failed: ..."); None while
        it is in."""
        done = self._left is not None and self._left.done()
        return self._left.result() if done else None

    @property
    def address(self):
        if self.stack is None:
            raise NotConnected("connect() first")
        return self.stack.local

    @property
    def wire_version(self) -> Optional[int]:
        """The wire format the group speaks here (``View.wire_version`` of the view this
        member installed last; None before connect). See ``TransportConfig.wire_versions``."""
        return self.stack.wire_version if self.stack is not None else None

    @property
    def physical_address(self):
        return self.runtime.local_phys if self.runtime else None

    def stats(self) -> dict:
        out = self.stack.stats() if self.stack else {}
        if self.runtime is not None:
            out["runtime"] = dict(self.runtime.stats)
        return out

    def set_cluster_key(self, keys) -> None:
        """Swap this member's key ring live (one step of a rotation, ``stack/auth.py``):
        the next packet is sealed with the new first key; packets under any ring key open.
        ValueError for a channel that runs without a key (that is a restart, not a swap)."""
        auth = self.stack.transport.auth if self.stack is not None else None
        if auth is None:
            raise ValueError("this channel runs without a cluster key: a key ring can only "
                             "be swapped on an authenticated channel")
        auth.set_keys(keys)

    def report_dead(self, addr, reason: str = "external") -> None:
        """An external failure signal (e.g. Ray reports the member's actor or node dead):
        sent down as ``MemberDead`` to SWIM, which spreads it as a REMOVE rumor; GMS excludes
        the member on the verdict."""
        if self.stack is None:
            raise NotConnected("connect() first")
        from ..events import MemberDead
        self.stack.top.below.down_event(MemberDead(addr, reason))

    # -- sending ------------------------------------------------------------------------
    async def send(self, payload: Any, dest=None, ordered: bool = False) -> None:
        """Reliable FIFO multicast to the view (self included), or unicast to ``dest``;
        ``ordered=True``: the same total order at every member. Waits while the stack
        pushes back (flow control, a flush); outside a primary component it waits up to
        ``primary.send_timeout_s`` and raises NotPrimary (at once with
        ``primary__block_sends=False``)."""
        self._check_open()
        if not self.stack.writable_to(dest):
            await self._wait_writable(dest)
        self.stack.send(Message(dest, payload, ORDERED if ordered else 0))

    async def send_many(self, payloads: Iterable[Any], dest=None, ordered: bool = False) -> None:
        flags = ORDERED if ordered else 0
        self._check_open()
        stack = self.stack
        send = stack.send
        to = stack.blocked_to
        for p in payloads:
            # (stack.writable_to(dest), without a call per message)
            if self._closed or stack.blocked or (to and dest in to):
                self._check_open()
                if not stack.writable_to(dest):
                    await self._wait_writable(dest)
            send(Message(dest, p, flags))

    async def _wait_writable(self, dest=None) -> None:
        """Until a send to ``dest`` (None: a multicast) goes without waiting."""
        pc = self.config.primary
        loop = asyncio.get_running_loop()
        deadline = loop.time() + pc.send_timeout_s
        while not self.stack.writable_to(dest):
            if "primary" in self.stack.blocked:
                if not pc.block_sends or loop.time() >= deadline:
                    raise NotPrimary(f"{self.name} is not in a primary component")
            self._writable.clear()
            try:  # (past the deadline, blocked by flow control: a look every 50 ms, no spin)
                await asyncio.wait_for(self._writable.wait(), max(0.05, deadline - loop.time()))
            except asyncio.TimeoutError:
                pass
            self._check_open()

    def member_attributes(self) -> dict:
        """Every member's state-exchange attributes (address, port, status, primary_id,
        joiner), the same answer on every member (MySQL Group Replication's FR-1): the last
        exchange's, with the status changes announced since in their one order (ONLINE,
        RECOVERING, DONOR, OFFLINE, ERROR; see stack/primary.py). A joiner answers while it
        recovers too, before its first view is delivered (it lists itself RECOVERING); {}
        before the first exchange."""
        self._check_open(need_view=False)
        return self.stack.member_attributes()

    def _check_open(self, need_view: bool = True) -> None:
        if self.stack is None or (need_view and self.view is None):
            raise NotConnected("connect() first")
        if self._closed:
            raise GroupClosed(f"channel {self.name} is closed")

    # -- receiving ----------------------------------------------------------------------
    async def receive(self, timeout: Optional[float] = None) -> Message:
        """The next message (view changes are skipped; use ``events()`` to see them)."""
        while True:
            ev = await self._next(timeout)
            if type(ev) is Message:
                return ev

    async def receive_many(self, max_items: int = 4096,
                           timeout: Optional[float] = None) -> list:
        """The messages waiting, in delivery order: at least one (waiting up to ``timeout``),
        at most ``max_items``. The batch form of ``receive``, one await per batch instead of
        one per message (view changes are skipped; use ``events_many()`` to see them)."""
        out: list = []
        while not out:
            out = [ev for ev in await self.events_many(max_items, timeout) if type(ev) is Message]
        return out

    async def events_many(self, max_items: int = 4096,
                          timeout: Optional[float] = None) -> list:
        """ViewChange and Message events waiting, in delivery order: at least one (waiting
        up to ``timeout``), at most ``max_items``; GroupClosed once the channel is closed
        and drained. The batch form of ``events()``."""
        out = [await self._next(timeout)]
        q = self._queue
        while q and len(out) < max_items:
            out.append(q.popleft())
        if self._paused and len(q) < self.max_queued // 2:
            self._paused = False
            if not self.stack.set_app_blocked(False):  # releases what flow control held
                self.runtime.resume_reading()
        return out

    async def events(self) -> AsyncIterator[Any]:
        """ViewChange and Message events in delivery order, until the channel closes."""
        while True:
            try:
                yield await self._next(None)
            except GroupClosed:
                return

    async def _next(self, timeout: Optional[float]) -> Any:
        while not self._queue:
            if self._closed:
                raise GroupClosed(f"channel {self.name} is closed")
            self._ready.clear()
            if timeout is None:
                await self._ready.wait()
            else:
                await asyncio.wait_for(self._ready.wait(), timeout)
        ev = self._queue.popleft()
        if self._paused and len(self._queue) < self.max_queued // 2:
            self._paused = False
            if not self.stack.set_app_blocked(False):  # releases what flow control held
                self.runtime.resume_reading()
        return ev

    # -- from the stack -----------------------------------------------------------------
    def _on_messages(self, batch: list) -> None:
        self._queue.extend(batch)
        self._ready.set()
        if not self._paused and len(self._queue) >= self.max_queued:
            self._paused = True
            if not self.stack.set_app_blocked(True):
                self.runtime.pause_reading()

    def _on_event(self, ev: Any) -> None:
        t = type(ev)
        if t is ViewChange:
            self._queue.append(ev)
            self._ready.set()
            if not self._joined.done():
                self._joined.set_result(ev.view)
        elif t is StateTransferFailed:
            self._queue.append(ev)
            self._ready.set()
        elif t is Left:
            if not self._joined.done():  # refused before it joined (JoinRejected)
                self._joined.set_exception(JoinRejected(
                    f"{self.name} cannot join {self.cluster!r}: {ev.reason}"))
            if not self._left.done():
                self._left.set_result(ev)
            self._closed = True
            self._ready.set()
        if self.stack is not None and self.stack.writable:
            self._writable.set()
