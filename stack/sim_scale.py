"""Scale figures from the deterministic simulator: how gossip dissemination, per-member
traffic, crash detection, a join storm and memory behave at N members (the gossip design's figures).

    from raygroups.stack.sim_scale import simulate
    simulate(1000, "gossip", seed=1)   # -> dict of figures, simulated seconds unless "wall"

    python -m raygroups.stack.sim_scale --members 1000 --membership gossip [--seed 1] [--json]

The run, all from one seed, with the ``preset`` timers (LAN by default: a SWIM round, the
probe interval, is 0.2 s):

1. Formation: three seed members start and agree, then the others start every
   ``join_interval_s``, each pinging the seeds (static discovery, like Serf's -join), until
   every member has the whole group (gossip: its own list holds all N; views: all installed
   the same view of N). Memory per member is the process's RSS growth (or, with
   ``memory="tracemalloc"``, the Python allocations) divided by N.
2. Steady traffic: ``traffic_rounds`` rounds with nothing happening; datagrams sent and
   received per member per round (an IP multicast counts once sent and once per receiver).
3. Rumors: ``rumors`` rumors, one started each round at a random member (an ALIVE about
   itself with a new incarnation, spread only by gossip: piggybacked on probes and acks and
   ``swim.gossip_fanout`` extra messages per round). For each: the rounds until every live
   member had it, ``ceil(elapsed / probe interval)``, against the gossip design's log2(2N)+1 bound;
   and the traffic per member per round while they spread.
4. Crash: one member (not a seed) crashes; detection is when a survivor's list or view first
   excludes it (first, median, last survivor), convergence when all agree again.
5. Join storm: ``storm`` new members start within ``storm_window_s``; the time until all
   N - 1 + storm members have the whole group again.
6. Partition and heal (``partition_s`` > 0): the live members split at random into two
   halves that hear nothing of each other for ``partition_s`` simulated seconds (long enough
   for each half to drop the other: gossip mode buries it, views mode installs two views);
   then the network heals, and ``heal_converge_s`` is the time until every member has the
   whole group again (views mode: one view), through gossip mode's reconnection of the dead
   (swim_reconnect.py) or views mode's MERGE.

Nothing here is timed in wall-clock terms except the ``wall_*`` figures and the ``cpu_*``
figures (CPU seconds of this process: the wall time an idle core would take).
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import statistics
import sys
import time
from typing import Callable, Optional

from .config import StackConfig
from .sim import SimMember, Simulation, SimOptions, collector_paused
from .swim import ALIVE

PRESETS = {"local": StackConfig.local, "lan": StackConfig.lan, "wan": StackConfig.wan}
SEEDS = 3
STEP_S = 0.01  # resolution of measured times (simulated seconds)


def sim_phys(i: int) -> tuple:
    """The physical address the simulator gives member ``i`` (``SimMember.local_phys``)."""
    return (f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}", 7800)


def rumor_bound(n: int) -> int:
    """Seed 004: a rumor travels log2(2N)+1 rounds (the lifetime SWIM gives it)."""
    return int(math.log2(2 * n)) + 1


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; else the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _pct(xs: list, q: float) -> Optional[float]:
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


class _Counter:
    """Counts datagrams sent (one per emit, an IP multicast once) and copies delivered,
    by wrapping the simulation's ``_transmit``."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.sent = 0
        orig = sim._transmit

        def transmit(src, dest, data) -> None:
            self.sent += 1
            orig(src, dest, data)
        sim._transmit = transmit

    def mark(self) -> tuple:
        return self.sent, self.sim.packets - self.sim.dropped


