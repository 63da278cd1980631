"""raygroups side of bench/compare.py: one member (or one group) per process, results as JSON
lines on stdout, the same measurements as the JGroups program (bench/java/JgBench.java).

    python bench/compare_member.py tput --cluster C --index I --members N --ports P0,P1,..
        --transport udp|tcp --size S --count K --warmup W [--loop asyncio|uvloop]
        Connect, wait for a view of N. Member 0 multicasts W messages, waits 1 s, then K
        messages of S bytes as fast as the channel takes them. Every member (the sender
        included) counts the measured ones and prints {"first_send": ns} (sender) and
        {"last_recv": ns, "received": K} with time.monotonic_ns() (CLOCK_MONOTONIC, the
        clock JGroups' System.nanoTime() reads). Throughput = K / (max last_recv - first_send).
    python bench/compare_member.py group --cluster C --members K --ports ...
        K channels in this process; {"ready": K} once the first has a view of K; keeps
        them until stdin closes.
    python bench/compare_member.py join --cluster C --ports ... --index I --trials T
        --expect N
        One discarded warm-up join, then T times: a fresh Channel on port P_I, time
        connect() (a view of N), print {"join_ns": ..}, close, 0.5 s pause.
    python bench/compare_member.py member --cluster C --index I --ports ... [--preset lan]
        [--drop-up P] [--membership views|gossip] [--wait-go]
        One member that prints {"event": "view", "members": [...], "t": time.time()} per
        view. With --wait-go it imports everything and builds the channel but opens no
        socket until "go" arrives on stdin (so a join is timed without interpreter
        start-up). "stats" prints channel.stats(); "leave" (or EOF) closes the channel.

Every process exits when its stdin closes. For profiling and experiments (tput mode):
RG_CPROFILE=path (cProfile of the measured part into path.<index>), RG_STATS=1 (print
channel.stats() and the time spent waiting for writability), RG_GC=t0,t1,t2
(gc.set_threshold), RG_OPTIONS=layer__field=value,... (extra stack options).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import sys
import time

SEQ = struct.Struct("!I")


def out(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def config(args, index: int):
    from raygroups.stack import StackConfig
    ports = [int(p) for p in args.ports.split(",")]
    options = dict(initial_hosts=[("127.0.0.1", p) for p in ports], port=ports[index],
                   bind_addr="127.0.0.1")
    if args.mcast_port:
        options["mcast_port"] = args.mcast_port
    if getattr(args, "drop_up", 0):
        options["faults__drop_up"] = args.drop_up
    if getattr(args, "membership", None):
        options["membership"] = args.membership
    for item in filter(None, os.environ.get("RG_OPTIONS", "").split(",")):
        key, _, value = item.partition("=")  # experiments: RG_OPTIONS=layer__field=value,..
        kind = type(getattr(getattr(StackConfig(), key.split("__")[0]), key.split("__")[1]))
        options[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    preset = getattr(StackConfig, getattr(args, "preset", "local") or "local")
    return preset(args.transport, **options)


async def stdin_closed() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.readline():
        pass


async def stdin_lines():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            return
        yield line.decode().strip()


async def wait_view(ch, n: int, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while ch.view is None or len(ch.view) < n:
        if time.monotonic() > end:
            raise TimeoutError(f"no view of {n} members: {ch.view}")
        await asyncio.sleep(0.005)


# -- throughput ------------------------------------------------------------------------
async def tput(args) -> None:
    from raygroups.stack import Channel
    ch = Channel(args.cluster, name=f"m{args.index}", config=config(args, args.index))
    await ch.connect(timeout=30)
    await wait_view(ch, args.members)
    out(joined=len(ch.view))
    size, count, warmup = args.size, args.count, args.warmup
    pad = b"x" * (size - SEQ.size)
    done = asyncio.get_running_loop().create_future()
    state = {"got": 0, "last": 0, "cpu0": None}

    async def receiver() -> None:
        got = 0
        unpack = SEQ.unpack_from
        while got < count:
            for m in await ch.receive_many(timeout=args.timeout):
                if unpack(m.payload)[0] >= warmup:
                    if got == 0 and state["cpu0"] is None:
                        state["cpu0"] = time.process_time()
                    got += 1
            state["got"] = got
        state["last"] = time.monotonic_ns()
        state["got"] = got
        state["cpu"] = time.process_time() - state["cpu0"]
        done.set_result(None)

    prof = _profiler()
    rx = asyncio.create_task(receiver())
    waited = [0.0, 0]
    if os.environ.get("RG_STATS"):  # experiments: time spent waiting for writability
        orig_wait = ch._wait_writable

        async def timed_wait():
            t = time.perf_counter()
            await orig_wait()
            waited[0] += time.perf_counter() - t
            waited[1] += 1
        ch._wait_writable = timed_wait
    if args.index == 0:
        await asyncio.sleep(0.5)  # let every member install the full view
        pack = SEQ.pack
        await _send_range(ch, 0, warmup, pack, pad)
        await asyncio.sleep(1.0)
        if prof is not None:
            prof.enable()
        state["cpu0"] = time.process_time()
        first = time.monotonic_ns()
        await _send_range(ch, warmup, warmup + count, pack, pad)
        out(first_send=first, send_done=time.monotonic_ns())
    try:
        if prof is not None and args.index != 0:
            prof.enable()  # receivers: from the end of the warm-up on
        await asyncio.wait_for(done, args.timeout)
        if prof is not None:
            prof.disable()
            prof.dump_stats(f"{os.environ['RG_CPROFILE']}.{args.index}")
        out(last_recv=state["last"], received=state["got"], cpu_s=round(state["cpu"], 3),
            retransmitted=ch.stats().get("nakack", {}).get("retransmitted", 0))
        if os.environ.get("RG_STATS"):
            out(stats=ch.stats(), waited_s=waited[0], waits=waited[1],
                blocked=sorted(ch.stack.blocked))
    except asyncio.TimeoutError:
        rx.cancel()
        out(error=f"received {state['got']} of {count} in {args.timeout:.0f} s; "
                  f"view {ch.view}")
    await stdin_closed()


def _profiler():
    """RG_CPROFILE=path: cProfile the measured part into path.<index> (for profiling)."""
    if not os.environ.get("RG_CPROFILE"):
        return None
    import cProfile
    return cProfile.Profile()


async def _send_range(ch, start: int, end: int, pack, pad: bytes) -> None:
    batch = 256
    for s in range(start, end, batch):
        await ch.send_many([pack(k) + pad for k in range(s, min(end, s + batch))])
        await asyncio.sleep(0)


# -- join --------------------------------------------------------------------------------
async def group(args) -> None:
    from raygroups.stack import Channel
    chans = []
    for i in range(args.members):
        c = Channel(args.cluster, name=f"m{i}", config=config(args, i))
        await c.connect(timeout=30)
        chans.append(c)
    await wait_view(chans[0], args.members)
    out(ready=args.members)
    await stdin_closed()


async def join(args) -> None:
    from raygroups.stack import Channel
    for t in range(-1, args.trials):
        c = Channel(args.cluster, name=f"j{t + 1}", config=config(args, args.index))
        t0 = time.perf_counter_ns()
        view = await c.connect(timeout=30)
        dt = time.perf_counter_ns() - t0
        if t >= 0:
            out(join_ns=dt, view=len(view))
        if len(view) != args.expect:
            out(error=f"joined a view of {len(view)}, expected {args.expect}")
        await c.close()
        await asyncio.sleep(0.5)
    out(done=True)
    await stdin_closed()


# -- a member that reports its views ---------------------------------------------------
async def member(args) -> None:
    from raygroups.stack import Channel, ViewChange
    lines = stdin_lines()
    ch = Channel(args.cluster, name=args.name or f"m{args.index}", config=config(args, args.index))
    if args.wait_go:  # everything imported and built; no socket yet
        out(event="ready", t=time.time())
        async for line in lines:
            if line == "go":
                break
        else:
            return
    try:
        await ch.connect(timeout=30)
    except Exception as e:  # JoinTimeout, OSError
        out(event="error", error=f"{type(e).__name__}: {e}", t=time.time())
        return

    async def pump() -> None:
        async for ev in ch.events():
            if isinstance(ev, ViewChange):
                v = ev.view
                out(event="view", view_id=[v.view_id.coord.name, v.view_id.id],
                    members=[m.name for m in v.members], t=time.time())
    task = asyncio.create_task(pump())
    async for line in lines:
        if line == "stats":
            out(event="stats", stats=ch.stats(), t=time.time())
        elif line == "leave":
            break
    await ch.close()
    task.cancel()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("tput", "group", "join", "member"))
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--ports", required=True, help="comma list: member i binds the i-th")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--name")
    ap.add_argument("--members", type=int, default=1)
    ap.add_argument("--transport", choices=("udp", "tcp"), default="udp")
    ap.add_argument("--mcast-port", type=int, default=0)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300.0, help="tput: give up after this")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--expect", type=int, default=2)
    ap.add_argument("--preset", choices=("local", "lan", "wan"), default="local")
    ap.add_argument("--drop-up", type=float, default=0.0)
    ap.add_argument("--membership", choices=("views", "gossip"))
    ap.add_argument("--wait-go", action="store_true")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    args = ap.parse_args(argv)
    if args.loop == "uvloop":
        import uvloop
        uvloop.install()
    if os.environ.get("RG_GC"):  # experiments: RG_GC=t0,t1,t2 (gc.set_threshold)
        import gc
        gc.set_threshold(*map(int, os.environ["RG_GC"].split(",")))
    run({"tput": tput, "group": group, "join": join, "member": member}[args.mode], args)


def run(fn, args) -> None:
    """``asyncio.run(fn(args))``; an error is printed as {"error": ...} and exits 1."""
    try:
        asyncio.run(fn(args))
    except Exception as e:
        out(error=f"{type(e).__name__}: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
