"""The API a Ray user calls, against what a Ray user would pick instead, in one run.

On one local Ray node (loopback, started here), a group of 3 member actors, 1 KB payloads,
batches of ``--batch`` (500), every figure in messages per second:

* ``Group.send``: one message per Ray call (as ``ray.util.queue``'s put/get below);
* ``Group.send_many``->``receive``: the driver sends N messages in batches through one
  member; one reader per member (async, in the driver) takes them with ``receive`` until it
  has all N; N / (the first send until the last member's reader has the last message);
* ``Group.send_many``->``receive_many`` and ``Group.subscribe``: the same with the batch
  reads (one ``MessageBatch`` per call; once a message is there the readers wait up to
  20 ms for 5,000, ``min_messages``/``linger_s``: ``THROUGHPUT``), and with the
  subscription that yields them; then the batches sent through a ``Group.publisher`` (4
  calls in flight, in order); then both with batches 4x as large;
* the work queue: ``publish_many``->``acquire_many``->``settle_many("accept")``, a producer
  and a consumer running together; N / (first publish until the last accept returned);
* the ceilings: the same multicast without Ray, a process per member with the config a
  member actor gets (``placement.stack_config``: unicast fan-out, AES-GCM), sending from the
  sender's own loop; the same work queue without Ray (bench/workqueue.py's members, each
  publishing and consuming in its own process; unicast fan-out, unencrypted);
* baselines: ``ray.util.queue.Queue`` (``put_nowait_batch``/``get_nowait_batch``, producer
  and consumer together, and one ``put``/``get`` per message), and an actor fan-out: the
  driver calls ``push.remote(batch)`` on 3 plain subscriber actors (at most 4 calls in
  flight per actor), N / (first call until every actor has all N).

Targets: the work queue >= 5x ``ray.util.queue`` batched, and >= 50,000 msg/s of 1 KB from one
driver to 3 members (the best of the group rows); printed as met / NOT met with the ratios
to the baselines of this run, the load average, and how many object references the group
rows left in the driver (0: nothing leaked). Every row runs ``--rounds`` times, the rows
interleaved (all rows, then all rows again), so that each sees the same machine; the
figure is the median.

    python bench/ray_api.py            # N = 100,000 (per-message rows: 2,000), 3 rounds
    python bench/ray_api.py --quick    # N = 20,000 (per-message rows: 500), 3 rounds
    python bench/ray_api.py --json out.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

QUEUE_TARGET = 5.0
"""The work queue's throughput over ray.util.queue's (batched both ways), at least."""
FANOUT_TARGET = 50_000.0
"""msg/s of 1 KB from one driver to 3 members, at least."""


THROUGHPUT = {"min_messages": 5000, "linger_s": 0.02}
"""The batch readers' settings: once a message is there, wait up to 20 ms for 5,000."""


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def payloads(n: int, size: int) -> list:
    """n distinct payloads of ``size`` bytes (a sequence number, then padding)."""
    pad = b"x" * (size - 8)
    return [k.to_bytes(8, "big") + pad for k in range(n)]


def rate(n: int, t0: float, t1: float) -> float:
    return n / max(t1 - t0, 1e-9)


# -- the group ----------------------------------------------------------------------------
async def _send_batches(send, data: list, batch: int) -> float:
    t0 = time.perf_counter()
    for i in range(0, len(data), batch):
        await send(data[i:i + batch])
    return t0


async def group_receive(g, data: list, batch: int) -> float:
    """send_many -> receive (a list of dicts per call), one reader per member."""
    names = g.member_names()
    n = len(data)

    async def reader(name: str) -> float:
        got = 0
        while got < n:
            msgs = await g.receive_async(max_messages=10 * batch, timeout=5.0, member=name)
            if not msgs:
                raise RuntimeError(f"{name}: messages stopped at {got} of {n}")
            got += len(msgs)
        return time.perf_counter()
    readers = [asyncio.ensure_future(reader(m)) for m in names]
    t0 = await _send_batches(g.send_many_async, data, batch)
    return rate(n, t0, max(await asyncio.gather(*readers)))


