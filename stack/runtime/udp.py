"""UDP sockets read with ``loop.add_reader``.

One unicast socket sends everything (multicasts included, so the source of every datagram
is the sender's unicast address); an optional second socket, bound to the multicast group,
receives multicasts. Reading uses ``recvfrom_into`` a preallocated buffer: asyncio's datagram
transport allocates 256 KiB per read.
"""
from __future__ import annotations

import errno
import socket
from collections import Counter
from typing import Any, Callable, Optional

READ_BATCH = 64  # datagrams read per wake-up before yielding to the loop
BUF_SIZE = 65536  # larger than any UDP payload


def errname(e: OSError) -> str:
    return errno.errorcode.get(e.errno, "error") if e.errno else type(e).__name__


def unicast_socket(bind_addr: str, port: int, rcvbuf: int, sndbuf: int, ttl: int) -> socket.socket:
    """Non-blocking socket on (bind_addr, port) that also sends to the multicast group."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(bind_addr))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        s.bind((bind_addr, port))
        s.setblocking(False)
    except OSError:
        s.close()
        raise
    return s


def mcast_socket(group: str, port: int, iface: str, rcvbuf: int) -> socket.socket:
    """Non-blocking socket bound to (group, port), shareable by any number of members."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.bind((group, port))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                     socket.inet_aton(group) + socket.inet_aton(iface))
        s.setblocking(False)
    except OSError:
        s.close()
        raise
    return s


class Udp:
    """Reads both sockets into ``receive(data, src)`` and sends datagrams, counting errors."""

    def __init__(self, loop, sock: socket.socket, msock: Optional[socket.socket],
                 stats: Counter, receive: Callable[[bytes, Any], None]):
        self.loop = loop
        self.sock = sock
        self.msock = msock
        self.stats = stats
        self.receive = receive
        self.buf = bytearray(BUF_SIZE)
        self.view = memoryview(self.buf)
        self.socks = [s for s in (sock, msock) if s is not None]
        self.paused = False
        self.resume_reading()

    def pause_reading(self) -> None:
        self.paused = True
        for s in self.socks:
            self.loop.remove_reader(s)

    def resume_reading(self) -> None:
        self.paused = False
        for s in self.socks:
            self.loop.add_reader(s, self._read, s)

    def _read(self, sock: socket.socket) -> None:
        recv, buf, view, receive = sock.recvfrom_into, self.buf, self.view, self.receive
        for _ in range(READ_BATCH):
            if self.paused:  # the application asked so while we were reading
                return
            try:
                n, src = recv(buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # e.g. an ICMP error reported on a later read
                self.stats["udp_recv_" + errname(e)] += 1
                return
            receive(bytes(view[:n]), src)

    def send(self, dest: Any, data: bytes) -> None:
        try:
            self.sock.sendto(data, dest)
        except OSError as e:  # EAGAIN/ENOBUFS, EMSGSIZE, unreachable: dropped
            self.stats["udp_send_" + errname(e)] += 1
        except (TypeError, ValueError, OverflowError):
            self.stats["udp_bad_dest"] += 1

    def close(self) -> None:
        self.pause_reading()
        for s in self.socks:
            s.close()
        self.socks = []
