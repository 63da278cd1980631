"""FD_SOCK's watch connections on real sockets: ``Host.watch`` of the Runtime (the sans-IO
half is stack/fd_sock.py).

A member listens for watch connections on its own physical address: with the TCP transport
on its listen socket (a watch hello instead of a data hello), with UDP on a TCP socket of
the same port number. So the address a member is known by is the one its watcher connects
to, and nothing needs advertising.

The watcher connects and sends a hello, one frame (tcp.py's framing): ``RGW1`` + msgpack
[watcher uid, watched uid], sealed with the cluster key when there is one (as data hellos
and every packet are: stack/auth.py), else plain. The member answers ``RGWA`` + msgpack
[its uid], sealed the same way, if the hello is for its uid, and closes the connection
otherwise. Only after that answer is the connection up: a stranger at a member's address (a
new process on the port of one that died, another group) cannot pose as the member, and
without the key it cannot open a connection a member would count. When the member leaves it
writes ``RGWB`` (BYE) on the connections its watchers opened, then closes them: they report
"left", not a loss. Nothing else is ever written; the connection only exists to be closed
by the kernel when the member's process dies.

Bounds: at most ``MAX_ACCEPTED`` accepted watch connections per member (one per watcher is
the norm: only the ring neighbour watches), a hello must come within ``HELLO_TIMEOUT_S``
and fit ``MAX_HELLO`` bytes; a connect that does not complete in ``CONNECT_TIMEOUT_S`` is
"unreachable".
"""
from __future__ import annotations

import asyncio
import socket
import struct
from collections import Counter
from typing import Any, Callable, Optional

import msgpack

from .tcp import frame

WATCH, ACK, BYE = b"RGW1", b"RGWA", b"RGWB"
MAX_ACCEPTED = 256
MAX_HELLO = 4096
HELLO_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0
_len = struct.Struct(">I")


def _frames(buf: bytearray, data: bytes) -> Optional[list]:
    """Append ``data``; take the complete frames off ``buf`` (None: an oversized one)."""
    buf += data
    out = []
    while len(buf) >= 4:
        size = _len.unpack_from(buf)[0]
        if size > MAX_HELLO:
            return None
        if len(buf) < 4 + size:
            break
        out.append(bytes(buf[4:4 + size]))
        del buf[:4 + size]
    return out


class Watch:
    """``Host.watch``: our watch connections to others (``open``) and the ones accepted
    from our watchers. ``auth`` and ``uid`` are set when the stack is attached."""

    def __init__(self, loop: asyncio.AbstractEventLoop, bind_addr: str, stats: Counter):
        self.loop, self.bind_addr, self.stats = loop, bind_addr, stats
        self.auth: Any = None
        self.uid = b""
        self.secure_pending = False  # a key is configured, the stack not attached yet
        self.server: Optional[asyncio.AbstractServer] = None
        self.accepted: set = set()   # transports of our watchers' connections
        self.conns: set = set()      # our own connections (WatchConn)
        self.bye = False

    # -- sealing --------------------------------------------------------------------------
    def seal(self, body: bytes) -> bytes:
        return body if self.auth is None else self.auth.seal(body)

    def unseal(self, data: bytes) -> Optional[bytes]:
        """The body of a sealed (or, without a key, plain) frame; None if it does not open."""
        if self.secure_pending:
            return None
        if self.auth is None:
            return data
        try:
            return bytes(self.auth.open(data)[1])
        except Exception:  # AuthError: unauthenticated, wrong key, replayed
            return None

    # -- the member's side: our watchers' connections --------------------------------------
    async def serve(self, lsock: socket.socket) -> None:
        """Accept watch connections on ``lsock`` (UDP transport: a TCP socket of the same
        port number)."""
        self.server = await self.loop.create_server(lambda: _Accepted(self), sock=lsock)

    def accept(self, transport: asyncio.Transport, body: bytes) -> bool:
        """A watcher's opened hello on ``transport``: answer and keep it (True; with a BYE
        too once we are leaving), or close it (False: not a watch hello, not for us, too
        many)."""
        try:
            magic, hello = body[:4], msgpack.unpackb(body[4:])
            target = hello[1] if len(hello) == 2 else None  # [watcher uid, target uid]
        except Exception:
            magic = target = None
        if magic != WATCH or target != self.uid or not self.uid \
                or len(self.accepted) >= MAX_ACCEPTED:
            self.stats["watch_refused"] += 1
            transport.abort()
            return False
        self.accepted.add(transport)
        transport.write(frame(self.seal(ACK + msgpack.packb([self.uid]))))
        if self.bye:  # a watcher that came while we leave: it is told at once
            transport.write(frame(self.seal(BYE)))
        self.stats["watch_accepted"] += 1
        return True

    def leaving(self) -> None:
        """BYE to our watchers: what closes next is a departure, not a crash."""
        self.bye = True
        for t in self.accepted:
            if not t.is_closing():
                t.write(frame(self.seal(BYE)))
        self.stats["watch_byes"] += len(self.accepted)

    # -- our side: the connection to the member we watch ------------------------------------
    def open(self, phys: tuple, uid: bytes, on_up: Callable[[], None],
             on_lost: Callable[[str], None]) -> "WatchConn":
        conn = WatchConn(self, uid, on_up, on_lost)
        self.conns.add(conn)
        conn.task = self.loop.create_task(conn.connect(phys))
        return conn

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for conn in list(self.conns):
            conn.close()
        for t in list(self.accepted):
            t.close()  # graceful: a BYE written is still sent
        self.accepted.clear()


