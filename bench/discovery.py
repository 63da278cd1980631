"""Store discovery costs: store calls per join and bytes per member (JGroups cloud-store
discovery, JGRP-1841).

For N = 10, 100 and 1,000 members, in the simulator with the counting store (every call of
every member counted by kind): a group of N-1 members started from a bootstrap file (seeded
UUIDs 1..N-1, short logical names A, B, ..., no discovery round), then joiners with fresh
random UUIDs that discover through the store, one after the other. Per join: the joiner's
store reads (list + get) and the coordinator's writes. Bytes: the coordinator's members file
after the joins, per member line (newline included) and per member for the whole file;
"seeded" is the bootstrap-started group's file (short numeric UUIDs, the seed's scenario:
~35 B/member), "random" the same members with the random UUIDs members take (96 random bits,
16 base64url characters each, 22 when those would start with "-"; in brackets the
36-character dashed form). N = 10 also
runs with real channels on loopback against the directory store and, if moto is installed,
moto's S3 server (a real HTTP S3 API on 127.0.0.1).

Compared with one file per member (JGroups' FILE_PING/S3_PING before JGRP-1841), run against
the same counting store with the same members: every member writes its own file, and a joiner
lists the directory and reads every file, as FILE_PING does.

Targets: at most 2 store reads per join whatever N; the coordinator 1 write per join; at most
40 bytes per member line on average with short logical names.

    python bench/discovery.py            # the table
    python bench/discovery.py --quick    # N = 10 and 100 only
"""
from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
import uuid

from raygroups.stack import Channel, StackConfig, wire
from raygroups.stack.address import Address
from raygroups.stack.discovery import Entry, MembersFile
from raygroups.stack.discovery.bootstrap import column_name
from raygroups.stack.discovery.members_file import file_name
from raygroups.stack.discovery.store import MemoryStore
from raygroups.stack.message import INTERNAL
from raygroups.stack.runtime.ports import free_port
from raygroups.stack.sim import Simulation

CLUSTER = "bench"
JOINS = 3
# timers for a big simulated group: the join path is the same, periodic traffic is rare
LAZY = dict(stable__desired_avg_gossip_s=30.0, swim__probe_interval_s=10.0,
            swim__probe_timeout_s=5.0, nakack__highest_interval_s=1.0,
            nakack__xmit_interval_s=1.0, unicast__xmit_interval_s=1.0,
            merge__info_interval_s=30.0, gms__merge_check_s=30.0,
            store__rendezvous_interval_s=3600.0, gms__view_bundling_s=0.05,
            gms__view_ack_timeout_s=5.0, gms__join_timeout_s=3.0)
# (a JOIN_RSP of ~1,000 members is ~38 KB, one datagram; from ~1,500 members on the
# transport fragments it, stack/transport_frag.py)


class CoreConfig(StackConfig):
    """The simulated groups run the core of the views stack (transport, store discovery,
    merge, SWIM, NAKACK, UNICAST, STABLE, GMS): the layers above GMS never call the store,
    so they would add simulation time (the primary component's state exchange is O(N)
    messages per view change above 32 members, but each still carries O(N) bytes) and
    change no store figure."""

    def build(self, cluster, name, host, rng, uid=None):
        from raygroups.stack.discovery.store_discovery import StoreDiscovery
        from raygroups.stack.gms import Gms
        from raygroups.stack.merge import MergeDetector
        from raygroups.stack.nakack import NakAck
        from raygroups.stack.stable import Stable
        from raygroups.stack.stack import Stack
        from raygroups.stack.swim import Swim
        from raygroups.stack.transport import Transport
        from raygroups.stack.unicast import Unicast
        layers = [Transport(self.transport), StoreDiscovery(self.store),
                  MergeDetector(self.merge), Swim(self.swim), NakAck(self.nakack),
                  Unicast(self.unicast), Stable(self.stable), Gms(self.gms)]
        return Stack(cluster, name, layers, host, rng, uid)


def random_uuid_bytes(mf: MembersFile, seed: int = 1) -> tuple:
    """Average line bytes of ``mf``'s members with random UUIDs (``Address.random``, drawn
    from ``seed``): as written (mostly 16 base64url characters), and in the dashed form (36
    characters) that people may write by hand."""
    rng = random.Random(seed)
    rnd = MembersFile([Entry(e.name, Address.random(e.name, rng).uid, e.host, e.port, e.coord)
                       for e in mf])
    dashed = [e.render().replace(e.uuid_text, str(uuid.UUID(bytes=e.uid)), 1) for e in rnd]
    return rnd.line_bytes(), sum(len(x) + 1 for x in dashed) / len(dashed)


