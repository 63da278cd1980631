"""Free loopback ports for tests (traffic stays on 127.0.0.1)."""
import socket


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """n ports free for both UDP and TCP at the time of the call."""
    out: list[int] = []
    while len(out) < n:
        p = free_port(socket.SOCK_STREAM)
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", p))
        except OSError:
            continue
        if p not in out:
            out.append(p)
    return out
