"""One group member as a process, for network labs (tests/netns.py).

    python -m tests.member_proc --cluster C --name N --bind 10.213.x.y --port P \
        [--hosts h1:p1,h2:p2,...] [--transport udp|tcp] [--no-ip-mcast]

Connects a Channel (static discovery with --hosts, IP multicast discovery without) and prints
one JSON line per event on stdout, flushed:

    {"event": "view", "view_id": [coord_name, id], "members": [names...], "t": time.time()}
    {"event": "msg", "from": name, "payload": text, "t": ...}
    {"event": "left", "t": ...}                      (after "leave", or stdin closed)
    {"event": "error", "error": "...", "t": ...}     (join failed; exit status 1)

Commands on stdin, one a line: ``send <text>`` (multicast to the view), ``leave``.
Run with the repository root as the working directory (``python -m``).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from raygroups.stack import Channel, StackConfig, ViewChange


def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields, "t": time.time()}) + "\n")
    sys.stdout.flush()


def parse_hosts(spec: str) -> list[tuple[str, int]]:
    out = []
    for item in filter(None, spec.split(",")):
        host, _, port = item.rpartition(":")
        out.append((host, int(port)))
    return out


async def main(args: argparse.Namespace) -> int:
    options = dict(bind_addr=args.bind, port=args.port)
    if args.hosts:
        options["initial_hosts"] = parse_hosts(args.hosts)
    if args.no_ip_mcast:
        options["transport__ip_multicast"] = False
    ch = Channel(args.cluster, name=args.name,
                 config=StackConfig.local(args.transport, **options))
    try:
        await ch.connect(timeout=args.join_timeout)
    except Exception as e:  # JoinTimeout, OSError (bind)
        emit("error", error=f"{type(e).__name__}: {e}")
        return 1

    async def pump() -> None:
        async for ev in ch.events():
            if isinstance(ev, ViewChange):
                v = ev.view
                emit("view", view_id=[v.view_id.coord.name, v.view_id.id],
                     members=[m.name for m in v.members])
            else:
                p = ev.payload
                emit("msg", **{"from": ev.sender.name if ev.sender else None,
                               "payload": p.decode(errors="replace")
                               if isinstance(p, (bytes, bytearray)) else repr(p)})

    events = asyncio.create_task(pump())
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except (OSError, ValueError):  # stdin not a pipe: run until killed
        await events
        return 0
    while True:
        line = (await reader.readline()).decode().strip()
        if not line or line == "leave":  # EOF or leave
            break
        cmd, _, rest = line.partition(" ")
        if cmd == "send":
            await ch.send(rest.encode())
    await ch.close()
    await asyncio.wait_for(events, 5)
    emit("left")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--bind", required=True, help="address to bind (the namespace's)")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--hosts", default="", help="h1:p1,h2:p2,... (static discovery)")
    ap.add_argument("--transport", choices=("udp", "tcp"), default="udp")
    ap.add_argument("--no-ip-mcast", action="store_true", help="UDP: unicast fan-out")
    ap.add_argument("--join-timeout", type=float, default=30.0)
    sys.exit(asyncio.run(main(ap.parse_args())))