class _Accepted(asyncio.Protocol):
    """A watcher's connection to us (UDP transport: our own listening socket)."""

    def __init__(self, watch: Watch):
        self.watch, self.buf, self.transport, self.timer = watch, bytearray(), None, None
        self.done = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.timer = self.watch.loop.call_later(HELLO_TIMEOUT_S, self._timeout)

    def _timeout(self) -> None:
        if not self.done:
            self.watch.stats["watch_hello_timeout"] += 1
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.done:
            return  # a watcher sends nothing after its hello
        frames = _frames(self.buf, data)
        if frames is None:
            self.watch.stats["watch_refused"] += 1
            self.transport.abort()
            return
        if frames:
            self.done = True
            self.timer.cancel()
            body = self.watch.unseal(frames[0])
            if body is None:
                self.watch.stats["watch_refused"] += 1
                self.transport.abort()
            else:
                self.watch.accept(self.transport, body)

    def connection_lost(self, exc) -> None:
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
        self.watch.accepted.discard(self.transport)


class WatchConn(asyncio.Protocol):
    """Our connection to the member we watch; reports ``on_up()`` once it answered our
    hello with its uid, then ``on_lost(reason)`` once (see stack/fd_sock.py)."""

    def __init__(self, watch: Watch, uid: bytes, on_up, on_lost):
        self.watch, self.uid, self.on_up, self.on_lost = watch, uid, on_up, on_lost
        self.task: Optional[asyncio.Task] = None
        self.transport: Optional[asyncio.Transport] = None
        self.buf = bytearray()
        self.up = self.bye = self.done = False

    async def connect(self, phys: tuple) -> None:
        w = self.watch
        try:
            await asyncio.wait_for(w.loop.create_connection(
                lambda: self, phys[0], phys[1], local_addr=(w.bind_addr, 0)), CONNECT_TIMEOUT_S)
        except asyncio.CancelledError:
            pass
        except ConnectionRefusedError:
            self._report("refused")
        except (OSError, asyncio.TimeoutError):
            self._report("unreachable")

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.done:
            transport.abort()
            return
        hello = WATCH + msgpack.packb([self.watch.uid, self.uid])
        transport.write(frame(self.watch.seal(hello)))

    def data_received(self, data: bytes) -> None:
        frames = _frames(self.buf, data)
        for f in frames or ():
            body = self.watch.unseal(f)
            if body is None:
                continue
            if not self.up and body.startswith(ACK):
                try:
                    ok = msgpack.unpackb(body[4:]) == [self.uid]
                except Exception:
                    ok = False
                if ok:
                    self.up = True
                    self.watch.stats["watch_up"] += 1
                    self.on_up()
            elif self.up and body == BYE:
                self.bye = True
        if frames is None or (frames and not self.up):
            self.transport.abort()  # another member answered there, or garbage

    def connection_lost(self, exc) -> None:
        if not self.up:
            self._report("refused")  # closed before its answer: not the member we watch
        else:
            self._report("left" if self.bye else "reset" if exc is not None else "eof")

    def _report(self, reason: str) -> None:
        if not self.done:
            self.done = True
            self.watch.conns.discard(self)
            self.watch.stats["watch_lost_" + reason] += 1
            self.on_lost(reason)

    def close(self) -> None:
        """We stop watching (a re-pick, shutdown): nothing is reported."""
        self.done = True
        self.watch.conns.discard(self)
        if self.transport is not None:
            self.transport.abort()
        elif self.task is not None:
            self.task.cancel()
