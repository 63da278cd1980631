"""Reliable multicast throughput, latency and join time on loopback.

Each member runs in its own process. Throughput: member 0 multicasts N messages as fast as
the stack lets it; the figure is N divided by the time from the first send until the
slowest member delivered the last message. Latency: member 0 sends paced messages stamped
with the (system-wide) monotonic clock; receivers report p50/p99 of delivery delay. Join:
time of ``Channel.connect()`` for the 2nd and the 10th member with static discovery. Leave:
time of ``Channel.close()`` (a graceful leave, done when the view without the leaver is
agreed) of one member of 5 whose others run in another process, and of all 5 members of one
process closing together.

    python bench/multicast.py                 # the full table
    python bench/multicast.py --quick         # fewer messages, fewer rows
    python bench/multicast.py --no-throughput # join and leave times only
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import struct
import sys
import time

from raygroups.stack import Channel, StackConfig
from raygroups.stack.runtime.ports import free_ports

STAMP = struct.Struct("!dI")


def config(kind: str, ports: list[int], i: int) -> StackConfig:
    return StackConfig.local(kind, initial_hosts=[("127.0.0.1", p) for p in ports], port=ports[i])


def use_loop(uvloop: bool) -> None:
    if uvloop:
        import uvloop as uv
        uv.install()


# -- throughput and latency: one process per member ---------------------------------------
def member_proc(i: int, n: int, kind: str, size: int, count: int, paced: int, cluster: str,
                ports: list, out, uvloop: bool) -> None:
    use_loop(uvloop)
    asyncio.run(_member(i, n, kind, size, count, paced, cluster, ports, out))


async def _member(i, n, kind, size, count, paced, cluster, ports, out) -> None:
    ch = Channel(cluster, name=f"m{i}", config=config(kind, ports, i))
    await ch.connect(timeout=30)
    while ch.view is None or len(ch.view) < n:
        await asyncio.sleep(0.005)
    pad = b"x" * (size - STAMP.size)
    if i == 0:
        await asyncio.sleep(0.3)  # let every member install the full view
        sender = asyncio.create_task(_send(ch, count, paced, pad))
    got, lat, first_stamp, last = 0, [], None, 0.0
    while got < count + paced:
        m = await ch.receive(timeout=60)
        now = time.monotonic()
        stamp, k = STAMP.unpack_from(m.payload)
        if first_stamp is None:
            first_stamp = stamp
        got += 1
        if k < count:
            last = now
        else:
            lat.append(now - stamp)
    if i == 0:
        await sender
    out.put({"member": i, "elapsed": last - first_stamp, "lat": lat,
             "retransmitted": ch.stats()["nakack"].get("retransmitted", 0)})
    await asyncio.sleep(0.5)  # let the others finish retransmission requests
    await ch.close()


async def _send(ch: Channel, count: int, paced: int, pad: bytes) -> None:
    batch = 256
    for start in range(0, count, batch):
        now = time.monotonic()
        await ch.send_many(STAMP.pack(now, k) + pad for k in range(start, min(count, start + batch)))
        await asyncio.sleep(0)
    await asyncio.sleep(0.5)
    for k in range(count, count + paced):  # ~2,000 msg/s for latency
        await ch.send(STAMP.pack(time.monotonic(), k) + pad)
        await asyncio.sleep(0.0005)


def run_throughput(n: int, kind: str, size: int, count: int, paced: int, uvloop: bool) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ports = free_ports(n)
    cluster = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    procs = [ctx.Process(target=member_proc, args=(i, n, kind, size, count, paced, cluster, ports,
                                                   out, uvloop)) for i in range(n)]
    for p in procs:
        p.start()
        time.sleep(0.05)
    res = [out.get(timeout=300) for _ in range(n)]
    for p in procs:
        p.join(timeout=30)
    elapsed = max(r["elapsed"] for r in res)
    lat = sorted(x for r in res if r["member"] != 0 for x in r["lat"])
    return {"members": n, "transport": kind, "size": size, "messages": count,
            "msgs_per_s": count / elapsed, "mb_per_s": count * size / elapsed / 1e6,
            "lat_p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
            "lat_p99_ms": 1000 * lat[int(len(lat) * 0.99)] if lat else None,
            "retransmitted": sum(r["retransmitted"] for r in res)}


# -- join and leave time -------------------------------------------------------------------
async def form(k: int, kind: str, cluster: str, ports: list) -> list:
    """Members 0..k-1, joined one after the other, once every one of them sees all k."""
    chans = []
    for i in range(k):
        chans.append(Channel(cluster, name=f"m{i}", config=config(kind, ports, i)))
        await chans[-1].connect(timeout=30)
    while any(len(c.view) < k for c in chans):
        await asyncio.sleep(0.01)
    return chans


def group_proc(k: int, kind: str, cluster: str, ports: list, ready, stop, uvloop: bool) -> None:
    use_loop(uvloop)

    async def main():
        chans = await form(k, kind, cluster, ports)
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        for c in reversed(chans):
            await c.close()
    asyncio.run(main())


def with_group(existing: int, kind: str, uvloop: bool, fn) -> float:
    """``fn(cluster, ports)`` (a coroutine function returning seconds) run in this process
    while ``existing`` members run in another."""
    ctx = mp.get_context("spawn")
    ports = free_ports(existing + 1)
    cluster = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    ready, stop = ctx.Event(), ctx.Event()
    p = ctx.Process(target=group_proc, args=(existing, kind, cluster, ports, ready, stop, uvloop))
    p.start()
    try:
        ready.wait(60)
        return asyncio.run(fn(cluster, ports))
    finally:
        stop.set()
        p.join(30)


def figures(times: list, key: str) -> dict:
    return {f"{key}_ms_median": 1000 * statistics.median(times),
            f"{key}_ms_min": 1000 * min(times), f"{key}_ms_max": 1000 * max(times)}


def run_join(existing: int, kind: str, trials: int, uvloop: bool) -> dict:
    async def join(cluster, ports):
        c = Channel(cluster, name=f"m{existing}", config=config(kind, ports, existing))
        t0 = time.perf_counter()
        await c.connect(timeout=30)
        dt = time.perf_counter() - t0
        await c.close()
        return dt
    times = [with_group(existing, kind, uvloop, join) for _ in range(trials)]
    return {"member": existing + 1, "transport": kind, **figures(times, "join")}


def run_leave(n: int, kind: str, trials: int, uvloop: bool) -> dict:
    """One member of ``n`` leaves (its others in another process); then ``n`` members of one
    process close together."""
    async def leave(cluster, ports):
        c = Channel(cluster, name=f"m{n - 1}", config=config(kind, ports, n - 1))
        await c.connect(timeout=30)
        while len(c.view) < n:
            await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        await c.close()
        return time.perf_counter() - t0

    async def all_close():
        chans = await form(n, kind, f"bench-{os.getpid()}-{time.monotonic_ns()}", free_ports(n))
        t0 = time.perf_counter()
        await asyncio.gather(*(c.close() for c in chans))
        return time.perf_counter() - t0
    one = [with_group(n - 1, kind, uvloop, leave) for _ in range(trials)]
    together = [asyncio.run(all_close()) for _ in range(trials)]
    return {"members": n, "transport": kind, **figures(one, "leave"),
            **figures(together, "close_all")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--uvloop", action="store_true", help="run members on uvloop")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--no-throughput", action="store_true", help="join and leave times only")
    args = ap.parse_args()
    count = 20_000 if args.quick else 100_000
    rows = []
    members = (3,) if args.quick else (2, 3, 5)
    for kind in () if args.no_throughput else ("udp", "tcp"):
        for n in members:
            for size in (100, 1000):
                r = run_throughput(n, kind, size, count, 2000, args.uvloop)
                rows.append(r)
                print(f"{kind:4} {n} members {size:5} B: {r['msgs_per_s']:9,.0f} msg/s "
                      f"{r['mb_per_s']:7.1f} MB/s  latency p50 {r['lat_p50_ms']:.2f} ms "
                      f"p99 {r['lat_p99_ms']:.2f} ms  (retransmitted {r['retransmitted']})", flush=True)
    joins = []
    for existing in (1, 9):
        j = run_join(existing, "udp", 3 if args.quick else 5, args.uvloop)
        joins.append(j)
        print(f"join of member {j['member']:2} (static discovery): median {j['join_ms_median']:.1f} ms "
              f"(min {j['join_ms_min']:.1f}, max {j['join_ms_max']:.1f})", flush=True)
    lv = run_leave(5, "udp", 3 if args.quick else 5, args.uvloop)
    print(f"leave of 1 member of 5 (close): median {lv['leave_ms_median']:.1f} ms "
          f"(min {lv['leave_ms_min']:.1f}, max {lv['leave_ms_max']:.1f}); all 5 closing "
          f"together: median {lv['close_all_ms_median']:.1f} ms (min {lv['close_all_ms_min']:.1f}, "
          f"max {lv['close_all_ms_max']:.1f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"throughput": rows, "join": joins, "leave": lv, "uvloop": args.uvloop},
                      f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
