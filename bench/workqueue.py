"""Work queue throughput and latency, publish -> accept, with 3 members on loopback
against RabbitMQ 3.10 quorum queues when ``rabbitmq-server`` is installed.

raygroups: each member is its own process (QueueChannel over UDP, static discovery); every
member publishes and consumes. Throughput: N messages published (batches of ``--batch``,
``--window`` batches in flight per publisher, each publish completing once a majority
applied it) and acquired + accepted (``acquire_many`` + ``settle_many``); the figure is N
over the time from the first publish until the last accept completed. Latency: paced
publishes stamped with the (system-wide) monotonic clock; the delay until the consumer
holds the message (acquire completed), p50/p99.

Modes: active-passive: one queue, every member consumes it (one owner at a time; ownership
moves on when its time slice ends); active-active: 4 queues, every member consumes all of
them (ownership of the 4 spreads over the members).

RabbitMQ: a 3-node cluster started on loopback inside the benchmark (its own temporary
RABBITMQ_MNESIA_BASE/RABBITMQ_LOG_BASE, ports, Erlang cookie and epmd; stopped after),
quorum queues (replicated on the 3 nodes, Raft, written to disk), one publisher process
and one consumer process per node with pika (publisher confirms with a window of
outstanding messages; consumer prefetch and manual acks). Without ``rabbitmq-server`` (or
pika) that part prints "RabbitMQ not installed: skipped".

Durable (``--durable``): the raygroups rows are run again with each member journaling its
queues (``journal_dir``: its own temporary directory on the file system of RabbitMQ's data
dirs, fdatasync on; removed after), so that a publish completes once a majority has it on
disk, as a quorum queue's confirm does; the targets (>= 1.0x RabbitMQ's throughput, p50
latency <= 1.0x) are judged on these rows. Fsyncs per message on both sides, for the
throughput run and for the paced (latency) one: raygroups from the members' journal
counters (``journal.stats.fsyncs``, summed over the members); RabbitMQ from a second pass
of the same runs on a new cluster whose nodes run under ``strace -f --seccomp-bpf -e
trace=fsync,fdatasync`` (the calls whose timestamps fall in each run): its figures are not
shown, strace slows the nodes (each fsync stops one until strace gets the CPU: on 2 cores
RabbitMQ's throughput halved and its p50 latency tripled).

    python bench/workqueue.py            # the table
    python bench/workqueue.py --quick    # fewer messages
    python bench/workqueue.py --durable  # and the journaled raygroups rows, with targets
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from typing import Optional

from compare import ratio, target_met, verdict
from percentile import pct
from raygroups.stack.runtime.ports import free_ports

STAMP = struct.Struct("!dI")
MEMBERS = 3
STACK_OPTS: dict = {}
DURABLE_TARGETS = {"tput": 1.0,   # durable raygroups / RabbitMQ quorum queues msg/s, at least
                   "p50": 1.0}    # and p50 latency, at most
SYNC_CALLS = ("fsync", "fdatasync")


# == pure helpers (tests/unit/test_workqueue_bench.py) =====================================
def strace_syncs(lines, t0: float, t1: float) -> int:
    """The fsync/fdatasync calls in ``strace -f -ttt`` output lines ("PID SECONDS.USEC
    call(...) = 0", or an unfinished/resumed pair, counted once: at its start) whose
    timestamps fall in [t0, t1)."""
    n = 0
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) < 3 or parts[2].startswith("<..."):
            continue
        call = parts[2].split("(", 1)[0]
        if call not in SYNC_CALLS:
            continue
        try:
            t = float(parts[1])
        except ValueError:
            continue
        if t0 <= t < t1:
            n += 1
    return n


def per_message(syncs: Optional[int], msgs: int) -> Optional[float]:
    """Fsyncs per message, None when either is unknown or there were no messages."""
    return None if syncs is None or not msgs else syncs / msgs


def durable_verdicts(ours: dict, rabbit: dict) -> list:
    """(what, ratio, target text, verdict) for the durable targets: throughput at least
    DURABLE_TARGETS["tput"] x RabbitMQ's, p50 latency at most DURABLE_TARGETS["p50"] x."""
    out = []
    for what, key, higher, sign in (("throughput", "rate", True, ">="),
                                    ("p50 latency", "p50", False, "<=")):
        bound = DURABLE_TARGETS["tput" if key == "rate" else "p50"]
        r = ratio(ours.get(key), rabbit.get(key))
        out.append((what, r, f"{sign} {bound}x", verdict(target_met(r, bound, higher))))
    return out


def fmt_syncs(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.2f}"


# ==========================================================================================
# raygroups
# ==========================================================================================
def rg_member(i: int, ports: list, cluster: str, queues: list, count: int, paced: int,
              rate: float, size: int, batch: int, window: int, uvloop: bool,
              accepted, barrier, out, stack_opts: dict, journal_dir: Optional[str] = None
              ) -> None:
    if uvloop:
        import uvloop as uv
        uv.install()
    asyncio.run(_rg_member(i, ports, cluster, queues, count, paced, rate, size, batch, window,
                           accepted, barrier, out, stack_opts, journal_dir))


async def _rg_member(i, ports, cluster, queues, count, paced, rate, size, batch, window,
                     accepted, barrier, out, stack_opts, journal_dir) -> None:
    from raygroups.stack import StackConfig
    from raygroups.stack.runtime.workqueue import QueueChannel
    from raygroups.stack.workqueue import WorkQueueConfig
    cfg = StackConfig.local(transport__ip_multicast=False, port=ports[i],
                            initial_hosts=[("127.0.0.1", p) for p in ports],
                            primary__expected_size=len(ports), **stack_opts)
    ch = QueueChannel(cluster, name=f"m{i}", config=cfg, queue_config=WorkQueueConfig(),
                      journal_dir=journal_dir)
    jstats = ch.queues.journal.journal.stats if ch.queues.journal is not None else None
    await ch.connect(timeout=30)
    while ch.view is None or len(ch.view) < len(ports):
        await asyncio.sleep(0.01)
    await ch.queues.wait_active(30)
    qs = [await ch.queue(name) for name in queues]
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, barrier.wait)
    pad = b"x" * max(0, size - STAMP.size)
    total = count + paced
    mine = [k for k in range(count) if k % len(ports) == i]
    my_paced = [k for k in range(count, total) if k % len(ports) == i]
    res = {"first_pub": None, "last_accept": 0.0, "lat": [], "accepted": 0}
    done = asyncio.Event()
    syncs = (lambda: jstats.fsyncs) if jstats is not None else (lambda: None)
    res["fsyncs0"] = syncs()  # the journal's fsyncs: at the start, bulk done, the end

    async def publisher() -> None:
        sem = asyncio.Semaphore(window)
        tasks = []
        res["first_pub"] = time.monotonic()
        for j in range(0, len(mine), batch):
            chunk = mine[j:j + batch]
            await sem.acquire()
            now = time.monotonic()
            bodies = [STAMP.pack(now, k) + pad for k in chunk]
            q = qs[(j // batch) % len(qs)]
            t = asyncio.create_task(q.publish_many(bodies))
            t.add_done_callback(lambda _t: sem.release())
            tasks.append(t)
        await asyncio.gather(*tasks)
        # latency: paced, one at a time, once the throughput run is drained (else the
        # samples would measure the backlog ahead of them)
        while accepted.value < count:
            await asyncio.sleep(0.005)
        gap = len(ch.view) / rate
        for n, k in enumerate(my_paced):
            await asyncio.sleep(gap)
            t0 = time.monotonic()
            await qs[n % len(qs)].publish(STAMP.pack(t0, k) + pad)
            res.setdefault("pub_lat", []).append(time.monotonic() - t0)

    async def consumer(q) -> None:
        # acquire the next batch while the last ones are being accepted (a few in flight)
        sem = asyncio.Semaphore(4)

        async def accept(got) -> None:
            try:
                await q.settle_many("accept", got)
            finally:
                sem.release()
            now = time.monotonic()
            res["last_accept"] = now
            res["accepted"] += len(got)
            with accepted.get_lock():
                accepted.value += len(got)
                if accepted.value >= count and res.get("bulk_done") is None:
                    res["bulk_done"] = now  # the throughput run is over (first to see it)
                    res.setdefault("fsyncs1", syncs())
                if accepted.value >= total:
                    done.set()

        tasks = []
        while not done.is_set():
            got = await q.acquire_many(batch, timeout=0.1)
            if not got:
                if accepted.value >= total:
                    done.set()
                continue
            now = time.monotonic()
            for d in got:
                stamp, k = STAMP.unpack_from(d.body)
                if k >= count:
                    res["lat"].append(now - stamp)
            await sem.acquire()
            tasks.append(asyncio.create_task(accept(got)))
        await asyncio.gather(*tasks)

    async def watch() -> None:
        while not done.is_set():
            if accepted.value >= count and "fsyncs1" not in res:
                res["fsyncs1"] = syncs()
            if accepted.value >= total:
                done.set()
            await asyncio.sleep(0.02)

    pub = asyncio.create_task(publisher())
    await asyncio.wait_for(asyncio.gather(pub, watch(), *[consumer(q) for q in qs]), 600)
    res["fsyncs2"] = syncs()
    res["stats"] = ch.queues.info()["stats"]
    if os.environ.get("BENCH_DEBUG"):
        st = ch.stats()
        res["stack"] = {k: {x: y for x, y in v.items() if y} for k, v in st.items()
                        if k in ("nakack", "flow_control", "sequencer", "transport", "runtime",
                                 "unicast", "stable", "frag")}
    out.put((i, res))
    await loop.run_in_executor(None, barrier.wait)  # nobody leaves before all are done
    await ch.close(timeout=2)


def run_raygroups(mode: str, count: int, paced: int, rate: float, size: int, batch: int,
                  window: int, uvloop: bool, durable: bool = False) -> dict:
    queues = ["q0"] if mode == "active-passive" else ["q0", "q1", "q2", "q3"]
    ports = free_ports(MEMBERS)
    # journals on the file system of RabbitMQ's data dirs (RabbitCluster's mkdtemp)
    jdirs = [tempfile.mkdtemp(prefix=f"rg-journal-m{i}-") if durable else None
             for i in range(MEMBERS)]
    ctx = mp.get_context("spawn")
    accepted, barrier, out = ctx.Value("q", 0), ctx.Barrier(MEMBERS), ctx.Queue()
    cluster = f"bench-queue-{os.getpid()}-{ports[0]}"
    procs = [ctx.Process(target=rg_member, args=(i, ports, cluster, queues, count, paced, rate,
                                                 size, batch, window, uvloop, accepted,
                                                 barrier, out, STACK_OPTS, jdirs[i]))
             for i in range(MEMBERS)]
    for p in procs:
        p.start()
        time.sleep(0.2)
    results = {}
    try:
        for _ in procs:
            i, r = out.get(timeout=900)
            results[i] = r
    finally:
        for p in procs:
            p.join(timeout=20)
            if p.is_alive():
                p.kill()
        for d in jdirs:
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)
    first = min(r["first_pub"] for r in results.values())
    last = min(r["bulk_done"] for r in results.values() if r.get("bulk_done"))
    lat = [x for r in results.values() for x in r["lat"]]
    slices = sum(r["stats"].get("time_slices", 0) for r in results.values())
    per_member = [r["accepted"] for _, r in sorted(results.items())]
    if os.environ.get("BENCH_DEBUG"):
        for i, r in sorted(results.items()):
            pl = r.get("pub_lat", [])
            print(f"  m{i}: {r['stats']}\n      {r.get('stack')}\n      paced publish "
                  f"p50 {pct(pl, 0.5) * 1e3:.2f} p99 {pct(pl, 0.99) * 1e3:.2f} max "
                  f"{max(pl or [0]) * 1e3:.1f} ms; acquire latency max "
                  f"{max(r['lat'] or [0]) * 1e3:.1f}")
    out = {"msgs": count, "secs": last - first, "rate": count / (last - first),
           "p50": pct(lat, 0.5) * 1e3, "p99": pct(lat, 0.99) * 1e3, "owner_moves": slices,
           "per_member": per_member}
    if durable:
        rs = results.values()
        out["fsyncs_bulk"] = sum(r["fsyncs1"] - r["fsyncs0"] for r in rs)
        out["fsyncs_paced"] = sum(r["fsyncs2"] - r["fsyncs1"] for r in rs)
        out["fsync_per_msg"] = per_message(out["fsyncs_bulk"], count)
        out["fsync_per_paced"] = per_message(out["fsyncs_paced"], paced)
    return out


# ==========================================================================================
# RabbitMQ 3.10, quorum queues, 3 nodes on loopback
# ==========================================================================================
RABBIT_BIN = "/usr/lib/rabbitmq/bin"


class RabbitCluster:
    """Three rabbitmq-server nodes on loopback with private dirs, ports, cookie and epmd."""

    def __init__(self, n: int = 3, trace: bool = False):
        """``trace``: each node runs under strace, which records its fsync/fdatasync calls
        (``syncs``)."""
        self.n = n
        self.trace = trace
        self.dir = tempfile.mkdtemp(prefix="rg-rabbit-")
        self.procs: list = []
        ports = free_ports(2 * n + 1)
        self.amqp = ports[:n]
        self.dist = ports[n:2 * n]
        self.epmd = ports[2 * n]
        self.names = [f"rgbench{k}@localhost" for k in range(n)]
        with open(os.path.join(self.dir, ".erlang.cookie"), "w") as f:
            f.write("RAYGROUPSBENCHCOOKIE")
        os.chmod(os.path.join(self.dir, ".erlang.cookie"), 0o400)
        open(os.path.join(self.dir, "enabled_plugins"), "w").write("[].\n")

    def env(self, k: int = 0) -> dict:
        e = dict(os.environ)
        e.update({
            "HOME": self.dir, "ERL_EPMD_PORT": str(self.epmd),
            "RABBITMQ_NODENAME": self.names[k], "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp[k]), "RABBITMQ_DIST_PORT": str(self.dist[k]),
            "RABBITMQ_MNESIA_BASE": os.path.join(self.dir, f"mnesia{k}"),
            "RABBITMQ_LOG_BASE": os.path.join(self.dir, f"log{k}"),
            "RABBITMQ_PID_FILE": os.path.join(self.dir, f"node{k}.pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(self.dir, "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": os.path.join(self.dir, "rabbitmq"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS":
                "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_ALLOW_INPUT": "", "RABBITMQ_CONF_ENV_FILE": os.path.join(self.dir, "env"),
        })
        return e

    def ctl(self, k: int, *args: str, timeout: float = 120) -> str:
        r = subprocess.run([f"{RABBIT_BIN}/rabbitmqctl", "-n", self.names[k], *args],
                           env=self.env(k), capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {r.stdout} {r.stderr}")
        return r.stdout

    def await_node(self, k: int, timeout: float = 120.0) -> None:
        """Until node k runs (await_startup fails at once while the node has not even
        registered with epmd yet)."""
        end = time.monotonic() + timeout
        while True:
            try:
                self.ctl(k, "await_startup", "--timeout", "30", timeout=60)
                return
            except (RuntimeError, subprocess.TimeoutExpired):
                if time.monotonic() > end or self.procs[k].poll() is not None:
                    raise
                time.sleep(0.5)

    def start(self) -> None:
        for k in range(self.n):
            log = open(os.path.join(self.dir, f"server{k}.out"), "w")
            cmd = [f"{RABBIT_BIN}/rabbitmq-server"]
            if self.trace:  # seccomp-bpf: only the traced calls stop the node
                cmd = ["strace", "-f", "--seccomp-bpf", "-qq", "-e", "signal=none", "-ttt",
                       "-e", "trace=" + ",".join(SYNC_CALLS), "-o", self.trace_file(k), *cmd]
            self.procs.append(subprocess.Popen(cmd, env=self.env(k),
                                               stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))
        for k in range(self.n):
            self.await_node(k)
        for k in range(1, self.n):
            self.ctl(k, "stop_app")
            self.ctl(k, "join_cluster", self.names[0])
            self.ctl(k, "start_app")
        for k in range(self.n):
            self.await_node(k)

    def trace_file(self, k: int) -> str:
        return os.path.join(self.dir, f"strace{k}.txt")

    def syncs(self, windows: list) -> list:
        """Per (t0, t1) wall-clock window: the fsync/fdatasync calls of all nodes in it.
        Call after ``stop(keep=True)`` (strace has written everything out then)."""
        out = [0] * len(windows)
        for k in range(self.n):
            with open(self.trace_file(k)) as f:
                lines = f.readlines()
            for w, (t0, t1) in enumerate(windows):
                out[w] += strace_syncs(lines, t0, t1)
        return out

    def stop(self, keep: bool = False) -> None:
        """``keep``: leave the directory (the strace files) for ``syncs``; ``remove()``."""
        for k in range(self.n):
            try:
                self.ctl(k, "stop", timeout=60)
            except Exception:
                pass
        # under strace -f, epmd is a tracee of node 0's strace, which waits for it: kill it
        # while waiting (epmd refuses while a node is still registered)
        end = time.monotonic() + 30
        for p in self.procs:
            while p.poll() is None:
                self.kill_epmd()
                try:
                    p.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    if time.monotonic() > end:
                        os.killpg(p.pid, signal.SIGKILL)
        self.kill_epmd()
        if not keep:
            self.remove()

    def kill_epmd(self) -> None:
        subprocess.run(["epmd", "-kill"], env=self.env(0), capture_output=True, timeout=10)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def rabbit_publisher(port: int, queues: list, keys: list, size: int, window: int,
                     paced: list, rate: float, count: int, accepted, barrier, out) -> None:
    import pika
    pad = b"x" * max(0, size - STAMP.size)
    conn = pika.SelectConnection(pika.ConnectionParameters("127.0.0.1", port),
                                 on_open_callback=lambda c: c.channel(on_open_callback=opened))
    # confirms may come out of order (one Raft group per queue): track tags, not counts
    st = {"next": 0, "tag": 0, "pending": set(), "first": None, "paced": 0, "timer": False,
          "nacked": 0}
    total = len(keys) + len(paced)

    def opened(ch) -> None:
        st["ch"] = ch
        ch.confirm_delivery(on_confirm)
        barrier.wait()
        st["first"] = time.monotonic()
        pump()

    def publish(k: int) -> None:
        st["ch"].basic_publish("", queues[k % len(queues)],
                               STAMP.pack(time.monotonic(), k) + pad,
                               pika.BasicProperties(delivery_mode=2))
        st["tag"] += 1
        st["pending"].add(st["tag"])

    def pump() -> None:
        st["timer"] = False
        while st["next"] < len(keys) and len(st["pending"]) < window:
            publish(keys[st["next"]])
            st["next"] += 1
        if st["next"] >= len(keys) and not st["pending"] and st["paced"] < len(paced):
            if accepted.value < count:  # latency samples once the backlog is drained
                st["timer"] = True
                conn.ioloop.call_later(0.005, pump)
                return
            publish(paced[st["paced"]])  # latency samples: one at a time, paced
            st["paced"] += 1

    def on_confirm(frame) -> None:
        m = frame.method
        if type(m).__name__ == "Nack":
            st["nacked"] += 1
        pending = st["pending"]
        if m.multiple:
            for t in [t for t in pending if t <= m.delivery_tag]:
                pending.discard(t)
        else:
            pending.discard(m.delivery_tag)
        if st["tag"] - len(pending) >= total:
            out.put(("pub", st["first"], st["nacked"]))
            conn.close()
            return
        if st["next"] >= len(keys):
            if not pending and not st["timer"]:
                st["timer"] = True
                conn.ioloop.call_later(MEMBERS / rate, pump)
            return
        pump()

    conn.ioloop.start()


def rabbit_consumer(port: int, queues: list, count: int, total: int, prefetch: int,
                    accepted, barrier, out) -> None:
    import pika
    st = {"lat": [], "last": 0.0, "n": 0}
    conn = pika.SelectConnection(pika.ConnectionParameters("127.0.0.1", port),
                                 on_open_callback=lambda c: c.channel(on_open_callback=opened))

    def opened(ch) -> None:
        ch.basic_qos(prefetch_count=prefetch)
        for q in queues:
            ch.basic_consume(q, on_message, auto_ack=False)
        barrier.wait()
        check()

    def on_message(ch, method, props, body) -> None:
        now = time.monotonic()
        stamp, k = STAMP.unpack_from(body)
        if k >= count:
            st["lat"].append(now - stamp)
        ch.basic_ack(method.delivery_tag)
        st["last"] = time.monotonic()
        st["n"] += 1
        with accepted.get_lock():
            accepted.value += 1
            if accepted.value >= count and st.get("bulk_done") is None:
                st["bulk_done"] = st["last"]
                st["bulk_wall"] = time.time()

    def check() -> None:
        if accepted.value >= total:
            out.put(("con", st.get("bulk_done"), st["lat"], st["n"], st.get("bulk_wall")))
            conn.close()
            return
        conn.ioloop.call_later(0.02, check)

    conn.ioloop.start()


def run_rabbit(cluster: RabbitCluster, mode: str, count: int, paced: int, rate: float,
               size: int, window: int, prefetch: int) -> dict:
    import pika
    queues = ["q0"] if mode == "active-passive" else ["q0", "q1", "q2", "q3"]
    tag = f"{mode}-{time.monotonic_ns()}"
    queues = [f"{q}-{tag}" for q in queues]
    for j, q in enumerate(queues):
        # declared on node j: its Raft leader starts there (client-local), so the leaders
        # of the active-active queues are spread over the nodes
        c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1",
                                                              cluster.amqp[j % cluster.n]))
        c.channel().queue_declare(q, durable=True, arguments={"x-queue-type": "quorum"})
        c.close()
    ctx = mp.get_context("spawn")
    accepted, barrier, out = ctx.Value("q", 0), ctx.Barrier(2 * MEMBERS), ctx.Queue()
    total = count + paced
    procs = []
    for i in range(MEMBERS):
        keys = [k for k in range(count) if k % MEMBERS == i]
        pk = [k for k in range(count, total) if k % MEMBERS == i]
        procs.append(ctx.Process(target=rabbit_publisher,
                                 args=(cluster.amqp[i], queues, keys, size, window, pk, rate,
                                       count, accepted, barrier, out)))
        procs.append(ctx.Process(target=rabbit_consumer,
                                 args=(cluster.amqp[i], queues, count, total, prefetch,
                                       accepted, barrier, out)))
    wall0 = time.time()
    for p in procs:
        p.start()
    firsts, lasts, lat, walls = [], [], [], []
    try:
        for _ in procs:
            r = out.get(timeout=900)
            if r[0] == "pub":
                firsts.append(r[1])
            else:
                if r[1] is not None:
                    lasts.append(r[1])
                    walls.append(r[4])
                lat.extend(r[2])
    finally:
        for p in procs:
            p.join(timeout=20)
            if p.is_alive():
                p.kill()
    secs = min(lasts) - min(firsts)
    # wall-clock windows of the throughput and the paced runs, for the nodes' fsyncs
    return {"msgs": count, "secs": secs, "rate": count / secs, "p50": pct(lat, 0.5) * 1e3,
            "p99": pct(lat, 0.99) * 1e3, "windows": [(wall0, min(walls)),
                                                     (min(walls), time.time())]}


def rabbit_available() -> str:
    if not os.path.exists(f"{RABBIT_BIN}/rabbitmq-server") or not shutil.which("erl"):
        return "rabbitmq-server"
    try:
        import pika  # noqa: F401
    except ImportError:
        return "pika"
    return ""


# ==========================================================================================
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--count", type=int, default=30_000)
    ap.add_argument("--paced", type=int, default=600, help="latency samples")
    ap.add_argument("--rate", type=float, default=300.0, help="paced publishes per second")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--window", type=int, default=8, help="publish batches in flight")
    ap.add_argument("--prefetch", type=int, default=500, help="RabbitMQ consumer prefetch")
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--stack", action="append", default=[], metavar="LAYER__FIELD=VALUE",
                    help="a stack option for the raygroups members, e.g. "
                         "sequencer__resend_interval_s=0.02")
    ap.add_argument("--no-rabbit", action="store_true")
    ap.add_argument("--rabbit-only", action="store_true", help="only the RabbitMQ rows")
    ap.add_argument("--durable", action="store_true",
                    help="also journaled raygroups rows (fdatasync), judged against RabbitMQ")
    ap.add_argument("--no-strace", action="store_true",
                    help="with --durable: no second RabbitMQ pass under strace (no fsync count)")
    a = ap.parse_args()
    for opt in a.stack:
        k, _, v = opt.partition("=")
        STACK_OPTS[k] = eval(v, {})  # numbers, strings, tuples
    if a.quick:
        a.count, a.paced = 6_000, 200
    print(f"work queue, {MEMBERS} members on loopback, {a.size} B messages, "
          f"{a.count} for throughput + {a.paced} paced at {a.rate:.0f}/s for latency")
    print(f"{'system':<34} {'mode':<15} {'msg/s':>9} {'p50 ms':>8} {'p99 ms':>8}  notes")
    rows: dict = {}
    drows: dict = {}
    for mode in ("active-passive", "active-active"):
        if a.rabbit_only:
            break
        r = run_raygroups(mode, a.count, a.paced, a.rate, a.size, a.batch, a.window, a.uvloop)
        rows[mode] = r
        print(f"{'raygroups (UDP, majority acks)':<34} {mode:<15} {r['rate']:>9,.0f} "
              f"{r['p50']:>8.2f} {r['p99']:>8.2f}  accepted per member {r['per_member']}, "
              f"{r['owner_moves']} ownership moves", flush=True)
        if not a.durable:
            continue
        r = run_raygroups(mode, a.count, a.paced, a.rate, a.size, a.batch, a.window, a.uvloop,
                          durable=True)
        drows[mode] = r
        print(f"{'raygroups durable (fdatasync)':<34} {mode:<15} {r['rate']:>9,.0f} "
              f"{r['p50']:>8.2f} {r['p99']:>8.2f}  accepted per member {r['per_member']}, "
              f"{r['owner_moves']} ownership moves, fsyncs/msg "
              f"{fmt_syncs(r['fsync_per_msg'])} (paced {fmt_syncs(r['fsync_per_paced'])})",
              flush=True)
    if a.no_rabbit:
        print("RabbitMQ: skipped (--no-rabbit)")
        return
    missing = rabbit_available()
    if missing:
        print(f"RabbitMQ not installed: skipped ({missing} missing)")
        return
    rabbit: dict = {}

    def show(mode: str, r: dict, name: str) -> None:
        rabbit[mode] = r
        print(f"{name:<34} {mode:<15} {r['rate']:>9,.0f} "
              f"{r['p50']:>8.2f} {r['p99']:>8.2f}", flush=True)
        mine = rows.get(mode)
        if mine is None:
            return
        print(f"  ratio raygroups / RabbitMQ, {mode}: throughput "
              f"{mine['rate'] / r['rate']:.2f}x, p50 latency {mine['p50'] / r['p50']:.2f}x",
              flush=True)
        if mode in drows:
            judged = ", ".join(f"{what} {'n/a' if x is None else f'{x:.2f}x'} ({tgt}: {v})"
                               for what, x, tgt, v in durable_verdicts(drows[mode], r))
            print(f"  ratio raygroups durable / RabbitMQ, {mode}: {judged}", flush=True)

    run_rabbit_pass(a, show)
    if not a.durable:
        return
    syncs = {}
    if shutil.which("strace") is None or a.no_strace:
        method = "not counted (strace missing or --no-strace)"
    else:
        # a second pass, its nodes under strace, only to count: strace stops a node at each
        # fsync and waits for the CPU (on this 2-core machine RabbitMQ's figures halved)
        method = "the nodes' fsync+fdatasync calls, strace'd in a second pass of the same runs"
        print("(RabbitMQ again, nodes under strace, to count its fsyncs)", flush=True)
        run_rabbit_pass(a, lambda mode, r, _n: syncs.__setitem__(mode, r["syncs"]), trace=True)
    print("fsyncs per message (throughput run; paced run): raygroups = the members' journal "
          f"fsyncs summed; RabbitMQ = {method}")
    for mode in ("active-passive", "active-active"):
        d = drows.get(mode)
        ours = f"{fmt_syncs(d['fsync_per_msg'])}; {fmt_syncs(d['fsync_per_paced'])}" \
            if d else "n/a"
        theirs = "n/a"
        if mode in syncs:
            bulk, paced = syncs[mode]
            theirs = (f"{fmt_syncs(per_message(bulk, a.count))}; "
                      f"{fmt_syncs(per_message(paced, a.paced))}")
        print(f"  {mode}: raygroups durable {ours}, RabbitMQ {theirs}", flush=True)


