"""Spark pipelines following the group's views: how soon a new view reaches
(a) the driver-side ``ViewFeed`` and (b) code inside a Spark task.

On a local Ray cluster (one node, loopback; started here) with RayDP Spark (two executors of
one core) and a 3-member group: one member leaves and rejoins again and again. For each view
change, the latency is measured from its install (the earliest ``installed_at`` among the
members' view histories, their wall clocks, one machine) until
* (a) the ``ViewFeed`` in this driver has it (``current()``);
* (b) code inside a running Spark task sees the new view id:
    - ray long poll: the task connected to Ray and long-polls a member actor
      (``raygroups.integration.task_view.watch``);
    - http poll: the task GETs a member's HTTP API every ``--http-poll-ms`` ms;
    - new stage: a Spark job started by the feed's ``on_change`` reads the new view from its
      broadcast (feed latency + Spark job scheduling: what a re-planned stage sees).

Targets: (a) p50 <= 200 ms, (b) p50 <= 1 s.

    python bench/spark_views.py [--changes 20] [--quick] [--json out.json]
"""
from __future__ import annotations

import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # bench/queue.py would shadow the standard library's queue module

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

FEED_P50_MS = 200.0
TASK_P50_MS = 1000.0


def p50_p99(ms: list) -> tuple:
    if len(ms) < 2:
        return ms[0], ms[0]
    return statistics.median(ms), statistics.quantiles(ms, n=100, method="inclusive")[98]


def _watch_task(bc, n_views: int, idle_s: float, http_poll_s: float):
    """Task 0 long-polls through Ray, task 1 polls HTTP: [(method, label, seen_at)]."""
    def run(index, _):
        from raygroups.integration import task_view
        snap = bc.value
        out = []
        if index == 0:
            task_view.group_of(snap)  # connected before the first change
            for v in task_view.watch(snap, timeout=idle_s):
                out.append(("ray long poll", v.label, v.seen_at))
                if len(out) >= n_views:
                    break
        else:
            last, quiet_since = snap.key, time.time()
            while len(out) < n_views and time.time() - quiet_since < idle_s:
                v = task_view.via_http(snap)
                if v.key > last:
                    last, quiet_since = v.key, time.time()
                    out.append(("http poll", v.label, v.seen_at))
                time.sleep(http_poll_s)
        return out
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--changes", type=int, default=20, help="view changes to measure")
    ap.add_argument("--quick", action="store_true", help="6 changes")
    ap.add_argument("--http-poll-ms", type=float, default=50.0)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    changes = 6 if args.quick else args.changes
    import ray

    from raygroups.actors import Group
    from raygroups.integration import ViewFeed
    from raygroups.integration.spark_session import start_spark, stop_spark

    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
             num_cpus=4, object_store_memory=200 * 1024 * 1024, log_to_driver=False,
             configure_logging=False, logging_level="WARNING")
    g = Group.launch(f"bench-spark-{os.getpid()}", members=3, metrics_interval_s=0)
    spark = start_spark("bench-spark-views")
    feed = ViewFeed(spark, g)
    try:
        first = feed.wait_stable(1.0, 60)
        sc = spark.sparkContext
        # warm up: every Python worker connected to Ray once (about 0.3 s each)
        sc.parallelize(range(2), 2).mapPartitions(
            lambda it: [__import__("raygroups.integration.task_view", fromlist=["x"])
                        .group_of(first) and 1]).collect()

        seen_feed: dict = {}
        new_stage: dict = {}
        feed.on_change(lambda old, new: seen_feed.setdefault(new.label, time.time()))
        victim = first.members[-1]

        def change_views(n: int, pause_s: float) -> None:
            for i in range(n):
                before = feed.current()
                if victim in before.members:
                    g.leave(victim)
                else:
                    g.rejoin(victim)
                feed.wait_for(lambda v: v.key > before.key, 60)
                time.sleep(pause_s)  # let the tasks or the re-planned stage catch up

        print(f"{changes} + {changes} view changes: {victim} leaves and rejoins "
              f"(group {g.cluster}, 3 members, 2 Spark executors)")
        # phase 1: two running tasks watch (they hold both executor cores)
        bc = feed.broadcast()
        got: list = []
        job = threading.Thread(target=lambda: got.extend(
            sc.parallelize(range(2), 2)
              .mapPartitionsWithIndex(_watch_task(bc, changes, 20.0, args.http_poll_ms / 1000))
              .collect()), daemon=True)
        job.start()
        time.sleep(3.0)  # the watching tasks are running
        change_views(changes, 0.5)
        job.join(120)

        # phase 2: each change re-plans a stage (a new Spark job) from the feed's callback
        def replan(old, new):
            bc = feed.broadcast()

            def read(_):
                yield (bc.value.label, time.time())
            for label, t in sc.parallelize([0], 1).mapPartitions(read).collect():
                new_stage.setdefault(label, t)
        feed.on_change(replan)
        change_views(changes, 1.0)
        time.sleep(1.0)

        install: dict = {}
        for name in g.member_names():
            for v in g.view_history(member=name):
                label = f"{v['view_id'][0]}:{v['view_id'][1]}"
                install[label] = min(install.get(label, v["installed_at"]), v["installed_at"])
        later = [s.label for s in feed.history() if s.key > first.key]
        series = {"(a) driver feed": [seen_feed[lb] - install[lb] for lb in later
                                      if lb in seen_feed],
                  "(b) task: ray long poll": [], "(b) task: http poll": [],
                  "(b) task: new stage": [new_stage[lb] - install[lb] for lb in later
                                          if lb in new_stage]}
        for method, label, t in got:
            if label in install:
                series[f"(b) task: {method}"].append(t - install[label])
        out = {}
        print(f"{'path':<26} {'n':>3} {'p50 ms':>8} {'p99 ms':>8}  target")
        for name, xs in series.items():
            ms = [1000 * x for x in xs]
            target = FEED_P50_MS if name.startswith("(a)") else TASK_P50_MS
            p50, p99 = p50_p99(ms) if ms else (None, None)
            out[name] = {"n": len(ms), "p50_ms": p50, "p99_ms": p99, "target_p50_ms": target}
            if ms:
                print(f"{name:<26} {len(ms):>3} {p50:>8.1f} {p99:>8.1f}  p50 <= {target:.0f} ms: "
                      f"{'met' if p50 <= target else 'NOT met'}")
            else:
                print(f"{name:<26}   0        -        -  (no sample)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"changes": changes, "series": out}, f, indent=2)
    finally:
        feed.close()
        g.shutdown()
        stop_spark()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
