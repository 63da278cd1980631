"""Free loopback ports for the benchmarks (run as ``python bench/<name>.py``, so this
directory is on ``sys.path``)."""
from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """n distinct ports of 127.0.0.1 free for both TCP and UDP at the time of the call."""
    out: list[int] = []
    while len(out) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                u.bind(("127.0.0.1", p))
        except OSError:
            continue
        if p not in out:
            out.append(p)
    return out