def one_file_per_member_reads(mf: MembersFile) -> int:
    """Store reads of a join when each of ``mf``'s members writes a file of its own (the
    layout before JGRP-1841): the joiner lists the cluster and reads every file."""
    store = MemoryStore()
    for e in mf:
        store.put(CLUSTER, f"{e.uuid_text}.{e.name or '-'}.node", MembersFile([e]).encode())
    store.calls.clear()
    found = MembersFile()
    for name in store.list(CLUSTER):
        found.entries.extend(MembersFile.parse(store.get(CLUSTER, name)[0]).entries)
    assert {e.uid for e in found} == {e.uid for e in mf}
    return store.calls["list"] + store.calls["get"]


def settle(sim, pred, limit_s: float, what: str) -> None:
    """Run in 50 ms steps until ``pred`` (checking a big group after every event is slow)."""
    end = sim.now + limit_s
    while not pred():
        if sim.now > end:
            raise TimeoutError(f"{what} not reached in {limit_s}s simulated")
        sim.run_for(0.05)


def sim_run(n: int, seed: int = 1) -> dict:
    sim = Simulation(seed)
    started = time.time()
    base = [sim.add_member(CLUSTER, column_name(i), start=False) for i in range(n - JOINS)]
    boot = MembersFile([Entry(m.name, (i + 1).to_bytes(16, "big"), *m.local_phys, i == 0)
                        for i, m in enumerate(base)])
    cfg = CoreConfig.lan(discovery="memory://bench", bootstrap=boot, **LAZY)
    for m in base:
        m.config = cfg
    base[0]._boot()
    sim.run_until(lambda: base[0].view is not None, 30, "first member")
    for m in base[1:]:
        m._boot()
    settle(sim, lambda: all(m.view is not None and len(m.view) == len(base) for m in base),
           600, f"{len(base)} bootstrap members")
    seeded = MembersFile.parse(sim.store.get(CLUSTER, "1.list")[0])
    coord = base[0]
    members = list(base)
    reads, writes = [], []
    for k in range(JOINS):
        puts = coord.store.calls["put"]
        j = sim.add_member(CLUSTER, column_name(len(members)), cfg.with_options(
            store__use_bootstrap_identity=False, store__bootstrap=None))
        members.append(j)
        target = len(members)

        def joined() -> bool:
            mf = sim.store.get(CLUSTER, "1.list")
            return all(m.view is not None and len(m.view) == target for m in members) and \
                mf is not None and len(MembersFile.parse(mf[0])) == target
        settle(sim, joined, 600, f"join {k}")
        reads.append(j.store.calls["list"] + j.store.calls["get"])
        writes.append(coord.store.calls["put"] - puts)
        assert not j.store.calls["put"]
    final = MembersFile.parse(sim.store.get(CLUSTER, "1.list")[0])
    data = sim.store.get(CLUSTER, "1.list")[0]
    # the last joiner's JOIN_RSP as it goes on the wire (view, digest, addresses)
    rsp = coord.stack.layer("gms").join_rsps[j.stack.local]
    join_rsp = len(wire.encode_message(j.stack.local.uid, INTERNAL, {5: rsp}, b""))
    return {"n": n, "where": "simulator", "store": "counting", "reads": max(reads),
            "join_rsp": join_rsp,
            "writes": max(writes), "line": final.line_bytes(), "file": len(data) / len(final),
            "seeded": seeded.line_bytes(), "random": random_uuid_bytes(final)[0],
            "random_dashed": random_uuid_bytes(final)[1],
            "per_member_reads": one_file_per_member_reads(final), "secs": time.time() - started}


