"""One member of bench/latency.py: a Channel in its own process, driven through stdin.

    python bench/latency_member.py --cluster C --index I --members N --ports P0,P1,..
        --transport udp|tcp [--mcast-port M] [--size S] [--wait-go]

It connects (with ``--wait-go`` only once "go" arrives), prints {"joined": view size} once
it has a view of N, and
records every message it delivers: the message carries (run, sequence, stamp), the stamp
being the time.monotonic_ns() (CLOCK_MONOTONIC: one clock for every process of the machine)
at which the sender was *due* to send it; its latency is the delivery time minus the stamp,
so a sender that falls behind its schedule counts its lag too (no coordinated omission).
Commands, one a line:

    send RUN RATE SECONDS   (member 0) RATE msg/s for SECONDS; prints {"sent": RUN, "count",
                            "lag": histogram of how late the sender sent each message}
    report RUN COUNT WAIT   once COUNT messages of RUN arrived (or WAIT s passed): prints
                            {"report": RUN, "received", "hist": [[bucket, n], ..], "bins":
                            [[10 ms send-time bin, max latency ns, n], ..], "t0": run start}
    leave                   close the channel gracefully; prints {"left": true}

The process exits when its stdin closes.
"""
from __future__ import annotations

import argparse
import asyncio
import struct
import time

from compare_member import config, out, run, stdin_lines, wait_view
from latency import BIN_NS, bucket

HEADER = struct.Struct("!IIq")  # run, sequence, due time (ns)


class Record:
    """What one member delivered of one run."""

    def __init__(self):
        self.received = 0
        self.hist: dict = {}
        self.bins: dict = {}  # 10 ms bin of the due time -> [max latency ns, count]
        self.t0 = None

    def add(self, stamp: int, now: int, t0: int) -> None:
        lat = now - stamp
        self.received += 1
        b = bucket(lat)
        self.hist[b] = self.hist.get(b, 0) + 1
        k = (stamp - t0) // BIN_NS
        e = self.bins.get(k)
        if e is None:
            self.bins[k] = [lat, 1]
        else:
            e[1] += 1
            if lat > e[0]:
                e[0] = lat


async def pace(ch, run: int, rate: float, seconds: float, pad: bytes) -> tuple:
    """Send ``rate`` msg/s for ``seconds``, each stamped with the time it was due; returns
    (messages sent, histogram of the sender's lag: time sent minus time due)."""
    t0 = time.monotonic_ns()
    total = int(rate * seconds)
    step = 1e9 / rate
    lag: dict = {}
    k = 0
    while k < total:
        now = time.monotonic_ns()
        due = min(total, int((now - t0) / step) + 1)
        if due > k:
            stamps = [t0 + int(j * step) for j in range(k, due)]
            for st in stamps:
                b = bucket(now - st)
                lag[b] = lag.get(b, 0) + 1
            await ch.send_many([HEADER.pack(run, j, st) + pad
                                for j, st in zip(range(k, due), stamps)])
            k = due
        await asyncio.sleep(0.0005)
    return total, lag


async def main_async(args) -> None:
    from raygroups.stack import Channel
    lines = stdin_lines()
    ch = Channel(args.cluster, name=f"m{args.index}", config=config(args, args.index))
    if args.wait_go:
        out(ready=True)
        async for line in lines:
            if line == "go":
                break
        else:
            return
    await ch.connect(timeout=60)
    await wait_view(ch, args.members)
    out(joined=len(ch.view))
    records: dict = {}
    starts: dict = {}  # run -> its t0 (the stamp of its message 0)
    arrived = asyncio.Event()

    async def receive() -> None:
        unpack = HEADER.unpack_from
        while True:
            batch = await ch.receive_many()
            now = time.monotonic_ns()
            for m in batch:
                run, seq, stamp = unpack(m.payload)
                rec = records.get(run)
                if rec is None:
                    rec = records[run] = Record()
                if seq == 0:
                    starts[run] = stamp
                rec.add(stamp, now, starts.get(run, stamp))
            arrived.set()

    rx = asyncio.create_task(receive())
    pad = b"x" * max(0, args.size - HEADER.size)
    async for line in lines:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "send":
            n, lag = await pace(ch, int(cmd[1]), float(cmd[2]), float(cmd[3]), pad)
            out(sent=int(cmd[1]), count=n, lag=sorted(lag.items()))
        elif cmd[0] == "report":
            run, want, wait = int(cmd[1]), int(cmd[2]), float(cmd[3])
            end = time.monotonic() + wait
            while (records.get(run) is None or records[run].received < want) \
                    and time.monotonic() < end:
                arrived.clear()
                try:
                    await asyncio.wait_for(arrived.wait(), max(0.0, end - time.monotonic()))
                except asyncio.TimeoutError:
                    break
            rec = records.pop(run, None) or Record()
            out(report=run, received=rec.received, hist=sorted(rec.hist.items()),
                bins=sorted([k, e[0], e[1]] for k, e in rec.bins.items()),
                t0=starts.get(run), nakack=ch.stats().get("nakack", {}))
        elif cmd[0] == "leave":
            rx.cancel()
            await ch.close()
            out(left=True)
            return
    rx.cancel()
    await ch.close(timeout=2)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--ports", required=True)
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--members", type=int, default=1, help="wait for a view this large")
    ap.add_argument("--transport", choices=("udp", "tcp"), default="udp")
    ap.add_argument("--mcast-port", type=int, default=0)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--wait-go", action="store_true")
    run(main_async, ap.parse_args(argv))


if __name__ == "__main__":
    main()
