"""One group member as a process, for network labs (tests/netns.py).

    python -m tests.member_proc --cluster C --name N --bind 10.213.x.y --port P \
        [--hosts h1:p1,h2:p2,...] [--transport udp|tcp] [--no-ip-mcast] \
        [--preset local|lan|wan] [--mcast-port M] [--membership views|gossip] \
        [--expected N] [--discovery URL] [--tie-breaker none|store] [--no-fd-sock] [--faults] \
        [--drop-up P] [--drop-down P] [--queue] [--arbitrator] [--journal DIR] [--log]

Connects a Channel (static discovery with --hosts, store discovery with --discovery, IP
multicast discovery without either) and prints one JSON line per event on stdout, flushed:

    {"event": "view", "view_id": [coord_name, id], "members": [names...], "merge": bool,
     "primary": bool, "primary_id": int, "t": time.time()}
    {"event": "msg", "from": name, "payload": text, "t": ...}
    {"event": "sent", "payload": text, "t": ...}     (a ``send`` returned)
    {"event": "send_error", "payload": text, "error": "NotPrimary: ...", "t": ...}
    {"event": "left", "t": ...}                      (after "leave", or stdin closed)
    {"event": "error", "error": "...", "t": ...}     (join failed; exit status 1)
    {"event": "stats", "stats": {...}, "t": ...}    (after ``stats``)
    {"event": "ok", "cmd": "cut", "cut": [names], "t": ...}   (after ``cut``; ``heal`` too)
    {"event": "published", "queue": q, "payload": text, "id": [publisher hex, seq], "t": ...}
    {"event": "queue_error", "cmd": "publish", "queue": q, "payload": text,
     "type": "QueueNotPrimary", "error": "QueueNotPrimary: ...", "t": ...}
    {"event": "drained", "queue": q, "payloads": [text, ...], "t": ...}
    {"event": "accepting", "queue": q, "payload": text, "t": ...}   (``consume``: before
                                                     the accept; then "accepted" once done)
    {"event": "accepted", "queue": q, "payload": text, "t": ...}
    {"event": "consumed", "queue": q, "n": n, "t": ...}      (``consume`` finished)
    {"event": "info", "phase": ..., "epoch": n, "applied": n, "digest": hex,
     "depths": {queue: depth}, "t": ...}

Commands on stdin, one a line: ``send <text>`` (multicast to the view; in the background,
so a send that waits for a primary component does not hold up other commands), ``leave``,
``stats`` (print ``channel.stats()``), ``reset-watchers`` (reset the FD_SOCK connections
of the members watching this one, as a middlebox would, while it stays up), and with the
fault layer (``--faults``, or any ``--drop-*``): ``cut <name>,<name>,...`` (drop everything
received from those members, as ``Faults.drop_from``; names of members seen in a view or
by discovery so far) and ``heal``. With the work queue service on the channel (``--queue``,
``QueueChannel``; ``--arbitrator``: the member is the queue's arbitrator, Galera's garbd,
which votes and holds no queue): ``publish <queue> <text>`` (creates the queue first if this
process has not; in the background, up to ``--call-timeout`` s), ``drain <queue>`` (acquire
and accept until nothing comes for a second) and ``info`` (the replica's phase, epoch,
digest of the whole queue state, and each queue's depth), ``consume <queue> <n>`` (acquire
up to n within half a second and accept each, saying so before and after every accept). A
queue call that fails prints ``queue_error`` with the error's type. ``--journal DIR``: the
member's queues are durable, journaled in DIR (``QueueChannel(journal_dir=...)``), and
recovered from it when the member starts on it again.
``--preset`` picks the timer preset (``StackConfig.local`` by default, ``lan`` for the LAN
defaults); ``--bind`` and ``--port`` override its address either way.
Run with the repository root as the working directory (``python -m``).

``LoopbackMembers`` (below) starts such processes on 127.0.0.1 for tests and benchmarks.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional, Sequence

from raygroups.stack import Channel, StackConfig, ViewChange
from raygroups.stack.runtime.workqueue import QueueChannel
from raygroups.stack.workqueue import AcquireTimeout, WorkQueueConfig
from raygroups.stack.view import MergeView


def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields, "t": time.time()}) + "\n")
    sys.stdout.flush()


def parse_hosts(spec: str) -> list[tuple[str, int]]:
    out = []
    for item in filter(None, spec.split(",")):
        host, _, port = item.rpartition(":")
        out.append((host, int(port)))
    return out


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LoopbackMembers:
    """``n`` member processes (``m0`` .. ``m<n-1>``) on 127.0.0.1, static discovery over
    fixed free ports, each its own ``python -m tests.member_proc`` with stdout/stderr in
    files under ``logdir``. ``close()`` SIGKILLs whatever still runs (also stopped ones);
    use it as a context manager so a failing test never leaves processes behind.

        with LoopbackMembers(5, "c1", extra=["--preset", "lan"]) as g:
            g.start()
            g.wait_all(lambda v: len(v["members"]) == 5)
            g.signal(2, signal.SIGKILL)
    """

    def __init__(self, n: int, cluster: str, extra: Sequence[str] = (),
                 ports: Optional[list] = None, mcast_port: Optional[int] = None,
                 keep_logs: bool = False):
        from raygroups.stack.runtime.ports import free_port, free_ports
        self.n, self.cluster, self.extra = n, cluster, list(extra)
        self.ports = ports or free_ports(n)
        self.mcast_port = mcast_port or free_port()
        self.names = [f"m{i}" for i in range(n)]
        self.logdir = tempfile.mkdtemp(prefix=f"rg-{cluster}-")
        self.keep_logs = keep_logs
        self.procs: list = [None] * n
        self.all_procs: list = []
        self._seq = 0
        self._lines: dict = {}   # proc -> (offset, [events])

    def __enter__(self) -> "LoopbackMembers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def argv(self, i: int) -> list:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        return [sys.executable, "-m", "tests.member_proc", "--cluster", self.cluster,
                "--name", self.names[i], "--bind", "127.0.0.1", "--port", str(self.ports[i]),
                "--hosts", hosts, "--mcast-port", str(self.mcast_port), *self.extra]

    def spawn(self, i: int, extra: Sequence[str] = ()) -> subprocess.Popen:
        """Start member i (again: a fresh process, hence a fresh address)."""
        self._seq += 1
        base = os.path.join(self.logdir, f"{self._seq:03d}-{self.names[i]}")
        with open(base + ".out", "wb") as out, open(base + ".err", "wb") as err:
            p = subprocess.Popen(self.argv(i) + list(extra), cwd=REPO, stdin=subprocess.PIPE,
                                 stdout=out, stderr=err, text=True, bufsize=1,
                                 start_new_session=True)
        p.out_path, p.err_path = base + ".out", base + ".err"  # type: ignore[attr-defined]
        self.procs[i] = p
        self.all_procs.append(p)
        return p

    def start(self, stagger: float = 0.3) -> None:
        """Start every member, ``stagger`` seconds apart (m0 founds the group)."""
        for i in range(self.n):
            self.spawn(i)
            time.sleep(stagger)

    # -- output -----------------------------------------------------------------------
    def events(self, i: int, kind: Optional[str] = None) -> list:
        """Member i's JSON lines so far (its current process), optionally of one kind."""
        p = self.procs[i]
        off, evs = self._lines.get(p, (0, []))
        with open(p.out_path, "rb") as f:
            f.seek(off)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a partly written last line waits for the next call
        for line in data[:end].splitlines():
            if line.startswith(b"{"):
                evs.append(json.loads(line))
        self._lines[p] = (off + end, evs)
        return [e for e in evs if kind is None or e["event"] == kind]

    def views(self, i: int) -> list:
        return self.events(i, "view")

    def last_view(self, i: int) -> Optional[dict]:
        v = self.views(i)
        return v[-1] if v else None

    def wait(self, cond: Callable[[], bool], timeout: float, what: str = "condition",
             live: Optional[Sequence[int]] = None, poll: float = 0.02) -> float:
        """Poll ``cond`` until true; returns time.time() when it was first seen. Raises
        TimeoutError (with every member's log) after ``timeout`` s, or at once when a
        member of ``live`` (default: none) exited."""
        deadline = time.monotonic() + timeout
        while True:
            if cond():
                return time.time()
            dead = [i for i in (live or ()) if self.procs[i].poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"members {dead} exited" if dead else f"no {what} within {timeout} s"
                raise TimeoutError(f"{why}\n{self.logs()}")
            time.sleep(poll)

    def wait_all(self, pred: Callable[[dict], bool], members: Optional[Sequence[int]] = None,
                 timeout: float = 30.0, same: bool = True, what: str = "view") -> list:
        """Wait until the last view of every listed member satisfies ``pred`` (and, with
        ``same``, all have the same view id); returns those views."""
        idx = list(range(self.n)) if members is None else list(members)

        def ok() -> bool:
            last = [self.last_view(i) for i in idx]
            if any(v is None or not pred(v) for v in last):
                return False
            return not same or len({tuple(v["view_id"]) for v in last}) == 1
        self.wait(ok, timeout, what, live=idx)
        return [self.last_view(i) for i in idx]

    def logs(self) -> str:
        out = []
        for p in self.all_procs:
            for path in (p.out_path, p.err_path):
                try:
                    with open(path, errors="replace") as f:
                        text = f.read()
                except OSError:
                    text = "(missing)"
                out.append(f"--- {path} (exit {p.poll()})\n{text[-6000:]}")
        return "\n".join(out)

    def stats(self, members: Sequence[int], timeout: float = 30.0) -> dict:
        """{i: channel.stats()} of each listed member, asked through its stdin."""
        before = {i: len(self.events(i, "stats")) for i in members}
        for i in members:
            self.command(i, "stats")
        self.wait(lambda: all(len(self.events(i, "stats")) > before[i] for i in members),
                  timeout, "stats", live=members)
        return {i: self.events(i, "stats")[-1]["stats"] for i in members}

    # -- control ----------------------------------------------------------------------
    def command(self, i: int, line: str) -> None:
        p = self.procs[i]
        p.stdin.write(line + "\n")
        p.stdin.flush()

    def signal(self, i: int, sig: int) -> float:
        """Send ``sig`` to member i's process; returns time.time() just before."""
        t = time.time()
        os.kill(self.procs[i].pid, sig)
        if sig == signal.SIGKILL:
            self.procs[i].wait(10)
        return t

    def close(self) -> None:
        """SIGKILL every process still running (stopped ones too). Idempotent."""
        for p in self.all_procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            if p.stdin is not None:
                try:
                    p.stdin.close()
                except OSError:
                    pass
        if not self.keep_logs:
            shutil.rmtree(self.logdir, ignore_errors=True)


def reset_watchers(ch: Channel) -> int:
    """Reset (RST, as a middlebox would) the FD_SOCK connections our watchers opened to us,
    while this member stays up; returns how many."""
    watch = ch.runtime.watch
    hit = list(watch.accepted) if watch is not None else []
    for t in hit:
        t.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                              struct.pack("ii", 1, 0))
        t.abort()
    return len(hit)