async def real_run(n: int, url: str, store: str) -> dict:
    cfg = StackConfig.local(discovery=url, transport__ip_multicast=False,
                            store__rendezvous_interval_s=3600.0)
    loop = asyncio.get_running_loop()
    started = time.time()
    chans = [Channel(CLUSTER, column_name(0), cfg)]
    await chans[0].connect(30)
    check = chans[0].runtime.store.store  # the process's caching store, for reading back

    async def until(pred, what):
        deadline = loop.time() + 60
        while not pred():
            if loop.time() > deadline:
                raise TimeoutError(what)
            await asyncio.sleep(0.01)

    def listed(k: int) -> bool:
        got = check.inner.get(CLUSTER, file_name(chans[0].address.uid))
        return got is not None and len(MembersFile.parse(got[0])) == k

    await until(lambda: listed(1), "founder's file")
    reads, writes = [], []
    for i in range(1, n):
        puts = chans[0].runtime.store.calls["put"]
        ch = Channel(CLUSTER, column_name(i), cfg)
        await ch.connect(30)
        chans.append(ch)
        await until(lambda: listed(len(chans)) and all(len(c.view) == len(chans) for c in chans),
                    f"join {i}")
        c = ch.runtime.store.calls
        reads.append(c["list"] + c["get"])
        writes.append(chans[0].runtime.store.calls["put"] - puts)
    data = check.inner.get(CLUSTER, file_name(chans[0].address.uid))[0]
    final = MembersFile.parse(data)
    await asyncio.gather(*(c.close() for c in chans))
    return {"n": n, "where": "real channels", "store": store, "reads": max(reads),
            "writes": max(writes), "line": final.line_bytes(), "file": len(data) / len(final),
            "seeded": None, "random": final.line_bytes(),
            "random_dashed": random_uuid_bytes(final)[1],
            "per_member_reads": one_file_per_member_reads(final), "secs": time.time() - started}


def moto_url() -> tuple:
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError:
        return None, None
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
                 aws_secret_access_key="x").create_bucket(Bucket="raygroups-bench")
    return (f"s3://raygroups-bench/b?endpoint_url={endpoint}&aws_access_key_id=x"
            f"&aws_secret_access_key=x"), server


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        rows.append(asyncio.run(real_run(10, f"file://{d}/store", "directory")))
    url, server = moto_url()
    if url:
        try:
            rows.append(asyncio.run(real_run(10, url, "S3 (moto server)")))
        finally:
            server.stop()
    for n in ((10, 100) if args.quick else (10, 100, 1000)):
        rows.append(sim_run(n))
        print(f"  simulated N={n} in {rows[-1]['secs']:.0f}s", file=sys.stderr)

    print("\nStore calls per join and bytes per member (one members file per coordinator)\n")
    print("| N | run | store | reads/join (max) | coordinator writes/join | B/line (file) "
          "| B/member (whole file) | B/line seeded UUIDs | B/line random UUIDs "
          "(dashed UUIDs) | reads/join, one file per member |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        seeded = f"{r['seeded']:.1f}" if r["seeded"] is not None else "-"
        print(f"| {r['n']} | {r['where']} | {r['store']} | {r['reads']} | {r['writes']} "
              f"| {r['line']:.1f} | {r['file']:.1f} | {seeded} | {r['random']:.1f} "
              f"({r['random_dashed']:.1f}) | {r['per_member_reads']} |")
    print("\nJOIN_RSP to the last joiner (view, digest and addresses; each UUID once): " +
          ", ".join(f"N = {r['n']}: {r['join_rsp'] / 1000:.1f} KB" for r in rows
                    if "join_rsp" in r))
    print("\nTargets")
    print(f"- a join costs at most 2 store reads whatever N: "
          f"{verdict(all(r['reads'] <= 2 for r in rows))} "
          f"(max {max(r['reads'] for r in rows)}; one file per member: "
          f"{', '.join(str(r['per_member_reads']) for r in rows)} reads)")
    print(f"- the coordinator writes once per join: "
          f"{verdict(all(r['writes'] == 1 for r in rows))}")
    seeded = [r["seeded"] for r in rows if r["seeded"] is not None]
    print(f"- <= 40 B per member line, short names (bootstrap file, seeded UUIDs as in the "
          f"seed): {verdict(max(seeded) <= 40)} (max {max(seeded):.1f} B; seed: ~35 B)")
    rnd = max(r["random"] for r in rows)
    dashed = max(r["random_dashed"] for r in rows)
    print(f"- <= 40 B per member line, short names, random UUIDs: {verdict(rnd <= 40)} "
          f"(max {rnd:.1f} B with 16-character base64url UUIDs, {dashed:.1f} B in the dashed "
          f"form; the uuid takes 16 of the 40 bytes, an IPv4 endpoint 13-21)")


if __name__ == "__main__":
    main()
