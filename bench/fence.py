"""A member on a node Ray declares dead while the member's process runs on: the frozen-raylet
probe, with and without the member's fence (actors/fence.py).

Per trial, on a multi-node Ray (three raylets on this machine, ``ray.cluster_utils.Cluster``,
GCS health checks every 1 s with 5 failures allowed, so a frozen raylet is declared dead in
about 10 s instead of Ray's default 30-60 s): a group of one member per node; the raylet of
one worker is stopped (SIGSTOP) for ``--freeze`` s, its member's process left running, then
continued (SIGCONT) and watched ``--after`` s more. From a surviving member's view history:
how often the frozen node's member incarnations were excluded from the freeze on, whether one
came back while the node was dead, and the time from Ray's verdict to the first view without
it.

With the fence, the member is excluded once and never comes back; without it (``fence=False``,
the control run), Ray's death signal excludes it, it merges back from the dead node within
about a second, and it goes again when its process is stopped.

    python bench/fence.py [--trials 1] [--freeze 20] [--after 10] [--no-control] [--json F]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time

FAST_HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
                      "health_check_failure_threshold": 5, "health_check_initial_delay_ms": 1000}


def trial(i: int, fence: bool, freeze_s: float, after_s: float) -> dict:
    from ray.cluster_utils import Cluster

    from raygroups.actors.ray_compat import keep_on_loopback
    keep_on_loopback()
    import ray

    from raygroups.actors import Group

    node = dict(num_cpus=1, node_ip_address="127.0.0.1")
    c = Cluster(initialize_head=True, head_node_args=dict(
        include_dashboard=False, _system_config=FAST_HEALTH_CHECKS, **node))
    out: dict = {"fence": fence}
    raylet = None
    try:
        frozen = c.add_node(**node)
        c.add_node(**node)
        c.wait_for_nodes()
        ray.init(address=c.address, _node_ip_address="127.0.0.1", log_to_driver=False,
                 configure_logging=False, logging_level="WARNING")
        cluster = f"fence-{os.getpid()}-{i}-{int(fence)}"
        g = Group.launch(cluster, 1, fence=fence, timeout=60)
        members = g.members()
        victim = next(m for m in members if m["node_id"] == frozen.node_id)
        witness = next(m["name"] for m in members if m["node_id"] != frozen.node_id)
        raylet = frozen.all_processes["raylet"][0].process.pid
        os.kill(raylet, signal.SIGSTOP)
        t_stop = time.time()
        verdict = None
        while time.time() - t_stop < freeze_s:
            if verdict is None and not any(n["Alive"] for n in ray.nodes()
                                           if n["NodeID"] == frozen.node_id):
                verdict = time.time()
            time.sleep(0.1)
        os.kill(raylet, signal.SIGCONT)
        raylet = None
        time.sleep(after_s)
        history = g.view_history(witness)
        out.update(_judge(history, victim["name"], victim["uuid"], t_stop, verdict))
        out["verdict_s"] = round(verdict - t_stop, 2) if verdict is not None else None
        g.shutdown()
    finally:
        if raylet is not None:
            os.kill(raylet, signal.SIGCONT)
        ray.shutdown()
        c.shutdown()
    return out


def _judge(history: list, name: str, uuid: str, t_stop: float, verdict) -> dict:
    """Exclusions of ``name``'s incarnations from the freeze on, comebacks after Ray's
    verdict, and the time from the verdict to the first view without the frozen incarnation.
    Views before the freeze (the group's formation on a loaded machine) are not the fence's
    doing: their exclusions are counted apart, with the seconds before the freeze of each."""
    exclusions, comebacks, first_out, before = 0, 0, None, []
    prev = None
    for e in history:
        here = name in e["members"]
        if prev is not None:
            if prev and not here:
                if e["installed_at"] < t_stop:
                    before.append(round(e["installed_at"] - t_stop, 3))
                else:
                    exclusions += 1
                    if first_out is None:
                        first_out = e["installed_at"]
            if not prev and here and verdict is not None and e["installed_at"] >= verdict:
                comebacks += 1
        prev = here
    return {"exclusions": exclusions, "comebacks_after_verdict": comebacks,
            "out_after_verdict_s": (round(first_out - verdict, 3)
                                    if first_out is not None and verdict is not None else None),
            "exclusions_before_freeze_s": before, "incarnation": uuid}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--freeze", type=float, default=20.0)
    ap.add_argument("--after", type=float, default=10.0)
    ap.add_argument("--no-control", action="store_true", help="skip the run without the fence")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    runs = [trial(i, True, a.freeze, a.after) for i in range(a.trials)]
    if not a.no_control:
        runs += [trial(i, False, a.freeze, a.after) for i in range(a.trials)]
    for fence in (True, False):
        rs = [r for r in runs if r["fence"] is fence]
        if not rs:
            continue
        outs = [r["out_after_verdict_s"] for r in rs if r["out_after_verdict_s"] is not None]
        met = all(r["exclusions"] == 1 and r["comebacks_after_verdict"] == 0 for r in rs)
        target = f"  [target: 1 exclusion, 0 comebacks: {'met' if met else 'NOT met'}]"
        print(f"{'with the fence   ' if fence else 'without the fence'}: Ray's verdict after "
              f"{statistics.median([r['verdict_s'] or 0 for r in rs]):.1f}s of a frozen raylet; "
              f"exclusions of its member {[r['exclusions'] for r in rs]}, comebacks from the "
              f"dead node {[r['comebacks_after_verdict'] for r in rs]}, out of the view "
              f"{statistics.median(outs) if outs else float('nan'):.2f}s after the verdict"
              + (target if fence else ""))
        early = [t for r in rs for t in r["exclusions_before_freeze_s"]]
        if early:
            print(f"  (and {len(early)} exclusion(s) during the group's formation, {early} s "
                  f"before the freeze: not counted above)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
