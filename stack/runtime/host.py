"""``Runtime``: the ``Host`` of a stack on the running asyncio loop, over real sockets."""
from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter
from typing import Any, Callable, Optional

from ..layer import MCAST
from ..transport import TransportConfig
from . import tcp, udp
from .watch import Watch

PORT_ATTEMPTS = 16


def _ignore(_item: Any) -> None:
    pass


def raise_gc_threshold(threshold: tuple) -> None:
    """Raise CPython's collector thresholds to at least ``threshold`` (never lower them)."""
    now = gc.get_threshold()
    want = tuple(max(int(a), b) for a, b in zip(threshold, now))
    if want != now:
        gc.set_threshold(*want)


class Runtime:
    """Sockets, timers and deliveries for one stack.

    ``await start()`` opens the sockets and sets ``local_phys``; build the stack with
    ``host=runtime`` then ``attach`` it (packets arriving before are dropped and counted).
    ``await close()`` closes the sockets; the stack stops its own timers.
    ``pause_reading``/``resume_reading`` stop and restart reading every socket.

    With TCP and ``use_mcast`` the UDP socket takes the TCP listen port number, so the
    source of a multicast discovery ping is the sender's listen address.
    """

    def __init__(self, config: TransportConfig, use_mcast: bool, watch: bool = False):
        self.config = config
        self.use_mcast = use_mcast
        self.watching = watch
        self.watch: Optional[Watch] = None
        """Host.watch: FD_SOCK's watch connections (``watch=True``), else None."""
        self.stats: Counter = Counter()
        self.local_phys: Optional[tuple] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.udp: Optional[udp.Udp] = None
        self.tcp: Optional[tcp.Tcp] = None
        self.on_event: Callable[[Any], None] = _ignore
        self.on_messages: Callable[[list], None] = _ignore
        self.mcast_dest = (config.mcast_addr, config.mcast_port)
        self.store: Any = None
        """Host.store: the StoreClient of store discovery (set by the channel), else None."""

    async def start(self) -> None:
        self.loop = loop = asyncio.get_running_loop()
        cfg = self.config
        if cfg.gc_threshold:
            raise_gc_threshold(cfg.gc_threshold)
        wsock = None  # UDP with FD_SOCK: the watch listen socket, on the UDP port number
        if cfg.kind == "tcp":
            lsock, usock = self._bind_tcp()
        elif cfg.kind == "udp" and self.watching:
            lsock = None
            try:
                wsock, usock = self._bind_tcp(udp_too=True)
            except OSError:  # a fixed port whose TCP side is taken: watch others, unwatched
                self.stats["watch_no_listen"] = 1
                usock = self._unicast(cfg.port)
        elif cfg.kind == "udp":
            lsock, usock = None, self._unicast(cfg.port)
        else:
            raise ValueError(f"unknown transport kind {cfg.kind!r}")
        port = (lsock or usock).getsockname()[1]
        self.local_phys = (cfg.bind_addr, port)
        if usock is not None:
            msock = None
            if self.use_mcast:
                try:
                    msock = udp.mcast_socket(cfg.mcast_addr, cfg.mcast_port, cfg.bind_addr,
                                             cfg.recv_buffer)
                except OSError:
                    for s in (usock, lsock, wsock):
                        if s is not None:
                            s.close()
                    raise
            self.udp = udp.Udp(loop, usock, msock, self.stats, self._unattached)
        if lsock is not None:
            self.tcp = tcp.Tcp(loop, lsock, self.local_phys, cfg.tcp_max_queued, self.stats,
                               self._unattached)
            self.tcp.secure_pending = cfg.cluster_key is not None  # until attach()
            await self.tcp.start()
        if self.watching:
            self.watch = Watch(loop, cfg.bind_addr, self.stats)
            self.watch.secure_pending = cfg.cluster_key is not None  # until attach()
            if wsock is not None:
                await self.watch.serve(wsock)
            elif self.tcp is not None:
                self.tcp.watch = self.watch

    def _unicast(self, port: int):
        cfg = self.config
        return udp.unicast_socket(cfg.bind_addr, port, cfg.recv_buffer, cfg.send_buffer,
                                  cfg.mcast_ttl)

    def _bind_tcp(self, udp_too: bool = False) -> tuple:
        """The listen socket, plus a UDP socket on the same port number if multicast is
        used (or ``udp_too``: the UDP transport's, beside FD_SOCK's watch socket)."""
        cfg = self.config
        for _ in range(PORT_ATTEMPTS):
            lsock = tcp.listen_socket(cfg.bind_addr, cfg.port)
            if not self.use_mcast and not udp_too:
                return lsock, None
            try:
                return lsock, self._unicast(lsock.getsockname()[1])
            except OSError:
                lsock.close()
                if cfg.port:
                    raise
        raise OSError(f"no port free for both TCP and UDP on {cfg.bind_addr}")

    def attach(self, stack: Any, on_event: Callable[[Any], None],
               on_messages: Callable[[list], None], auth: Any = None) -> None:
        """``auth``: the stack transport's Auth when it has a cluster key (TCP hellos are
        then sealed and checked with it)."""
        self.on_event, self.on_messages = on_event, on_messages
        for part in (self.udp, self.tcp):
            if part is not None:
                part.receive = stack.receive
        if self.tcp is not None and auth is not None:
            self.tcp.secure(auth)
        if self.watch is not None:
            self.watch.uid = stack.local.uid
            self.watch.auth, self.watch.secure_pending = auth, False

    def _unattached(self, data: bytes, src: Any) -> None:
        self.stats["dropped_unattached"] += 1

    def pause_reading(self) -> None:
        """Stop reading sockets (the application is behind); packets wait in the kernel."""
        for part in (self.udp, self.tcp):
            if part is not None:
                part.pause_reading()

    def resume_reading(self) -> None:
        for part in (self.udp, self.tcp):
            if part is not None:
                part.resume_reading()

    async def close(self) -> None:
        """Close sockets and connections (written TCP data is still flushed); store calls
        in flight (a leaving coordinator's delete) get up to 2 s to finish."""
        if self.store is not None and hasattr(self.store, "drain"):
            await self.store.drain(2.0)
        for part in (self.udp, self.tcp, self.watch):
            if part is not None:
                part.close()
        await asyncio.sleep(0)  # let the transports run connection_lost

    # -- Host ---------------------------------------------------------------------------
    def now(self) -> float:
        return self.loop.time()

    def wall(self) -> float:
        return time.time()

    def call_later(self, delay: float, fn: Callable[[], None]):
        if delay <= 0:
            return self.loop.call_soon(fn)
        return self.loop.call_later(delay, fn)

    def emit(self, dest: Any, data: bytes) -> None:
        """Send one bundle; never raises (failures are counted, reliability retransmits)."""
        if dest == MCAST:
            if self.udp is None:
                self.stats["no_mcast_socket"] += 1
            else:
                self.udp.send(self.mcast_dest, data)
        elif self.tcp is not None:
            self.tcp.send(dest, data)
        else:
            self.udp.send(dest, data)

    def deliver(self, item: Any) -> None:
        self.on_event(item)

    def deliver_messages(self, batch: list) -> None:
        self.on_messages(batch)
