"""``Channel``: the asyncio face of one member (JGroups' JChannel).

Owns a Runtime (real sockets) and a Stack. Deliveries go into a bounded queue; when the
application falls ``max_queued`` behind, the runtime stops reading sockets until it
catches up (the network and the reliability layers hold the rest).
"""
from __future__ import annotations

import asyncio
import collections
import os
import random
import uuid
from typing import Any, AsyncIterator, Iterable, Optional

from ..config import StackConfig
from ..errors import GroupClosed, JoinTimeout, NotConnected
from ..message import Message
from ..view import Left, View, ViewChange
from .host import Runtime


class Channel:
    def __init__(self, cluster: str, name: Optional[str] = None,
                 config: Optional[StackConfig] = None, max_queued: int = 100_000):
        self.cluster = cluster
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
        self.runtime = Runtime(self.config.transport, self.config.needs_mcast_socket)
        await self.runtime.start()
        rng = random.Random(int.from_bytes(os.urandom(16), "big"))
        self.stack = self.config.build(self.cluster, self.name, self.runtime, rng)
        self.runtime.attach(self.stack, self._on_event, self._on_messages)
        self.stack.start()
        self.stack.connect()
        try:
            return await asyncio.wait_for(asyncio.shield(self._joined), timeout)
        except asyncio.TimeoutError:
            await self._shutdown()
            raise JoinTimeout(f"{self.name} did not join {self.cluster!r} in {timeout}s") from None

    async def close(self, timeout: float = 10.0) -> None:
        """Leave gracefully (the others install a view without us), then release sockets."""
        if self._closed or self.stack is None:
            return
        self._closed = True
        self.stack.leave()
        try:
            await asyncio.wait_for(asyncio.shield(self._left), timeout)
        except asyncio.TimeoutError:
            pass
        await self._shutdown()

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
    def address(self):
        if self.stack is None:
            raise NotConnected("connect() first")
        return self.stack.local

    @property
    def physical_address(self):
        return self.runtime.local_phys if self.runtime else None

    def stats(self) -> dict:
        out = self.stack.stats() if self.stack else {}
        if self.runtime is not None:
            out["runtime"] = dict(self.runtime.stats)
        return out

    # -- sending ------------------------------------------------------------------------
    async def send(self, payload: Any, dest=None) -> None:
        """Reliable FIFO multicast to the view (self included), or unicast to ``dest``."""
        self._check_open()
        while not self.stack.writable:
            self._writable.clear()
            await self._writable.wait()
            self._check_open()
        self.stack.send(Message(dest, payload))

    async def send_many(self, payloads: Iterable[Any], dest=None) -> None:
        for p in payloads:
            if not self.stack.writable:
                await self.send(p, dest)
            else:
                self._check_open()
                self.stack.send(Message(dest, p))

    def _check_open(self) -> None:
        if self.stack is None or self.view is None:
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
            self.runtime.resume_reading()
        return ev

    # -- from the stack -----------------------------------------------------------------
    def _on_messages(self, batch: list) -> None:
        self._queue.extend(batch)
        self._ready.set()
        if not self._paused and len(self._queue) >= self.max_queued:
            self._paused = True
            self.runtime.pause_reading()

    def _on_event(self, ev: Any) -> None:
        t = type(ev)
        if t is ViewChange:
            self._queue.append(ev)
            self._ready.set()
            if not self._joined.done():
                self._joined.set_result(ev.view)
        elif t is Left:
            if not self._left.done():
                self._left.set_result(ev)
            self._closed = True
            self._ready.set()
        if self.stack is not None and self.stack.writable:
            self._writable.set()
