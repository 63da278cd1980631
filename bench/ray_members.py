"""Member actors on Ray: launch time, view subscription latency, detection of
``ray.kill`` with and without Ray as a second failure signal.

On a local Ray cluster (one node, loopback; started here):
* launch: ``Group.launch(members=5)`` until the five agree on one view (median of trials);
* subscription: a member leaves and rejoins again and again; for each view change, the time
  from its installation at a member (that member's clock) until ``g.views()`` in this driver
  yields it (target: p50 <= 50 ms);
* detection: ``ray.kill`` of a member (Ray restarts it); the time until a view without it is
  installed, with the Ray signal (the GCS says RESTARTING/DEAD; target: p50 <= 500 ms and
  faster than SWIM alone) and without it (SWIM's probes and suspicion timeout alone);
* then bench/follow_nodes.py: on a multi-node Ray, the time until a node added to the cluster
  has its member in the view (``follow_nodes=True``; target <= 5 s).

    python bench/ray_members.py [--quick] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import sys
import threading
import time

from percentile import pct

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

SUBSCRIPTION_P50_MS = 50.0
DETECTION_P50_MS = 500.0


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def bench_launch(Group, trials: int) -> list:
    times = []
    for i in range(trials):
        t0 = time.perf_counter()
        g = Group.launch(f"bench-launch-{os.getpid()}-{i}", members=5, timeout=120)
        times.append(time.perf_counter() - t0)
        g.shutdown()
    return times


class Follower:
    """``g.view_events()`` in a thread: (event, time seen) pairs in a queue."""

    def __init__(self, g, after):
        self.q: queue.Queue = queue.Queue()
        self.t = threading.Thread(target=self._run, args=(g, after), daemon=True)
        self.t.start()

    def _run(self, g, after) -> None:
        for e in g.view_events(after=after, timeout=120):
            self.q.put((e, time.time()))

    def next(self, timeout: float = 60.0):
        return self.q.get(timeout=timeout)


def bench_subscription(Group, changes: int) -> list:
    g = Group.launch(f"bench-sub-{os.getpid()}", members=5, timeout=120)
    try:
        v = g.view()
        f = Follower(g, v.view_id)
        name = v.members[-1].name
        lat = []
        for i in range(changes):
            if i % 2 == 0:
                g.leave(name)
            else:
                g.rejoin(name)
            e, seen = f.next()
            lat.append(seen - e["installed_at"])
        return lat
    finally:
        g.shutdown()


def bench_detection(Group, ray_signal: bool, trials: int) -> list:
    g = Group.launch(f"bench-detect-{int(ray_signal)}-{os.getpid()}", members=5, timeout=120,
                     ray_signal=ray_signal)
    try:
        out = []
        f = Follower(g, g.view().view_id)
        for i in range(trials):
            v = g.view()
            victim = v.members[1 + i % (len(v.members) - 1)]
            t0 = time.time()
            g.kill(victim.name, restart=True)
            while True:  # the view without the killed incarnation
                e, _ = f.next()
                if victim not in e["view"]:
                    out.append(e["installed_at"] - t0)
                    break
            while True:  # and its restarted incarnation back in, before the next trial
                if any(m.name == victim.name for m in e["view"].members):
                    break
                e, _ = f.next()
        return out
    finally:
        g.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    import ray

    from raygroups.actors import Group
    t0 = time.perf_counter()
    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
             log_to_driver=False, num_cpus=2, object_store_memory=200 * 1024 * 1024,
             configure_logging=False, logging_level="WARNING")
    print(f"local Ray up in {time.perf_counter() - t0:.1f}s (loopback, one node, "
          f"{os.cpu_count()} cores)", flush=True)
    n_launch, n_changes, n_kills = (2, 10, 3) if args.quick else (3, 30, 6)
    out: dict = {}
    try:
        launch = bench_launch(Group, n_launch)
        out["launch_s"] = launch
        print(f"Group.launch, 5 members until one agreed view: median "
              f"{statistics.median(launch):.2f}s  (trials {[round(x, 2) for x in launch]})",
              flush=True)

        lat = [x * 1000 for x in bench_subscription(Group, n_changes)]
        p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
        out["subscription_ms"] = lat
        print(f"view subscription latency (installed at a member -> g.views() yields it), "
              f"{len(lat)} changes: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(lat):.1f} ms  "
              f"[target p50 <= {SUBSCRIPTION_P50_MS:.0f} ms: "
              f"{verdict(p50 <= SUBSCRIPTION_P50_MS)}]", flush=True)

        det = {}
        for signal in (True, False):
            xs = [x * 1000 for x in bench_detection(Group, signal, n_kills)]
            det[signal] = xs
            print(f"detection of ray.kill {'with' if signal else 'without'} the Ray signal, "
                  f"{len(xs)} kills: p50 {pct(xs, 0.5):.0f} ms, max {max(xs):.0f} ms  "
                  f"(each {[round(x) for x in xs]})", flush=True)
        out["detection_ray_ms"], out["detection_swim_ms"] = det[True], det[False]
        with_p50, without_p50 = pct(det[True], 0.5), pct(det[False], 0.5)
        print(f"  target: with the Ray signal p50 <= {DETECTION_P50_MS:.0f} ms: "
              f"{verdict(with_p50 <= DETECTION_P50_MS)}; faster than SWIM alone "
              f"({with_p50:.0f} vs {without_p50:.0f} ms): {verdict(with_p50 < without_p50)}",
              flush=True)
    finally:
        ray.shutdown()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)
    # members that follow Ray's nodes need a multi-node Ray of their own: another process
    import subprocess
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "follow_nodes.py"),
                    "--trials", "1" if args.quick else "3"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
