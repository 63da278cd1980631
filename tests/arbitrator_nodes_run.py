"""The arbitrator on a multi-node Ray: the scenario of tests/integration/test_arbitrator_nodes.py,
in a process of its own (a driver holds one Ray connection, and this one starts its own Ray).

    python -m tests.arbitrator_nodes_run --json out.json [--no-arbitrator]

A Ray of three raylets on loopback (``ray.cluster_utils.Cluster``): ``Group.launch(members=2,
arbitrator=True)`` deals the two data members to the head and the second node, and the
arbitrator goes to the third, which holds none. The second node is removed from the cluster
(its data member goes with it); then the queue is used through the head's member. Last,
the node follower's launch (``members_per_node=1`` on every live node, no arbitrator) gives
the arbitrator's node a data member of its own and leaves the arbitrator as it is. With
``--no-arbitrator`` the same launch without it (the contrast). The figures go to ``--json``.
"""
from __future__ import annotations

import argparse
import json
import time

from . import local_cluster

WAIT_S = 90.0
PRIMARY_GRACE_S = 10.0
"""After the view without the removed node's member came up not primary: how long it may
still take to become primary (a majority would be decided in the view's own exchange)."""


def where(g) -> dict:
    """{member name: [node id, role]} of the view's members."""
    return {m["name"]: [m["node_id"], m.get("role")] for m in g.members()}


def wait_view(g, pred, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = g.view()
            if pred(v):
                return v
        except Exception:  # noqa: BLE001 - the member asked is leaving, or not primary yet
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no such view within {timeout}s")
        time.sleep(0.2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--no-arbitrator", action="store_true")
    args = ap.parse_args(argv)
    import ray

    from raygroups.actors import Group
    from raygroups.actors.placement import alive_nodes
    from raygroups.stack.workqueue import QueueError

    c = local_cluster.start(3, num_cpus=1)
    out: dict = {"arbitrator": not args.no_arbitrator}
    g = None
    try:
        nodes = [n["NodeID"] for n in alive_nodes(ray.nodes())]
        out["nodes"] = nodes
        cluster = f"arbnodes-{int(time.time())}"
        opts = dict(http=False, metrics_interval_s=0, timeout=WAIT_S)
        g = Group.launch(cluster, members=2, arbitrator=not args.no_arbitrator, **opts)
        out["launched"] = where(g)
        q = g.queue("jobs")
        q.publish(b"before")
        head = next(n for n, (node, role) in out["launched"].items()
                    if node == nodes[0] and role == "data")
        second = next(cn for cn in c.worker_nodes
                      if any(node == cn.node_id and role == "data"
                             for node, role in out["launched"].values()))
        out["removed_node"] = second.node_id
        c.remove_node(second)
        # first the view without the removed member (its primary verdict comes with it:
        # PRIMARY holds a view back until its state exchange decided), then, if that view
        # is not primary, a while longer for one that is (none comes without a majority:
        # waiting the whole 60 s for it cost the contrast run a minute)
        try:
            v = wait_view(g, lambda v: len(v.members) == len(out["launched"]) - 1, 60.0)
            if not v.primary:
                v = wait_view(g, lambda v: len(v.members) == len(out["launched"]) - 1
                              and v.primary, PRIMARY_GRACE_S)
            out["after_removal"] = {"members": [m.name for m in v.members], "primary": True}
        except TimeoutError:
            v = g.view()
            out["after_removal"] = {"members": [m.name for m in v.members],
                                    "primary": v.primary}
        try:
            survivor = q.on(head)
            survivor.publish(b"after")
            got = [survivor.acquire(timeout_s=30) for _ in range(2)]
            for d in got:
                d.accept()
            out["queue"] = {"acquired": [d.body.decode() for d in got],
                            "depth": g.queues(member=head)["jobs"]["depth"]}
        except QueueError as e:
            out["queue"] = {"error": type(e).__name__}
        if not args.no_arbitrator:
            # what the node follower (follow_nodes) launches: members_per_node=1 on every
            # live node, no arbitrator
            Group.launch(cluster, 1, **opts)
            wait_view(g, lambda v: len(v.members) == 3 and v.primary)
            out["followed"] = where(g)
    finally:
        if g is not None:
            try:
                g.shutdown()
            except Exception as e:  # noqa: BLE001 - the figures matter more
                out["shutdown_error"] = repr(e)
        local_cluster.stop(c)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