async def main(args: argparse.Namespace) -> int:
    options = dict(bind_addr=args.bind, port=args.port)
    if args.hosts:
        options["initial_hosts"] = parse_hosts(args.hosts)
    if args.no_ip_mcast:
        options["transport__ip_multicast"] = False
    if args.mcast_port:
        options["mcast_port"] = args.mcast_port
    if args.membership:
        options["membership"] = args.membership
    if args.expected:
        options["primary__expected_size"] = args.expected
    if args.discovery:
        options["discovery"] = args.discovery
    if args.tie_breaker:
        options["primary__tie_breaker"] = args.tie_breaker
    if args.no_fd_sock:
        options["fd_sock__enabled"] = False
    if args.faults or args.drop_up or args.drop_down:
        options["faults__drop_up"] = args.drop_up
        options["faults__drop_down"] = args.drop_down
    preset = getattr(StackConfig, args.preset)
    config = preset(args.transport, **options)
    if args.queue or args.arbitrator or args.journal:
        ch = QueueChannel(args.cluster, name=args.name, config=config,
                          queue_config=WorkQueueConfig(arbitrator=args.arbitrator),
                          journal_dir=args.journal or None)
    else:
        ch = Channel(args.cluster, name=args.name, config=config)
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
                     members=[m.name for m in v.members], merge=isinstance(v, MergeView),
                     primary=v.primary, primary_id=v.primary_id)
            else:
                p = ev.payload
                emit("msg", **{"from": ev.sender.name if ev.sender else None,
                               "payload": p.decode(errors="replace")
                               if isinstance(p, (bytes, bytearray)) else repr(p)})

    async def send(text: str) -> None:
        try:
            await ch.send(text.encode())
        except Exception as e:  # NotPrimary after its timeout, ChannelClosed
            emit("send_error", payload=text, error=f"{type(e).__name__}: {e}")
        else:
            emit("sent", payload=text)

    queues: dict = {}  # name -> WorkQueue, once created through this process

    async def queue_call(cmd: str, name: str, payload: str = "") -> None:
        try:
            q = queues.get(name)
            if q is None:
                q = queues[name] = await asyncio.wait_for(ch.queue(name), args.call_timeout)
            if cmd == "publish":
                mid = await asyncio.wait_for(q.publish(payload.encode()), args.call_timeout)
                emit("published", queue=name, payload=payload, id=[mid[0].hex(), mid[1]])
            elif cmd == "consume":
                got = await q.acquire_many(int(payload or 1), timeout=0.5)
                for d in got:
                    body = d.body.decode(errors="replace")
                    emit("accepting", queue=name, payload=body)
                    await asyncio.wait_for(d.accept(), args.call_timeout)
                    emit("accepted", queue=name, payload=body)
                emit("consumed", queue=name, n=len(got))
            else:  # drain
                got = []
                while True:
                    try:
                        d = await q.acquire(timeout=1.0)
                    except AcquireTimeout:
                        break
                    await asyncio.wait_for(d.accept(), args.call_timeout)
                    got.append(d.body.decode(errors="replace"))
                emit("drained", queue=name, payloads=got)
        except Exception as e:  # typed queue errors (QueueNotPrimary, ...), TimeoutError
            emit("queue_error", cmd=cmd, queue=name, payload=payload, type=type(e).__name__,
                 error=f"{type(e).__name__}: {e}")

    def queue_info() -> None:
        info = ch.queues.info()
        emit("info", phase=info["phase"], epoch=info["epoch"], applied=info["applied"],
             digest=info["digest"], depths={n: q["depth"] for n, q in info["queues"].items()})

    events = asyncio.create_task(pump())
    sends: set = set()
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
            task = asyncio.create_task(send(rest))
            sends.add(task)
            task.add_done_callback(sends.discard)
        elif cmd in ("publish", "drain", "consume") and isinstance(ch, QueueChannel):
            name, _, text = rest.partition(" ")
            task = asyncio.create_task(queue_call(cmd, name, text))
            sends.add(task)
            task.add_done_callback(sends.discard)
        elif cmd == "info" and isinstance(ch, QueueChannel):
            queue_info()
        elif cmd == "stats":
            emit("stats", stats=ch.stats())
        elif cmd == "reset-watchers":
            emit("ok", cmd=cmd, reset=reset_watchers(ch))
        elif cmd in ("cut", "heal"):
            try:
                faults = ch.stack.layer("faults")
            except KeyError:
                emit("error", error="no fault layer: start with --faults")
                continue
            if cmd == "cut":
                names = set(filter(None, rest.split(",")))
                addrs = [a for a in ch.stack.ctx.book._by_uid.values() if a.name in names]
                faults.drop_from(*addrs)
                emit("ok", cmd=cmd, cut=sorted(a.name for a in addrs))
            else:
                faults.heal()
                emit("ok", cmd=cmd)
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
    ap.add_argument("--preset", choices=("local", "lan", "wan"), default="local",
                    help="timer preset (StackConfig.local/lan/wan)")
    ap.add_argument("--mcast-port", type=int, default=0, help="IP multicast group port")
    ap.add_argument("--membership", choices=("views", "gossip"), default=None)
    ap.add_argument("--expected", type=int, default=0,
                    help="primary__expected_size: members the first primary needs a majority of")
    ap.add_argument("--discovery", default="", help="discovery store URL (file:///dir, ...)")
    ap.add_argument("--tie-breaker", choices=("none", "store"), default=None,
                    help="primary__tie_breaker (an even split's lease in the discovery store)")
    ap.add_argument("--no-fd-sock", action="store_true",
                    help="fd_sock__enabled=False: SWIM's timers alone detect crashes")
    ap.add_argument("--faults", action="store_true",
                    help="insert the fault layer (for cut/heal on stdin)")
    ap.add_argument("--drop-up", type=float, default=0.0, help="fault layer: drop received")
    ap.add_argument("--drop-down", type=float, default=0.0, help="fault layer: drop sent")
    ap.add_argument("--queue", action="store_true",
                    help="the work queue service on the channel (publish/drain/info)")
    ap.add_argument("--arbitrator", action="store_true",
                    help="with the work queue: this member is its arbitrator (votes, no queue)")
    ap.add_argument("--journal", default="", metavar="DIR",
                    help="durable queues: this member journals them in DIR (implies --queue)")
    ap.add_argument("--call-timeout", type=float, default=20.0,
                    help="seconds a queue call may take before queue_error TimeoutError")
    ap.add_argument("--log", action="store_true", help="stack log (INFO) on stderr")
    parsed = ap.parse_args()
    if parsed.log:
        import logging
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(created).3f %(name)s %(message)s")
    sys.exit(asyncio.run(main(parsed)))
