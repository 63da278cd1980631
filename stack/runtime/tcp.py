"""TCP: length-prefixed frames (4-byte big-endian length, then the bundle), one connection
per peer pair.

The connecting side's first frame is a hello carrying its listen address, which names the
connection on both sides (``src`` of received frames is the peer's listen address, never
an ephemeral port). With a cluster key the hello is sealed like every packet (and
replay-checked): a connection that cannot authenticate is closed before it can take over
the route to a member (counted as tcp_bad_hello). When both sides connect at once, the connection initiated by the side
with the lower listen address wins: the other side moves its unsent frames over and closes
its own connection gracefully, so frames it already wrote are still read by the peer.
A hello that opens as a watch hello (FD_SOCK, watch.py) hands the connection to ``watch``:
it then carries no data.
"""
from __future__ import annotations

import asyncio
import socket
import struct
from collections import Counter
from typing import Any, Callable, Optional

import msgpack

from .udp import errname

MAX_FRAME = 64 * 1024 * 1024 + 1024
HELLO = b"RGH1"
_len = struct.Struct(">I")


def listen_socket(bind_addr: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((bind_addr, port))
        s.listen(128)
        s.setblocking(False)
    except OSError:
        s.close()
        raise
    return s


def frame(data: bytes) -> bytes:
    return _len.pack(len(data)) + data


def parse_hello(data: bytes) -> Optional[tuple]:
    if not data.startswith(HELLO):
        return None
    try:
        host, port = msgpack.unpackb(data[len(HELLO):])
    except Exception:  # msgpack raises several unrelated types on garbage
        return None
    if type(host) is not str or type(port) is not int or not 0 < port < 65536:
        return None
    return host, port


class Conn(asyncio.Protocol):
    """One TCP connection. ``peer`` is the peer's listen address: known up front when we
    connect, learnt from the hello when we accept."""

    def __init__(self, tcp: "Tcp", peer: Optional[tuple]):
        self.tcp = tcp
        self.peer = peer
        self.outgoing = peer is not None
        self.transport: Optional[asyncio.Transport] = None
        self.task: Optional[asyncio.Task] = None
        self.pending: list[bytes] = []  # frames queued while connecting
        self.pending_bytes = 0
        self.closed = False
        self.watched = False  # an FD_SOCK watcher's connection (watch.py), not a data one
        self.buf = bytearray()

    # -- asyncio callbacks --------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.closed:  # replaced while connecting
            transport.close()
            return
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.tcp.open.add(self)
        if self.tcp.paused:
            transport.pause_reading()
        if self.outgoing:
            transport.write(frame(self.tcp.sealed_hello()))
            if self.pending:
                transport.writelines(self.pending)
                self.pending, self.pending_bytes = [], 0

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.closed = True
        self.tcp.forget(self)
        if exc is not None:
            self.tcp.stats["tcp_conn_lost"] += 1

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        n, pos = len(buf), 0
        view = memoryview(buf)
        try:
            while n - pos >= 4 and not self.closed:
                size = _len.unpack_from(buf, pos)[0]
                if size > MAX_FRAME:
                    self.fail("tcp_oversized_frame")
                    return
                end = pos + 4 + size
                if end > n:
                    break
                body = bytes(view[pos + 4:end])
                pos = end
                if self.peer is None:
                    self.tcp.hello_received(self, body)
                else:
                    self.tcp.receive(body, self.peer)
        finally:
            view.release()
        del buf[:pos]

    # -- used by Tcp --------------------------------------------------------------------
    def send(self, framed: bytes) -> None:
        st, limit, size = self.tcp.stats, self.tcp.max_queued, len(framed)
        t = self.transport
        if t is None:
            if self.pending_bytes + size > limit:
                st["tcp_dropped_queue_full"] += 1
                return
            self.pending.append(framed)
            self.pending_bytes += size
        elif t.is_closing():
            st["tcp_dropped_closing"] += 1
        elif t.get_write_buffer_size() + size > limit:
            st["tcp_dropped_queue_full"] += 1
        else:
            t.write(framed)

    def adopt(self, other: "Conn") -> None:
        """Take over the frames ``other`` has not written yet."""
        for f in other.pending:
            self.send(f)
        other.pending, other.pending_bytes = [], 0

    def fail(self, what: str) -> None:
        self.tcp.stats[what] += 1
        self.closed = True
        self.transport.abort()

    def close(self) -> None:
        """Graceful: data already written is still sent."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        elif self.task is not None:
            self.task.cancel()


class Tcp:
    """The listen socket and the connections, keyed by the peer's listen address."""

    def __init__(self, loop, lsock: socket.socket, local: tuple, max_queued: int,
                 stats: Counter, receive: Callable[[bytes, Any], None]):
        self.loop = loop
        self.lsock = lsock
        self.local = local
        self.hello = HELLO + msgpack.packb(list(local))
        self.auth = None  # the stack's Auth, when it has a cluster key (``secure``)
        self.secure_pending = False  # a key is configured but the stack is not attached yet
        self.max_queued = max_queued
        self.stats = stats
        self.receive = receive
        self.conns: dict[tuple, Conn] = {}  # the connection used to send to each peer
        self.open: set[Conn] = set()  # every established connection
        self.server: Optional[asyncio.AbstractServer] = None
        self.paused = False
        self.watch: Any = None  # watch.Watch: FD_SOCK's watch hellos arrive here too

    async def start(self) -> None:
        self.server = await self.loop.create_server(lambda: Conn(self, None), sock=self.lsock)

    def send(self, dest: Any, data: bytes) -> None:
        conn = self.conns.get(dest)
        if conn is None or conn.closed:
            conn = self.conns[dest] = Conn(self, dest)
            conn.task = self.loop.create_task(self._connect(conn))
        conn.send(frame(data))

    async def _connect(self, conn: Conn) -> None:
        try:
            host, port = conn.peer
            await self.loop.create_connection(lambda: conn, host, port,
                                              local_addr=(self.local[0], 0))
        except asyncio.CancelledError:
            pass
        except Exception as e:  # refused, unreachable, bad address: frames dropped
            reason = errname(e) if isinstance(e, OSError) else type(e).__name__
            self.stats["tcp_connect_" + reason] += 1
            self.stats["tcp_dropped_connect"] += len(conn.pending)
            conn.pending = []
            conn.closed = True
            self.forget(conn)

    def secure(self, auth: Any) -> None:
        """Seal our hellos and accept only sealed ones (``auth``: the transport's Auth)."""
        self.auth, self.secure_pending = auth, False

    def sealed_hello(self) -> bytes:
        return self.hello if self.auth is None else self.auth.seal(self.hello)

    def hello_received(self, conn: Conn, body: bytes) -> None:
        if self.secure_pending:
            conn.fail("tcp_bad_hello")  # a key is set but not yet in place: refuse
            return
        if self.auth is not None:
            try:
                _uid, opened = self.auth.open(body)
            except Exception:  # AuthError: unauthenticated, wrong key, replayed
                conn.fail("tcp_bad_hello")
                return
            body = bytes(opened)
        if self.watch is not None and body.startswith(b"RGW1"):
            self.open.discard(conn)  # a watcher's: no data ever, not paused nor resumed
            conn.closed = conn.watched = True  # (frames after the hello are not read)
            self.watch.accept(conn.transport, body)
            return
        peer = parse_hello(body)
        if peer is None:
            conn.fail("tcp_bad_hello")
            return
        conn.peer = peer
        old = self.conns.get(peer)
        if old is not None and not old.closed:
            if old.outgoing and self.local < peer:
                return  # ours wins; the peer closes this one, we read it until then
            conn.adopt(old)
            old.close()
        self.conns[peer] = conn

    def forget(self, conn: Conn) -> None:
        self.open.discard(conn)
        if conn.watched:
            self.watch.accepted.discard(conn.transport)
        if conn.peer is not None and self.conns.get(conn.peer) is conn:
            del self.conns[conn.peer]

    def pause_reading(self) -> None:
        """Stop reading every connection (frames already received are still delivered)."""
        self.paused = True
        for conn in self.open:
            if not conn.transport.is_closing():
                conn.transport.pause_reading()

    def resume_reading(self) -> None:
        self.paused = False
        for conn in self.open:
            if not conn.transport.is_closing():
                conn.transport.resume_reading()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for conn in [*self.conns.values(), *self.open]:
            conn.close()
