"""Flood resistance of an authenticated group (AES-GCM, the default on Ray), on loopback.

Four members, each its own process, share a random key. Member m0 multicasts paced messages
stamped with the (system-wide) monotonic clock for the whole run; m1 and m2 report the
delivery delay. m3 is the target. Two phases of ``--seconds`` each:

1. normal: no flood. The group's normal packet rate is the packets all members received per
   second in this phase.
2. flood: a separate process sends 10x that rate (``--factor``) at m3's port, in equal
   parts of three kinds: garbage (random bytes); packets framed and sealed correctly but
   with another key (their key id is not the group's); and forgeries under the group's key
   id (public: it is in every packet) with random sender uids, whose tag fails only after
   a decryption.

Targets (printed with the figures, each "met" or "MISSED"):
* m3's RSS stays bounded: it grows by at most 32 MiB over its normal-phase figure, and by
  at most 4 MiB over the second half of the flood (no growth with the flood's length);
* no false exclusion: no member installs a view after the group formed;
* the p99 multicast latency at m1 and m2 during the flood is within 2x of the normal phase;
* the flood's packets are counted by m3 (``dropped_unauthenticated``, ``dropped_auth``:
  the member's ``stats()``, and the status page's "dropped" table on Ray).

    python bench/flood.py [--seconds 8] [--rate 200] [--factor 10] [--seed N] [--json F]

Every random choice (the key, the garbage, the forged uids) comes from the printed seed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import socket
import struct
import sys
import time

from percentile import pct
from raygroups.stack import Channel, StackConfig
from raygroups.stack.auth import Auth, key_id
from raygroups.stack.runtime.ports import free_ports

STAMP = struct.Struct("!dI")
N = 4
SENDER, TARGET = 0, 3
KINDS = ("garbage", "wrong_key", "forged_key_id")
RSS_GROWTH_MIB, RSS_LATE_GROWTH_MIB, LATENCY_RATIO = 32.0, 4.0, 2.0


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def received(stats: dict) -> int:
    t = stats.get("transport", {})
    return t.get("recv_packets", 0) + sum(v for k, v in t.items() if k.startswith("dropped_"))


# -- the members --------------------------------------------------------------------------
def member_proc(i: int, ports: list, cluster: str, key: bytes, plan: dict, out) -> None:
    asyncio.run(_member(i, ports, cluster, key, plan, out))


async def _member(i, ports, cluster, key, plan, out) -> None:
    cfg = StackConfig.local(initial_hosts=[("127.0.0.1", p) for p in ports], port=ports[i],
                            cluster_key=key, auth_mode="aesgcm")
    ch = Channel(cluster, name=f"m{i}", config=cfg)
    await ch.connect(timeout=30)
    while ch.view is None or len(ch.view) < N:
        await asyncio.sleep(0.005)
    formed = ch.view.view_id
    out.put(("ready", i))
    while plan["t0"].value == 0.0:
        await asyncio.sleep(0.01)
    t0, secs, gap = plan["t0"].value, plan["seconds"], plan["gap"]
    end = t0 + 2 * secs + gap
    lat: dict = {"normal": [], "flood": []}
    rss: list = []
    sender = asyncio.create_task(_send(ch, t0, end, plan["rate"])) if i == SENDER else None

    async def sample() -> None:
        while time.monotonic() < end:
            rss.append((time.monotonic() - t0, rss_mib()))
            await asyncio.sleep(0.1)
    sampler = asyncio.create_task(sample())
    reported = False
    while time.monotonic() < end + 1.0:
        if not reported and time.monotonic() >= t0 + secs:
            out.put(("normal", i, received(ch.stats())))
            reported = True
        try:
            msgs = await ch.receive_many(timeout=0.05)
        except asyncio.TimeoutError:
            continue
        now = time.monotonic()
        for m in msgs:
            stamp, _ = STAMP.unpack_from(m.payload)
            if stamp < t0 + secs:
                lat["normal"].append(now - stamp)
            elif stamp >= t0 + secs + gap:
                lat["flood"].append(now - stamp)
    if sender is not None:
        await sender
    await sampler
    out.put(("done", i, {"lat": lat, "rss": rss, "stats": ch.stats(),
                         "view_changed": ch.view.view_id != formed}))
    await asyncio.sleep(0.5)
    await ch.close()


async def _send(ch: Channel, t0: float, end: float, rate: int) -> None:
    k, gap = 0, 1.0 / rate
    while time.monotonic() < t0:
        await asyncio.sleep(0.005)
    nxt = time.monotonic()
    while time.monotonic() < end:
        await ch.send(STAMP.pack(time.monotonic(), k) + b"p" * 100)
        k += 1
        nxt += gap
        await asyncio.sleep(max(0.0, nxt - time.monotonic()))


# -- the flood ----------------------------------------------------------------------------
def flood_packets(kind: str, rng: random.Random, group_key: bytes, count: int) -> list:
    """``count`` packets of one kind (see the module doc)."""
    if kind == "garbage":
        return [rng.randbytes(rng.randint(16, 1400)) for _ in range(count)]
    other_key = rng.randbytes(32)
    if other_key == group_key:  # the same seed for both: still another key
        other_key = bytes(b ^ 0xFF for b in other_key)
    other = Auth(other_key, "aesgcm", rng.randbytes(16))
    out = []
    for _ in range(count):
        other.local_uid = rng.randbytes(16)
        p = other.seal(rng.randbytes(rng.randint(16, 1200)))
        if kind == "forged_key_id":
            p = p[:1] + key_id(group_key) + p[1 + 4:]
        out.append(p)
    return out


def flood_proc(port: int, rate: float, seconds: float, seed: int, group_key: bytes,
               out) -> None:
    """Send ``rate`` packets/s for ``seconds`` at 127.0.0.1:``port``, kinds in turn."""
    rng = random.Random(seed)
    per_kind = max(1, int(rate * seconds / len(KINDS)) + 1)
    pools = [flood_packets(k, rng, group_key, min(per_kind, 5000)) for k in KINDS]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent = dict.fromkeys(KINDS, 0)
    start = time.monotonic()
    total, tick = 0, 0.005
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * rate)
        while total < due:
            j = total % len(KINDS)
            pool = pools[j]
            try:
                sock.sendto(pool[sent[KINDS[j]] % len(pool)], ("127.0.0.1", port))
            except OSError:
                pass
            sent[KINDS[j]] += 1
            total += 1
        time.sleep(tick)
    out.put(("flood", sent, time.monotonic() - start))


# -- the run ------------------------------------------------------------------------------
def run(seconds: float, rate: int, factor: float, seed: int) -> dict:
    rng = random.Random(seed)
    key = rng.randbytes(32)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    t0 = ctx.Value("d", 0.0)
    gap = 1.0
    plan = {"t0": t0, "seconds": seconds, "gap": gap, "rate": rate}
    ports = free_ports(N)
    cluster = f"flood-{os.getpid()}-{seed}"
    procs = [ctx.Process(target=member_proc, args=(i, ports, cluster, key, plan, out))
             for i in range(N)]
    for p in procs:
        p.start()
        time.sleep(0.05)
    try:
        ready = 0
        while ready < N:
            if out.get(timeout=120)[0] == "ready":
                ready += 1
        time.sleep(0.5)
        t0.value = time.monotonic() + 0.2
        normal = {}
        while len(normal) < N:
            msg = out.get(timeout=seconds + 60)
            if msg[0] == "normal":
                normal[msg[1]] = msg[2]
        group_rate = sum(normal.values()) / seconds
        flood_rate = factor * group_rate
        wait = t0.value + seconds + gap - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        fl = ctx.Process(target=flood_proc, args=(ports[TARGET], flood_rate, seconds,
                                                  seed + 1, key, out))
        fl.start()
        done, flood = {}, None
        while len(done) < N or flood is None:
            msg = out.get(timeout=seconds * 2 + 120)
            if msg[0] == "done":
                done[msg[1]] = msg[2]
            elif msg[0] == "flood":
                flood = msg
        fl.join(10)
    finally:
        for p in procs:
            p.join(timeout=15)
            if p.is_alive():
                p.kill()
    return report(done, flood, group_rate, flood_rate, seconds, gap, seed)


def report(done: dict, flood: tuple, group_rate: float, flood_rate: float, seconds: float,
           gap: float, seed: int) -> dict:
    lat = {ph: [x for i in (1, 2) for x in done[i]["lat"][ph]] for ph in ("normal", "flood")}
    p99 = {ph: 1000 * pct(v, 0.99) for ph, v in lat.items()}
    rss = done[TARGET]["rss"]
    normal_rss = max(r for t, r in rss if t < seconds) if rss else 0.0
    fstart = seconds + gap
    first = [r for t, r in rss if fstart <= t < fstart + seconds / 2]
    second = [r for t, r in rss if t >= fstart + seconds / 2]
    peak = max(first + second) if first + second else normal_rss
    late = (max(second) - max(first)) if first and second else 0.0
    t = done[TARGET]["stats"]["transport"]
    counted = {k: v for k, v in t.items() if k.startswith("dropped_") and v}
    sent, flood_s = flood[1], flood[2]
    rows = {
        "seed": seed, "seconds": seconds,
        "group_pkts_per_s": round(group_rate, 1), "flood_pkts_per_s": round(flood_rate, 1),
        "flood_sent": sent, "flood_sent_per_s": round(sum(sent.values()) / flood_s, 1),
        "target_dropped": counted,
        "rss_normal_mib": round(normal_rss, 1), "rss_peak_mib": round(peak, 1),
        "rss_late_growth_mib": round(late, 2),
        "p99_normal_ms": round(p99["normal"], 3), "p99_flood_ms": round(p99["flood"], 3),
        "p50_normal_ms": round(1000 * pct(lat["normal"], 0.5), 3),
        "p50_flood_ms": round(1000 * pct(lat["flood"], 0.5), 3),
        "latency_samples": {ph: len(v) for ph, v in lat.items()},
        "view_changed": {f"m{i}": d["view_changed"] for i, d in sorted(done.items())},
    }
    flood_counted = counted.get("dropped_unauthenticated", 0) + counted.get("dropped_auth", 0)
    rows["targets"] = {
        "rss_bounded": peak - normal_rss <= RSS_GROWTH_MIB and late <= RSS_LATE_GROWTH_MIB,
        "no_false_exclusion": not any(rows["view_changed"].values()),
        "p99_within_2x": p99["flood"] <= LATENCY_RATIO * p99["normal"],
        "drops_counted": flood_counted > 0 and flood_counted <= sum(sent.values()),
    }
    rows["flood_counted"] = flood_counted
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each phase")
    ap.add_argument("--rate", type=int, default=200, help="m0's paced messages per second")
    ap.add_argument("--factor", type=float, default=10.0, help="flood rate / normal rate")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2 ** 32)
    print(f"# bench/flood.py seed {seed} (--seed {seed} repeats it)", flush=True)
    r = run(args.seconds, args.rate, args.factor, seed)
    ok = {True: "met", False: "MISSED"}
    tg = r["targets"]
    print(f"normal: the group received {r['group_pkts_per_s']:,.0f} packets/s; flood at m3: "
          f"{r['flood_sent_per_s']:,.0f} packets/s ({args.factor:g}x) for {args.seconds:g} s, "
          f"{sum(r['flood_sent'].values()):,} packets {r['flood_sent']}")
    print(f"m3 counted {r['flood_counted']:,} of them as dropped: {r['target_dropped']}  "
          f"[{ok[tg['drops_counted']]}]")
    print(f"m3 RSS: {r['rss_normal_mib']} MiB normal, peak {r['rss_peak_mib']} MiB in the "
          f"flood, {r['rss_late_growth_mib']} MiB growth over its second half  "
          f"(targets: <= {RSS_GROWTH_MIB:g} MiB, <= {RSS_LATE_GROWTH_MIB:g} MiB) "
          f"[{ok[tg['rss_bounded']]}]")
    print(f"views after forming: {r['view_changed']}  [{ok[tg['no_false_exclusion']]}]")
    ratio = r["p99_flood_ms"] / r["p99_normal_ms"] if r["p99_normal_ms"] else float("nan")
    print(f"multicast latency m0 -> m1, m2: p50 {r['p50_normal_ms']:.2f} -> "
          f"{r['p50_flood_ms']:.2f} ms, p99 {r['p99_normal_ms']:.2f} -> "
          f"{r['p99_flood_ms']:.2f} ms (flooded / normal = {ratio:.2f}, target <= "
          f"{LATENCY_RATIO:g}) {r['latency_samples']}  [{ok[tg['p99_within_2x']]}]")
    print("all targets met" if all(tg.values()) else
          f"targets MISSED: {[k for k, v in tg.items() if not v]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)
    return 0 if all(tg.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
