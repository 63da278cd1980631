"""Cost of virtual synchrony and total order, on loopback, each member its own process.

- flush: members join and leave a 5-member group; per view change, the coordinator's flush
  time (START_FLUSH to the last FLUSH_DONE) and the time until every member installed the
  view;
- total order: multicast throughput of 3 members, each sending, unordered vs
  ``ordered=True`` (SEQUENCER). Target: ordered >= 0.5x unordered.

    python bench/consistency.py [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

from raygroups.stack import Channel, StackConfig
from raygroups.stack.runtime.ports import free_ports


def config(ports: list[int], i: int) -> StackConfig:
    return StackConfig.local(initial_hosts=[("127.0.0.1", p) for p in ports], port=ports[i])


# -- throughput, ordered vs not -------------------------------------------------------------
def sender_proc(i, n, count, ordered, cluster, ports, out) -> None:
    asyncio.run(_sender(i, n, count, ordered, cluster, ports, out))


async def _sender(i, n, count, ordered, cluster, ports, out) -> None:
    ch = Channel(cluster, name=f"m{i}", config=config(ports, i))
    await ch.connect(timeout=30)
    while len(ch.view) < n or not ch.view.primary:
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    payload = b"x" * 1000
    total, got = n * count, 0

    async def send():
        for start in range(0, count, 256):
            await ch.send_many((payload for _ in range(min(256, count - start))), ordered=ordered)
            await asyncio.sleep(0)
    task = asyncio.create_task(send())
    while got < total:
        await ch.receive(timeout=60)
        got += 1
    await task
    out.put((i, time.monotonic() - t0))
    await asyncio.sleep(0.5)
    await ch.close()


def throughput(n: int, count: int, ordered: bool) -> float:
    ctx = mp.get_context("spawn")
    out, ports = ctx.Queue(), free_ports(n)
    cluster = f"cons-{os.getpid()}-{time.monotonic_ns()}"
    procs = [ctx.Process(target=sender_proc, args=(i, n, count, ordered, cluster, ports, out))
             for i in range(n)]
    for p in procs:
        p.start()
        time.sleep(0.05)
    res = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    return n * count / max(t for _, t in res)


# -- flush per view change ------------------------------------------------------------------
async def _flush_rounds(rounds: int) -> dict:
    ports = free_ports(6)
    cluster = f"flush-{os.getpid()}-{time.monotonic_ns()}"
    chans = []
    for i in range(5):
        c = Channel(cluster, name=f"m{i}", config=config(ports, i))
        await c.connect()
        chans.append(c)
    while any(len(c.view) < 5 for c in chans):
        await asyncio.sleep(0.005)
    installs = []
    for r in range(rounds):
        extra = Channel(cluster, name=f"x{r}", config=config(ports, 5))
        t0 = time.perf_counter()
        await extra.connect()
        while any(len(c.view) < 6 for c in chans):
            await asyncio.sleep(0.001)
        installs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await extra.close()
        while any(len(c.view) > 5 for c in chans):
            await asyncio.sleep(0.001)
        installs.append(time.perf_counter() - t0)
    st = chans[0].stats()["gms"]
    for c in reversed(chans):
        await c.close()
    return {"view_changes": len(installs),
            "flush_ms_mean": st.get("flush_us_total", 0) / 1000 / max(1, st.get("flushes_done", 1)),
            "install_ms_median": 1000 * statistics.median(installs),
            "install_ms_max": 1000 * max(installs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    count = 5_000 if args.quick else 30_000
    f = asyncio.run(_flush_rounds(5 if args.quick else 20))
    print(f"flush per view change (5-6 members, one process): {f['flush_ms_mean']:.2f} ms at the "
          f"coordinator; join/leave until all installed: median {f['install_ms_median']:.1f} ms, "
          f"max {f['install_ms_max']:.1f} ms over {f['view_changes']} view changes", flush=True)
    plain = throughput(3, count, False)
    ordered = throughput(3, count, True)
    ratio = ordered / plain
    print(f"3 members each multicasting {count:,} x 1 KB: unordered {plain:,.0f} msg/s, "
          f"ordered {ordered:,.0f} msg/s, ratio {ratio:.2f} "
          f"({'met' if ratio >= 0.5 else 'NOT met'}: target >= 0.5)", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"flush": f, "unordered": plain, "ordered": ordered, "ratio": ratio}, fh, indent=2)


if __name__ == "__main__":
    sys.exit(main())