async def group_receive_many(g, data: list, batch: int) -> float:
    """send_many -> receive_many (one MessageBatch per call), one reader per member."""
    n = len(data)

    async def reader(name: str) -> float:
        got = 0
        while got < n:
            b = await g.receive_many_async(timeout=5.0, member=name, **THROUGHPUT)
            if not b:
                raise RuntimeError(f"{name}: messages stopped at {got} of {n}")
            got += len(b)
        return time.perf_counter()
    readers = [asyncio.ensure_future(reader(m)) for m in g.member_names()]
    t0 = await _send_batches(g.send_many_async, data, batch)
    return rate(n, t0, max(await asyncio.gather(*readers)))


async def group_subscribe(g, data: list, batch: int, in_flight: int = 1) -> float:
    """send_many (``in_flight`` > 1: through a publisher) -> the subscriptions (async
    iterators of batches), one per member."""
    n = len(data)

    async def reader(name: str) -> float:
        sub = g.subscribe(member=name, wait_s=5.0, **THROUGHPUT)
        async for b in sub:
            if sub.received >= n:
                break
        return time.perf_counter()
    readers = [asyncio.ensure_future(reader(m)) for m in g.member_names()]
    if in_flight == 1:
        t0 = await _send_batches(g.send_many_async, data, batch)
    else:
        pub = g.publisher(in_flight=in_flight)
        t0 = await _send_batches(pub.send_many_async, data, batch)
        await pub.flush_async()
    return rate(n, t0, max(await asyncio.gather(*readers)))


# -- the work queue -----------------------------------------------------------------------
async def work_queue(g, data: list, batch: int) -> float:
    q = g.queue(f"bench-{time.monotonic_ns()}")
    n = len(data)

    async def consumer() -> float:
        got = 0
        while got < n:
            ds = await q.acquire_many_async(batch, timeout_s=5.0)
            if not ds:
                raise RuntimeError(f"the queue stopped at {got} of {n}")
            await q.settle_many_async("accept", ds)
            got += len(ds)
        return time.perf_counter()
    c = asyncio.ensure_future(consumer())
    t0 = await _send_batches(q.publish_many_async, data, batch)
    return rate(n, t0, await c)


# -- baselines ----------------------------------------------------------------------------
def ray_queue_batched(data: list, batch: int) -> float:
    import threading

    from ray.util.queue import Empty, Queue
    q = Queue()
    n = len(data)
    done: list = []

    def consume() -> None:
        got = 0
        while got < n:
            try:
                got += len(q.get_nowait_batch(batch))
            except Empty:
                time.sleep(0.001)
        done.append(time.perf_counter())
    t = threading.Thread(target=consume)
    t.start()
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        q.put_nowait_batch(data[i:i + batch])
    t.join()
    q.shutdown()
    return rate(n, t0, done[0])


def ray_queue_single(data: list) -> float:
    from ray.util.queue import Queue
    q = Queue()
    t0 = time.perf_counter()
    for d in data:
        q.put(d)
        q.get()
    q.shutdown()
    return rate(len(data), t0, time.perf_counter())


def actor_fanout(ray, data: list, batch: int, subscribers: int = 3, in_flight: int = 4) -> float:
    @ray.remote(num_cpus=0)
    class Subscriber:
        def __init__(self):
            self.n = 0

        def push(self, msgs: list) -> int:
            self.n += len(msgs)
            return self.n

    subs = [Subscriber.remote() for _ in range(subscribers)]
    ray.get([s.push.remote([]) for s in subs])
    pending: list = []
    t0 = time.perf_counter()
    for i in range(0, len(data), batch):
        chunk = data[i:i + batch]
        if len(pending) >= in_flight * subscribers:
            _, pending = ray.wait(pending, num_returns=subscribers)
        pending += [s.push.remote(chunk) for s in subs]
    ray.get(pending)
    out = rate(len(data), t0, time.perf_counter())
    for s in subs:
        ray.kill(s)
    return out