class _Rumors:
    """First arrival of watched rumors at every member (wraps each Swim's ``_apply``, from
    the first watched rumor on: until then the wrapper would only cost a call per rumor)."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.watched: dict = {}  # (kind, uid, inc) -> {member index: simulated time}
        self.members: list = []  # members added so far
        self.hooked = False

    def add(self, m: SimMember) -> None:
        self.members.append(m)
        if self.hooked:
            self.hook(m)

    def hook(self, m: SimMember) -> None:
        swim = m.stack.layer("swim")
        orig, watched, sim, idx = swim._apply, self.watched, self.sim, m.index

        def _apply(rumor, own: bool = False, sender=None):
            seen = None if own else watched.get((rumor[0], rumor[1], rumor[2]))
            if seen is not None and idx not in seen:
                seen[idx] = sim.now
            return orig(rumor, own, sender)
        swim._apply = _apply

    def unhook(self) -> None:
        """Stop watching (the rumor phase is over): each rumor applied later would
        otherwise still cost a call of the wrapper."""
        if self.hooked:
            self.hooked = False
            for m in self.members:
                m.stack.layer("swim").__dict__.pop("_apply", None)

    def start(self, m: SimMember) -> tuple:
        """An ALIVE rumor about ``m`` with a new incarnation, spread by gossip only."""
        if not self.hooked:
            self.hooked = True
            for other in self.members:
                if other.alive:
                    self.hook(other)
        swim = m.stack.layer("swim")
        swim.inc += 1
        key = (ALIVE, m.address.uid, swim.inc)
        self.watched[key] = {}
        rumor = swim._self_rumor()
        rounds = rumor[4]
        swim._originate(rumor)
        # news about ourselves is not queued by _apply (a refutation goes out by multicast):
        # queue it as a member does a rumor it received, so that gossip alone carries it
        swim.queue[(ALIVE, m.address.uid, swim.inc, None)] = [list(rumor), rounds - 1, 0, 0]
        return key


class _Runner:
    def __init__(self, sim: Simulation, members: list, membership: str,
                 say: Callable[[str], None], timeout_s: float):
        self.sim, self.members, self.membership = sim, members, membership
        self.say, self.timeout_s = say, timeout_s
        self.wall0 = time.monotonic()
        self.cpu0 = time.process_time()
        self._ok: dict = {}  # member index -> (view object, agreed with the target?)

    def wall(self) -> float:
        return time.monotonic() - self.wall0

    def cpu(self) -> float:
        """CPU seconds this process spent since the start (what the wall time would be on
        an idle core: on a loaded machine the wall time says more about the load)."""
        return time.process_time() - self.cpu0

    def until(self, pred: Callable[[], bool], what: str, step: float = STEP_S) -> float:
        sim, start = self.sim, self.sim.now
        report = self.wall() + 10.0
        while not pred():
            if sim.now - start > self.timeout_s:
                raise TimeoutError(f"{what}: not within {self.timeout_s} s simulated "
                                   f"(seed {sim.seed})")
            sim.run_for(step)
            if self.wall() > report:
                report = self.wall() + 10.0
                self.say(f"    ... {what}: {sim.now - start:.2f} s simulated, "
                         f"{self.wall():.0f} s wall")
        return sim.now - start

    def run_for(self, seconds: float, what: str) -> None:
        """``sim.run_for(seconds)``, saying how far it got every 10 s of wall time."""
        sim = self.sim
        end, report = sim.now + seconds, self.wall() + 10.0
        while sim.now < end:
            sim.run_for(min(1.0, end - sim.now))
            if self.wall() > report:
                report = self.wall() + 10.0
                self.say(f"    ... {what}: {seconds - (end - sim.now):.0f} of {seconds:.0f} s "
                         f"simulated, {self.wall():.0f} s wall")

    def agreed(self, live: list) -> bool:
        """Every live member has exactly the live members (views mode: one view id too).
        Rechecks a member only when its view object changed."""
        want = {m.address for m in live}
        n = len(want)
        ids = set()
        for m in live:
            v = m.view
            if v is None:
                return False
            seen = self._ok.get(m.index)
            if seen is None or seen[0] is not v or seen[2] != n:
                ok = len(v.members) == n and v.member_set == want
                seen = self._ok[m.index] = (v, ok, n)
            if not seen[1]:
                return False
            if self.membership == "views":
                ids.add(v.view_id)
        return len(ids) <= 1


@collector_paused()
def simulate(members: int = 100, membership: str = "gossip", seed: int = 1,
             preset: str = "lan", rumors: int = 20, storm: int = 100, crash: bool = True,
             loss: float = 0.0, join_interval_s: float = 0.005, storm_window_s: float = 0.05,
             traffic_rounds: int = 10, memory: str = "rss", timeout_s: float = 300.0,
             partition_s: float = 0.0,
             options: Optional[dict] = None,
             progress: Optional[Callable[[str], None]] = None) -> dict:
    """Run the phases above on ``members`` simulated members; a dict of figures."""
    if members < SEEDS + 1:
        raise ValueError(f"members must be > {SEEDS}")
    say = progress or (lambda text: None)
    opts = dict(options or {})
    opts.setdefault("initial_hosts", [sim_phys(i) for i in range(SEEDS)])
    cfg = PRESETS[preset]("udp", membership=membership, **opts)
    interval = cfg.swim.probe_interval_s
    gc.collect()
    if memory == "tracemalloc":
        import tracemalloc
        tracemalloc.start()
    mem0 = rss_bytes()
    sim = Simulation(seed, SimOptions(loss=loss, history=False))
    ms: list = []
    run = _Runner(sim, ms, membership, say, timeout_s)
    counter = _Counter(sim)
    watch = _Rumors(sim)
    rng = random.Random(f"{seed}:scale")
    out: dict = {"members": members, "membership": membership, "preset": preset,
                 "seed": seed, "loss": loss, "round_s": interval}

    def add(i: int) -> SimMember:
        m = sim.add_member("scale", f"m{i}", cfg)
        watch.add(m)
        ms.append(m)
        return m

    # 1. formation ----------------------------------------------------------------------
    say(f"{members} members, membership={membership}, preset={preset}, seed={seed}")
    for i in range(SEEDS):
        add(i)
        sim.run_for(join_interval_s)
    run.until(lambda: run.agreed(ms), "seed members agree", step=0.05)
    for i in range(SEEDS, members):
        add(i)
        sim.run_for(join_interval_s)
    started = sim.now
    conv = run.until(lambda: run.agreed(ms), "formation", step=0.05)
    out["formation_s"] = round(sim.now, 3)
    sent, received = counter.mark()
    out["formation_sent_per_member"] = round(sent / members, 1)  # datagrams
    out["formation_received_per_member"] = round(received / members, 1)
    out["formation_after_last_start_s"] = round(conv, 3)
    out["wall_formation_s"] = round(run.wall(), 1)
    out["cpu_formation_s"] = round(run.cpu(), 1)
    say(f"  formed: {members} members at {sim.now:.2f} s simulated (last started at "
        f"{started:.2f} s), {run.wall():.1f} s wall")
    gc.collect()
    if memory == "tracemalloc":
        import tracemalloc
        cur, peak = tracemalloc.get_traced_memory()
        out["memory_per_member_bytes"] = round(cur / members)
        tracemalloc.stop()
    else:
        out["memory_per_member_bytes"] = round((rss_bytes() - mem0) / members)
    out["memory_how"] = memory

    # 2. steady traffic -----------------------------------------------------------------
    w0 = run.wall()
    s0, r0 = counter.mark()
    sim.run_for(traffic_rounds * interval)
    s1, r1 = counter.mark()
    live = len(ms)
    out["steady_sent_per_member_round"] = round((s1 - s0) / live / traffic_rounds, 2)
    out["steady_received_per_member_round"] = round((r1 - r0) / live / traffic_rounds, 2)
    out["wall_per_simulated_s"] = round((run.wall() - w0) / (traffic_rounds * interval), 2)

    # 3. rumors -------------------------------------------------------------------------
    if rumors:
        _rumor_phase(sim, ms, run, counter, watch, rng, members, rumors, interval, out, say)
        watch.unhook()

    # 4. crash --------------------------------------------------------------------------
    if crash:
        victim = ms[rng.randrange(SEEDS, len(ms))]
        gone = victim.address
        sim.crash(victim)
        live = [m for m in ms if m.alive]
        start = sim.now
        seen: dict = {}
        last_view: dict = {}

        def detected() -> bool:
            for m in live:
                if m.index in seen:
                    continue
                v = m.view
                if v is not last_view.get(m.index):
                    last_view[m.index] = v
                    if v is not None and gone not in v:
                        seen[m.index] = sim.now - start
            return len(seen) == len(live)
        run.until(detected, "crash detected")
        conv = run.until(lambda: run.agreed(live), "agreement after the crash")
        times = list(seen.values())
        out.update({"detect_first_s": round(min(times), 3),
                    "detect_median_s": round(statistics.median(times), 3),
                    "detect_p99_s": round(_pct(times, 0.99), 3),
                    "detect_last_s": round(max(times), 3),
                    "converge_after_crash_s": round(sim.now - start, 3),
                    "wall_crash_s": round(run.wall(), 1)})
        say(f"  crash: detected first {min(times):.2f} s, median "
            f"{statistics.median(times):.2f} s, last {max(times):.2f} s; agreed "
            f"{sim.now - start:.2f} s; {run.wall():.1f} s wall")
        ms.remove(victim)

    # 5. join storm ---------------------------------------------------------------------
    if storm:
        base = members
        start = sim.now
        offsets = sorted(rng.uniform(0, storm_window_s) for _ in range(storm))
        for k, off in enumerate(offsets):
            sim.run_for(max(0.0, start + off - sim.now))
            add(base + k)
        live = [m for m in ms if m.alive]
        run.until(lambda: run.agreed(live), "join storm converged", step=0.05)
        out.update({"storm": storm, "storm_window_s": storm_window_s,
                    "storm_converge_s": round(sim.now - start, 3),
                    "members_after_storm": len(live)})
        say(f"  join storm of {storm}: all {len(live)} agree {sim.now - start:.2f} s after "
            f"the first started; {run.wall():.1f} s wall")

    # 6. partition and heal -------------------------------------------------------------
    if partition_s:
        live = [m for m in ms if m.alive]
        half = set(rng.sample(range(len(live)), len(live) // 2))
        a = [m for k, m in enumerate(live) if k in half]
        b = [m for k, m in enumerate(live) if k not in half]
        sim.partition(a, b)
        run.run_for(partition_s, "partition")
        apart = sum(1 for m in live if m.view is not None and len(m.view) < len(live))
        sim.heal()
        start = sim.now
        run.until(lambda: run.agreed(live), "agreement after the heal", step=0.05)
        out.update({"partition_s": partition_s, "partition_sides": [len(a), len(b)],
                    "partitioned_members_apart": apart,
                    "heal_converge_s": round(sim.now - start, 3)})
        say(f"  partition of {partition_s:.0f} s into {len(a)} + {len(b)} ({apart} members "
            f"saw the other side gone): healed, all agree {sim.now - start:.2f} s later; "
            f"{run.wall():.1f} s wall")

    out.update({"simulated_s": round(sim.now, 2), "packets": sim.packets,
                "wall_s": round(run.wall(), 1), "cpu_s": round(run.cpu(), 1),
                "rss_peak_bytes": _peak_rss(),
                "errors": sum(m.stack.errors for m in ms if m.stack is not None)})
    return out


def _rumor_phase(sim, ms, run, counter, watch, rng, members, rumors, interval, out, say):
    bound = rumor_bound(members)
    keys, starts = [], {}
    s0, r0 = counter.mark()
    t_r0 = sim.now
    for k in range(rumors):
        origin = ms[rng.randrange(len(ms))]
        key = watch.start(origin)
        keys.append(key)
        starts[key] = (sim.now, origin.index)
        sim.run_for(interval)
    n_live = len(ms)

    def spread() -> bool:
        return all(len(watch.watched[k]) >= n_live - 1 for k in keys)
    try:
        run.until(spread, "rumors reach everyone", step=interval / 4)
    except TimeoutError:
        pass
    t_r1 = sim.now
    s1, r1 = counter.mark()
    rounds, missing = [], 0
    for key in keys:
        t0, origin = starts[key]
        got = watch.watched[key]
        if len(got) < n_live - 1:
            missing += 1
            continue
        last = max(got.values())
        rounds.append(math.ceil((last - t0) / interval - 1e-9))
    within = sum(1 for r in rounds if r <= bound)
    spent = (t_r1 - t_r0) / interval
    out.update({
        "rumors": rumors, "rumor_bound_rounds": bound,
        "rumor_rounds_median": statistics.median(rounds) if rounds else None,
        "rumor_rounds_max": max(rounds) if rounds else None,
        "rumor_rounds_hist": {str(r): rounds.count(r) for r in sorted(set(rounds))},
        "rumors_within_bound": within, "rumors_never_complete": missing,
        "rumor_share_within_bound": within / rumors,
        "rumor_sent_per_member_round": round((s1 - s0) / n_live / spent, 2),
        "rumor_received_per_member_round": round((r1 - r0) / n_live / spent, 2)})
    say(f"  rumors: {within}/{rumors} within {bound} rounds (median "
        f"{out['rumor_rounds_median']}, max {out['rumor_rounds_max']}), "
        f"{run.wall():.1f} s wall")
    sim.run_for(bound * interval)  # let the last ones die out


def _peak_rss() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=100)
    ap.add_argument("--membership", choices=("gossip", "views"), default="gossip")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="lan")
    ap.add_argument("--rumors", type=int, default=20)
    ap.add_argument("--storm", type=int, default=100)
    ap.add_argument("--partition", type=float, default=0.0,
                    help="simulated seconds of a partition into two halves, then the heal "
                         "(0: none)")
    ap.add_argument("--loss", type=float, default=0.0)
    ap.add_argument("--memory", choices=("rss", "tracemalloc"), default="rss")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="simulated seconds allowed per phase")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    out = simulate(args.members, args.membership, args.seed, args.preset, args.rumors,
                   args.storm, loss=args.loss, memory=args.memory, timeout_s=args.timeout,
                   partition_s=args.partition,
                   progress=lambda text: print(text, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:36} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
