"""Members that follow Ray's nodes (``Group.launch(..., follow_nodes=True)``) on a multi-node
Ray: several raylets on this machine (``ray.cluster_utils.Cluster``, all on loopback).

Per trial: a head and one worker node, a group with one member per node and a node follower;
then a node is added (``ray start`` as the autoscaler would) and the time until a member on it
is in the group's agreed view is measured (target <= 5 s); then a node is removed and the time
until a view without its member is measured; then ``g.shutdown()`` must leave no member and
no follower. Prints the figures; ``--json`` writes them (tests/integration/test_follow_nodes.py
runs one trial and checks them).

    python bench/follow_nodes.py [--trials 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

TARGET_S = 5.0


def _wait(pred, timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what} not within {timeout}s")
        time.sleep(0.02)
    return time.monotonic() - t0


def trial(i: int) -> dict:
    from ray.cluster_utils import Cluster

    from raygroups.actors.ray_compat import keep_on_loopback
    keep_on_loopback()
    import ray

    from raygroups.actors import Group
    from raygroups.actors.follower import follower_name

    node = dict(num_cpus=1, node_ip_address="127.0.0.1")
    c = Cluster(initialize_head=True, head_node_args=dict(include_dashboard=False, **node))
    out: dict = {}
    try:
        ray.init(address=c.address, _node_ip_address="127.0.0.1", log_to_driver=False,
                 configure_logging=False, logging_level="WARNING")
        cluster = f"follow-{os.getpid()}-{i}"
        g = Group.launch(cluster, 1, follow_nodes=True, timeout=60)

        def nodes_of_view() -> list:
            names = {m.name for m in g.view().members}
            return sorted(m["node_id"] or "?" for m in g.members() if m["name"] in names)
        out["members_at_launch"] = len(g.view().members)  # the head alone, as cluster.yaml
        # a first worker: every node has the same host name here, so the head's member was
        # named before its node's name got the node id added; the head keeps that member
        first = c.add_node(**node)
        c.wait_for_nodes()
        _wait(lambda: first.node_id in nodes_of_view() and len(g.view().members) == 2, 60,
              "a member on the first worker")
        time.sleep(1.0)  # and no second member on the head
        alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        out["one_member_per_node_first"] = nodes_of_view() == sorted(alive)
        added = c.add_node(**node)
        c.wait_for_nodes()
        new_id = added.node_id
        out["join_s"] = _wait(lambda: new_id in nodes_of_view() and
                              len(g.view().members) == 3, 60, "a member on the new node")
        alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        out["one_member_per_node"] = nodes_of_view() == sorted(alive)
        c.remove_node(added)
        out["exclude_s"] = _wait(lambda: new_id not in nodes_of_view() and
                                 len(g.view().members) == 2, 60, "a view without it")
        time.sleep(1.0)  # the follower must not bring a member back on the dead node
        out["after_removal"] = len(g.view().members)
        g.shutdown()
        out["groups_left"] = Group.list_groups().get(cluster, [])
        try:
            ray.get_actor(follower_name(cluster), namespace="raygroups")
            out["follower_left"] = True
        except ValueError:
            out["follower_left"] = False
    finally:
        ray.shutdown()
        c.shutdown()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    results = [trial(i) for i in range(a.trials)]
    joins = [r["join_s"] for r in results]
    excl = [r["exclude_s"] for r in results]
    print(f"follow_nodes: a member on a node added to the Ray cluster, in the agreed view: "
          f"median {statistics.median(joins):.2f}s, max {max(joins):.2f}s over {len(joins)} "
          f"trials  [target <= {TARGET_S:.0f}s: "
          f"{'met' if max(joins) <= TARGET_S else 'NOT met'}]")
    print(f"  a node removed: a view without its member after median "
          f"{statistics.median(excl):.2f}s, max {max(excl):.2f}s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