def group_send_single(g, data: list) -> float:
    """``Group.send``, one message per Ray call (sent; the members deliver them after)."""
    t0 = time.perf_counter()
    for d in data:
        g.send(d)
    return rate(len(data), t0, time.perf_counter())


def drain(g, n: int) -> None:
    """Take ``n`` messages off every member's inbox (what a row without readers left)."""
    for m in g.member_names():
        got = 0
        while got < n:
            b = g.receive_many(timeout=10.0, member=m)
            if not b:
                raise RuntimeError(f"{m}: {got} of {n} messages")
            got += len(b)


def _socket_member(i: int, ports: list, key: bytes, n: int, size: int, batch: int,
                   out) -> None:
    """One member process of ``socket_speed``: member 0 sends, every member receives."""
    from raygroups.actors.placement import stack_config
    from raygroups.stack import Channel

    async def run() -> None:
        cfg = stack_config("127.0.0.1", ports[i], [("127.0.0.1", p) for p in ports],
                           options={"cluster_key": key, "auth_mode": "aesgcm"})
        ch = Channel("socket-speed", name=f"s{i}", config=cfg)
        await ch.connect(timeout=60)
        while len(ch.view) < len(ports):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # every member has the full view
        async def receive() -> float:
            got = 0
            while got < n:
                got += len(await ch.receive_many(timeout=60))
            return time.monotonic()
        receiver = asyncio.ensure_future(receive())
        t0 = time.monotonic()
        if i == 0:
            data = payloads(n, size)
            for k in range(0, n, batch):
                await ch.send_many(data[k:k + batch])
                await asyncio.sleep(0)  # the loop reads the sockets between batches
        out.put((i, t0, await receiver))
        await asyncio.sleep(0.5)
        await ch.close()
    asyncio.run(run())


def socket_speed(n: int, size: int, batch: int) -> float:
    """The same multicast without Ray: a process per member with the config a member actor
    gets on loopback (``placement.stack_config``: the local preset, unicast fan-out, the
    group's AES-GCM key); member 0 sends in batches from its own loop. N / (its first send
    until the last member received the last message)."""
    import multiprocessing as mp
    import secrets

    from raygroups.stack.runtime.ports import free_ports
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ports, key = free_ports(3), secrets.token_bytes(32)
    procs = [ctx.Process(target=_socket_member, args=(i, ports, key, n, size, batch, out))
             for i in range(3)]
    for p in procs:
        p.start()
    res = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    t0 = next(t for i, t, _ in res if i == 0)
    return rate(n, t0, max(t for _i, _t0, t in res))


