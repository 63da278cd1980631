"""Cost of authentication, and large-message transfer time, on loopback.

Three members, each its own process, static discovery. Throughput: member 0 multicasts N
messages of 1 KB as fast as the stack lets it (flow control included); the figure is N over
the time from the first send until the slowest member delivered the last one, with no
authentication, with HMAC-SHA256 and with AES-GCM. Large: member 0 multicasts one 64 MiB
payload (fragmented, flow controlled); the figure is the time until the slowest member has
it reassembled (and its SHA-256 checked).

    python bench/frag_auth.py             # UDP and TCP, 100,000 messages
    python bench/frag_auth.py --quick     # UDP only, 20,000 messages
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing as mp
import os
import struct
import sys
import time

from raygroups.stack import Channel, StackConfig
from raygroups.stack.runtime.ports import free_ports

STAMP = struct.Struct("!dI")
KEY = b"bench cluster key, 32 bytes long"
MiB = 1024 * 1024


def config(kind: str, auth: str, ports: list, i: int) -> StackConfig:
    opts = {} if auth == "none" else {"cluster_key": KEY, "auth_mode": auth}
    return StackConfig.local(kind, initial_hosts=[("127.0.0.1", p) for p in ports],
                             port=ports[i], **opts)


def member_proc(i, n, kind, auth, mode, count, size, cluster, ports, out) -> None:
    asyncio.run(_member(i, n, kind, auth, mode, count, size, cluster, ports, out))


async def _member(i, n, kind, auth, mode, count, size, cluster, ports, out) -> None:
    ch = Channel(cluster, name=f"m{i}", config=config(kind, auth, ports, i))
    await ch.connect(timeout=30)
    while ch.view is None or len(ch.view) < n:
        await asyncio.sleep(0.005)
    sender = None
    if i == 0:
        await asyncio.sleep(0.3)  # every member installed the full view
        sender = asyncio.create_task(_send(ch, mode, count, size))
    if mode == "throughput":
        got, first, last = 0, None, 0.0
        while got < count:
            m = await ch.receive(timeout=60)
            if first is None:
                first = STAMP.unpack_from(m.payload)[0]
            got += 1
        last = time.monotonic()
        res = {"member": i, "elapsed": last - first}
    else:
        m = await ch.receive(timeout=120)
        t1 = time.monotonic()
        t0 = STAMP.unpack_from(m.payload)[0]
        res = {"member": i, "elapsed": t1 - t0, "size": len(m.payload),
               "sha": hashlib.sha256(m.payload).hexdigest()}
    if sender is not None:
        await sender
    st = ch.stats()
    res["transport"] = {k: v for k, v in st["transport"].items() if k.startswith("dropped")}
    res["fc_blocked"] = st.get("flow_control", {}).get("blocked", 0)
    out.put(res)
    await asyncio.sleep(0.5)  # let the others finish retransmission requests
    await ch.close()


async def _send(ch: Channel, mode: str, count: int, size: int) -> None:
    if mode == "throughput":
        pad = b"x" * (size - STAMP.size)
        for start in range(0, count, 256):
            now = time.monotonic()
            await ch.send_many(STAMP.pack(now, k) + pad
                               for k in range(start, min(count, start + 256)))
            await asyncio.sleep(0)
    else:
        body = os.urandom(size - STAMP.size)
        await ch.send(STAMP.pack(time.monotonic(), 0) + body)


def run(n: int, kind: str, auth: str, mode: str, count: int, size: int) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ports = free_ports(n)
    cluster = f"fa-{os.getpid()}-{time.monotonic_ns()}"
    procs = [ctx.Process(target=member_proc, args=(i, n, kind, auth, mode, count, size,
                                                   cluster, ports, out)) for i in range(n)]
    for p in procs:
        p.start()
        time.sleep(0.05)
    res = [out.get(timeout=300) for _ in range(n)]
    for p in procs:
        p.join(timeout=30)
    elapsed = max(r["elapsed"] for r in res)
    row = {"members": n, "transport": kind, "auth": auth, "mode": mode, "size": size,
           "elapsed_s": elapsed, "dropped": [r["transport"] for r in res],
           "fc_blocked": sum(r["fc_blocked"] for r in res)}
    if mode == "throughput":
        row.update(messages=count, msgs_per_s=count / elapsed, mb_per_s=count * size / elapsed / 1e6)
    else:
        row.update(intact=len({r["sha"] for r in res}) == 1 and all(r["size"] == size for r in res),
                   mb_per_s=size / elapsed / 1e6)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    count = 20_000 if args.quick else 100_000
    kinds = ("udp",) if args.quick else ("udp", "tcp")
    rows = []
    for kind in kinds:
        base = None
        for auth in ("none", "hmac", "aesgcm"):
            r = run(3, kind, auth, "throughput", count, 1000)
            rows.append(r)
            base = base or r["msgs_per_s"]
            print(f"{kind:4} 3 members 1 KB  auth={auth:6}: {r['msgs_per_s']:9,.0f} msg/s "
                  f"{r['mb_per_s']:6.1f} MB/s  ({r['msgs_per_s'] / base:.2f}x of no auth)",
                  flush=True)
        for auth in ("none", "aesgcm"):
            r = run(3, kind, auth, "large", 1, 64 * MiB)
            rows.append(r)
            print(f"{kind:4} 3 members 64 MiB auth={auth:6}: {r['elapsed_s']:.2f} s "
                  f"({r['mb_per_s']:.0f} MB/s, intact={r['intact']}, "
                  f"flow-control blocks {r['fc_blocked']})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
