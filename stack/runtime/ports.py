"""Ports to hand out before anything binds them: member ports of a static group, chosen by
the launcher (or a test) and written into every member's host list.

A port the kernel picks for ``bind(port=0)`` comes from the ephemeral range, the same range
it draws the source port of every outgoing connection from: between choosing such a port and
binding it, a connection of any process on the host (a member connecting to a peer, Ray,
Spark) may take it, and the member then fails with "address already in use". So ports are
chosen below the ephemeral range, from ``LOW`` up (above Ray's worker ports, 10002-19999 by
default), each checked free for both TCP and UDP, walking on from where the last call of
this process stopped.
"""
from __future__ import annotations

import os
import socket

LOW = 20000
"""The lowest port handed out (Ray's worker ports end at 19999 by default)."""
EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"
IANA_EPHEMERAL_LOW = 49152
"""The start of the ephemeral range where the kernel does not say (RFC 6335)."""


def ephemeral_low(path: str = EPHEMERAL) -> int:
    """The first port of the kernel's ephemeral range."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return IANA_EPHEMERAL_LOW


def _free(ip: str, port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((ip, port))
            except OSError:
                return False
    return True


class PortPicker:
    """Hands out distinct ports of one address, free for TCP and UDP when handed out."""

    def __init__(self, low: int = LOW, high: int | None = None, start: int | None = None):
        self.low = low
        self.high = high if high is not None else ephemeral_low()
        if self.high <= self.low:
            raise ValueError(f"no ports below the ephemeral range ({self.low}..{self.high})")
        span = self.high - self.low
        # processes start at different places, so two picking at once rarely meet
        self._next = self.low + (start if start is not None else os.getpid() * 7919) % span

    def pick(self, ip: str = "127.0.0.1") -> int:
        for _ in range(self.high - self.low):
            port = self._next
            self._next = port + 1 if port + 1 < self.high else self.low
            if _free(ip, port):
                return port
        raise OSError(f"no free port on {ip} in {self.low}..{self.high - 1}")

    def pick_run(self, n: int, ip: str = "127.0.0.1") -> int:
        """The first of ``n`` consecutive free ports (a JGroups ``port_range``)."""
        for _ in range(self.high - self.low):
            first = self.pick(ip)
            if first + n <= self.high and all(_free(ip, p) for p in range(first + 1, first + n)):
                self._next = first + n if first + n < self.high else self.low
                return first
        raise OSError(f"no {n} consecutive free ports on {ip} in {self.low}..{self.high - 1}")


_picker: PortPicker | None = None


def _shared() -> PortPicker:
    global _picker
    if _picker is None:
        _picker = PortPicker()
    return _picker


def free_port(ip: str = "127.0.0.1") -> int:
    """A port of ``ip`` free for both TCP and UDP now, outside the ephemeral range, and not
    handed out before by this process (until the range wraps)."""
    return _shared().pick(ip)


def free_ports(n: int, ip: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports as :func:`free_port` gives them."""
    return [free_port(ip) for _ in range(n)]


def free_run(n: int, ip: str = "127.0.0.1") -> int:
    """The first of ``n`` consecutive ports as :func:`free_port` gives them."""
    return _shared().pick_run(n, ip)