def queue_speed(n: int, size: int, batch: int) -> float:
    """The same work queue without Ray: bench/workqueue.py's three member processes (each
    publishes its share in batches, one in flight, and consumes; one queue; unencrypted)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from workqueue import run_raygroups
    return run_raygroups("active-passive", n, 0, 1000.0, size, batch, 1, False)["rate"]


# -- main ---------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, help="runs of every row, interleaved (default 3)")
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--json", help="also write the figures as JSON to this file")
    args = ap.parse_args(argv)
    n = 20_000 if args.quick else 100_000
    single = 500 if args.quick else 2_000
    rounds = args.rounds or 3
    from raygroups.actors.ray_compat import init_local, objects_held
    ray = init_local(num_cpus=4, object_store_memory=300 * 1024 * 1024)
    from raygroups.actors import Group
    data = payloads(n, args.size)
    res: dict = {"messages": n, "size": args.size, "batch": args.batch, "rounds": rounds,
                 "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load_before": os.getloadavg(),
                 "runs": {}}
    b = args.batch
    held = len(objects_held())
    g = Group.launch(f"bench-api-{os.getpid()}", members=3, metrics_interval_s=0, timeout=120)

    def one_by_one() -> float:
        r = group_send_single(g, data[:single])
        drain(g, single)
        return r
    rows = [
        ("socket", "the same multicast without Ray (a process per member)",
         lambda: socket_speed(n, args.size, b)),
        ("queue_socket", "the same work queue without Ray (a process per member)",
         lambda: queue_speed(n, args.size, b)),
        ("ray_queue_batched", "ray.util.queue put/get_nowait_batch",
         lambda: ray_queue_batched(data, b)),
        ("ray_queue_single", "ray.util.queue put/get, one message per call",
         lambda: ray_queue_single(data[:single])),
        ("actor_fanout", "actor fan-out, push.remote(batch) to 3 subscriber actors",
         lambda: actor_fanout(ray, data, b)),
        ("group_send", "Group.send, one message per call", one_by_one),
        ("group_receive", "Group.send_many -> receive (dicts), 3 members",
         lambda: asyncio.run(group_receive(g, data, b))),
        ("group_receive_many", "Group.send_many -> receive_many, 3 members",
         lambda: asyncio.run(group_receive_many(g, data, b))),
        ("group_subscribe", "Group.send_many -> subscribe (async for), 3 members",
         lambda: asyncio.run(group_subscribe(g, data, b))),
        ("group_publisher", "Group.publisher (4 batches in flight) -> subscribe",
         lambda: asyncio.run(group_subscribe(g, data, b, in_flight=4))),
        ("group_subscribe_4x", f"send_many -> subscribe, batches of {4 * b}",
         lambda: asyncio.run(group_subscribe(g, data, 4 * b))),
        ("group_publisher_4x", f"publisher -> subscribe, batches of {4 * b}",
         lambda: asyncio.run(group_subscribe(g, data, 4 * b, in_flight=4))),
        ("queue", "queue publish_many -> acquire_many -> settle_many(accept)",
         lambda: asyncio.run(work_queue(g, data, b))),
    ]
    try:
        for k in range(rounds):
            for key, _label, fn in rows:
                res["runs"].setdefault(key, []).append(fn())
            print(f"round {k + 1} of {rounds} done", file=sys.stderr, flush=True)
    finally:
        g.shutdown()
    print(f"{'':62} {'median':>10}        (min - max of {rounds})")
    for key, label, _fn in rows:
        runs = res["runs"][key]
        res[key] = statistics.median(runs)
        print(f"{label:62} {res[key]:>10,.0f} msg/s  ({min(runs):,.0f} - {max(runs):,.0f})")
    res["objects_left"] = len(objects_held()) - held
    res["load_after"] = os.getloadavg()
    best = max(v for k, v in res.items() if k.startswith("group_") and k != "group_send")
    q_ratio = res["queue"] / res["ray_queue_batched"]
    print(f"\nload average {res['load_before'][0]:.2f} before, {res['load_after'][0]:.2f} after "
          f"(2 cores); object references the group rows left in this driver: "
          f"{res['objects_left']}")
    print(f"work queue / ray.util.queue batched: {q_ratio:.2f}x (target >= {QUEUE_TARGET:.0f}x: "
          f"{verdict(q_ratio >= QUEUE_TARGET)}); / one per call: "
          f"{res['queue'] / res['ray_queue_single']:.1f}x; / the same queue without Ray: "
          f"{res['queue'] / res['queue_socket']:.2f}x")
    print(f"driver -> 3 members, 1 KB: {best:,.0f} msg/s (target >= {FANOUT_TARGET:,.0f} msg/s: "
          f"{verdict(best >= FANOUT_TARGET)}); {best / res['actor_fanout']:.2f}x the actor "
          f"fan-out, {best / res['socket']:.2f}x the multicast without Ray; receive_many / "
          f"receive {res['group_receive_many'] / res['group_receive']:.2f}x")
    res["targets"] = {"queue_ratio": q_ratio, "queue_met": q_ratio >= QUEUE_TARGET,
                      "fanout": best, "fanout_met": best >= FANOUT_TARGET}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
