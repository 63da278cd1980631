"""``raygroups simulate``: run a stack configuration in the deterministic simulator at N
members and measure joins, failure detection and convergence, in simulated seconds.

The run: members join one every ``join_interval_s``; the group converges (views mode: every
member installed the same view of N; gossip mode: every member's list holds all N); then
``crash`` members crash at once; detection is when a member's view first excludes every
crashed member (first member, median, last) and convergence when every survivor's does (and,
in views mode, all agree on one view again).

A phase that stops making progress for ``stall_s`` simulated seconds ends there and the
figures say so (``join_complete`` < members: that many members had the whole list; the
``*_s`` figure of a phase that did not finish is None), rather than running to the timeout.

Discovery is static by default: three seed members start first and agree, then every joiner
pings them (like Serf's or Cassandra's seeds; in the simulator an IP multicast ping reaches
all N, which makes joins cost O(N^2) packets); ``discovery="multicast"`` uses PING over
multicast instead. Everything comes from ``seed``.

No Ray here: the same Stack objects on a virtual clock and network (``raygroups.stack.sim``).
"""
from __future__ import annotations

import random
import statistics
import time
from typing import Callable, Optional

from raygroups.stack import StackConfig
from raygroups.stack.sim import Simulation, SimOptions, collector_paused

PRESETS = {"local": StackConfig.local, "lan": StackConfig.lan, "wan": StackConfig.wan}
CHECK_S = 0.01  # resolution of the measured times (simulated seconds)
SEEDS = 3  # static discovery: the members every joiner pings, started (and agreed) first


def sim_phys(i: int) -> tuple:
    """The physical address the simulator gives member ``i``."""
    return (f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}", 7800)


def make_config(membership: str = "views", preset: str = "local", transport: str = "udp",
                discovery: str = "static", options: Optional[dict] = None) -> StackConfig:
    opts = dict(options or {})
    if discovery == "static":
        opts.setdefault("initial_hosts", [sim_phys(i) for i in range(SEEDS)])
    return PRESETS[preset](transport, membership=membership, **opts)


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 3)


class _Runner:
    def __init__(self, sim: Simulation, progress: Callable[[str], None], timeout_s: float,
                 stall_s: float):
        self.sim, self.say, self.timeout_s, self.stall_s = sim, progress, timeout_s, stall_s
        self.wall0 = time.monotonic()

    def wall(self) -> float:
        return time.monotonic() - self.wall0

    def until(self, count: Callable[[], int], goal: int, what: str,
              step: float = CHECK_S) -> tuple:
        """Run until ``count() >= goal`` (checked every ``step`` simulated s), or until the
        count has not grown for ``stall_s``, or ``timeout_s``. (simulated time taken or
        None, the last count)."""
        sim, start = self.sim, self.sim.now
        best, best_at = -1, start
        next_report = self.wall() + 5.0
        while True:
            n = count()
            if n >= goal:
                return sim.now - start, n
            if n > best:
                best, best_at = n, sim.now
            if sim.now - best_at > self.stall_s or sim.now - start > self.timeout_s:
                self.say(f"  ... {what}: stuck at {n}/{goal} for {sim.now - best_at:.1f}s "
                         f"simulated; giving up on this phase")
                return None, n
            sim.run_for(step)
            if self.wall() > next_report:
                next_report = self.wall() + 5.0
                self.say(f"  ... {what}: {n}/{goal} after {sim.now - start:.2f}s simulated, "
                         f"{self.wall():.0f}s wall")