def run_rabbit_pass(a, show, trace: bool = False) -> None:
    """A RabbitMQ cluster, both modes; ``show(mode, result, name)`` for each (``trace``:
    the nodes under strace, result["syncs"] = their fsyncs in the throughput and the paced
    run)."""
    cluster = RabbitCluster(MEMBERS, trace=trace)
    done = []
    try:
        t0 = time.monotonic()
        cluster.start()
        version = cluster.ctl(0, "version").strip()
        if not trace:
            print(f"(RabbitMQ {version} {MEMBERS}-node cluster up in "
                  f"{time.monotonic() - t0:.1f}s)", flush=True)
        for mode in ("active-passive", "active-active"):
            r = run_rabbit(cluster, mode, a.count, a.paced, a.rate, a.size, a.batch * a.window,
                           a.prefetch)
            done.append((mode, r))
            if not trace:
                show(mode, r, f"RabbitMQ {version} quorum queues")
    except Exception as e:
        print(f"RabbitMQ run failed: {type(e).__name__}: {e}")
    finally:
        cluster.stop(keep=True)
    try:
        if trace:
            for mode, r in done:
                r["syncs"] = cluster.syncs(r["windows"])
                show(mode, r, "")
    finally:
        cluster.remove()

if __name__ == "__main__":
    main()
