"""A receiving member in its own process, for the flow-control memory test.

    python -m tests.integration.fc_receiver '<json args>'

Args: cluster, ports (static discovery, loopback), index (own port), members (view size to
wait for), transport, credits (flow_control max_credits), max_queued (Channel), count (messages
expected). Prints one JSON line per event on stdout:

    {"event": "ready"}                              joined, view complete; NOT consuming yet
    {"event": "done", "ok": bool, "count": n, ...}  after "consume" on stdin: received ``count``
                                                    messages, checked exactly once, in order

The application does not call ``receive`` until "consume" arrives, so its Channel queue
fills and flow control holds the rest: the test measures this process's RSS meanwhile.
"close" on stdin (or EOF) leaves and exits. Run from the repository root.
"""
from __future__ import annotations

import asyncio
import json
import sys

from raygroups.stack import Channel, StackConfig


def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


async def main(args: dict) -> None:
    ports = args["ports"]
    cfg = StackConfig.local(args.get("transport", "udp"),
                            initial_hosts=[("127.0.0.1", p) for p in ports],
                            port=ports[args["index"]],
                            flow_control__max_credits=args["credits"])
    ch = Channel(args["cluster"], name="receiver", config=cfg, max_queued=args["max_queued"])
    await ch.connect(timeout=30)
    while ch.view is None or len(ch.view) < args["members"]:
        await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    emit("ready")
    line = await reader.readline()
    if line.strip() == b"consume":
        got, bad, size_bad = 0, None, 0
        count = args["count"]
        while got < count:
            m = await ch.receive(timeout=60)
            k = int.from_bytes(m.payload[:8], "big")
            if k != got and bad is None:
                bad = [got, k]
            if len(m.payload) != args["size"]:
                size_bad += 1
            got += 1
        extra = 0
        try:  # nothing more (no duplicate) arrives
            while True:
                await ch.receive(timeout=0.3)
                extra += 1
        except asyncio.TimeoutError:
            pass
        emit("done", ok=bad is None and not size_bad and not extra, count=got, first_bad=bad,
             size_bad=size_bad, extra=extra, fc=ch.stats().get("flow_control", {}))
        await reader.readline()
    await ch.close()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