@collector_paused()
def simulate(members: int = 50, membership: str = "views", preset: str = "local",
             transport: str = "udp", seed: int = 1, crash: int = 1, loss: float = 0.0,
             join_interval_s: float = 0.01, discovery: str = "static",
             timeout_s: float = 600.0, options: Optional[dict] = None,
             progress: Optional[Callable[[str], None]] = None,
             stall_s: float = 30.0) -> dict:
    """Run it; a dict of figures (simulated seconds unless named ``wall``)."""
    say = progress or (lambda text: None)
    if members < 2:
        raise ValueError("members must be >= 2")
    crash = max(0, min(crash, members - 1))
    cfg = make_config(membership, preset, transport, discovery, options)
    # (no history: every view every member installed would be kept, O(N^2) views of N)
    sim = Simulation(seed, SimOptions(loss=loss, history=False))
    run = _Runner(sim, say, timeout_s, stall_s)
    say(f"simulating {members} members, membership={membership}, preset={preset}, "
        f"transport={transport}, discovery={discovery}, loss={loss}, seed={seed}")
    ms: list = []
    checked: dict = {}  # member -> (view, want, result): a view is checked once

    def has_all(m, want: frozenset) -> bool:
        v = m.view
        last = checked.get(m)
        if last is not None and last[0] is v and last[1] is want:
            return last[2]
        ok = v is not None and len(v) == len(want) and want == v.member_set
        checked[m] = (v, want, ok)
        return ok

    wants: dict = {}

    def complete(live: list) -> int:
        """Members whose view holds exactly the live members (views mode: and one view)."""
        key = (id(live), len(live))
        want = wants.get(key)
        if want is None:
            want = wants[key] = frozenset(m.address for m in live)
        ok = [m for m in live if has_all(m, want)]
        if membership == "views" and ok:
            ids: dict = {}
            for m in ok:
                ids[m.view.view_id] = ids.get(m.view.view_id, 0) + 1
            return max(ids.values())
        return len(ok)

    seeds = min(SEEDS, members) if discovery == "static" else 1
    for i in range(seeds):
        ms.append(sim.add_member("sim", f"m{i}", cfg))
        sim.run_for(join_interval_s)
    run.until(lambda: complete(ms), seeds, "seed members agree", step=0.05)
    say(f"  {seeds} seed members agreed ({sim.now:.2f}s simulated)")
    step = max(1, members // 10)
    for i in range(seeds, members):
        ms.append(sim.add_member("sim", f"m{i}", cfg))
        sim.run_for(join_interval_s)
        if (i + 1) % step == 0 or i + 1 == members:
            say(f"  {i + 1}/{members} members started ({sim.now:.2f}s simulated, "
                f"{run.wall():.1f}s wall)")
    joined_at = sim.now
    conv, done = run.until(lambda: complete(ms), members, "join convergence", step=0.05)
    missing = sum(members - len(m.view) for m in ms if m.view is not None)
    if conv is not None:
        say(f"converged: {members} members {conv:.2f}s after the last one started "
            f"({sim.now:.2f}s simulated, {run.wall():.1f}s wall)")
    else:
        say(f"NOT converged: {done}/{members} members have the whole list; "
            f"{missing} entries missing in all")
    out = {"members": members, "membership": membership, "preset": preset,
           "transport": transport, "discovery": discovery, "loss": loss, "seed": seed,
           "join_convergence_s": _r(conv), "join_complete": done,
           "join_missing_entries": missing, "all_joined_s": _r(sim.now),
           "last_start_s": _r(joined_at)}
    if crash:
        victims = random.Random(seed).sample(ms[1:], crash)
        gone = {v.address for v in victims}
        for v in victims:
            sim.crash(v)
        live = [m for m in ms if m.alive]
        say(f"crashed {', '.join(v.name for v in victims)}")
        start = sim.now
        seen: dict = {}
        looked: dict = {}

        def detected() -> int:
            now = sim.now - start
            for m in live:
                v = m.view
                if m.name in seen or v is None or looked.get(m.name) is v:
                    continue
                looked[m.name] = v
                if not any(g in v for g in gone):
                    seen[m.name] = now
            return len(seen)

        run.until(detected, len(live), "detection")
        times = sorted(seen.values())
        agreed_s = None
        if len(times) == len(live) and membership == "views":
            extra, _ = run.until(lambda: complete(live), len(live), "agreement after the crash")
            agreed_s = None if extra is None else sim.now - start
        elif len(times) == len(live):
            agreed_s = times[-1]
        out.update({"crashed": crash, "detected_by": len(times),
                    "detection_first_s": _r(times[0]) if times else None,
                    "detection_median_s": _r(statistics.median(times)) if times else None,
                    "detection_p99_s": _r(times[min(len(times) - 1, int(0.99 * len(times)))])
                    if times else None,
                    "detection_last_s": _r(times[-1]) if len(times) == len(live) else None,
                    "convergence_after_crash_s": _r(agreed_s)})
        if times:
            say(f"detected: first {times[0]:.3f}s, median {statistics.median(times):.3f}s, "
                f"last {times[-1]:.3f}s ({len(times)}/{len(live)} members); "
                f"converged {'%.3fs' % agreed_s if agreed_s is not None else 'NOT'} "
                f"after the crash")
    out.update({"packets": sim.packets, "dropped_packets": sim.dropped,
                "wall_s": round(run.wall(), 1),
                "errors": sum(m.stack.errors for m in ms if m.stack is not None)})
    return out
