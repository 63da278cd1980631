"""Members that follow Ray's nodes, on a multi-node Ray (several raylets on loopback,
``ray.cluster_utils.Cluster``): ``Group.launch(..., follow_nodes=True)`` gives a member on
every node; a node added to the cluster gets its member in the agreed view, a removed node's
member leaves the view and is not brought back, and ``shutdown`` leaves neither members nor
the follower. Runs bench/follow_nodes.py (one trial) in a process of its own, since a driver
holds one Ray connection and this run's tests share another."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_members_follow_nodes_added_and_removed(tmp_path):
    out = tmp_path / "follow.json"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = subprocess.run([sys.executable, os.path.join(REPO, "bench", "follow_nodes.py"),
                          "--trials", "1", "--json", str(out)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    [r] = json.loads(out.read_text())
    print(run.stdout)
    assert r["members_at_launch"] == 1  # the head alone, as cluster.yaml starts the group
    assert r["one_member_per_node_first"]  # a worker added: its member, none more on the head
    assert r["one_member_per_node"]     # the added node's member joined, one per node
    assert r["after_removal"] == 2      # the removed node's member is gone and stays gone
    assert r["groups_left"] == [] and r["follower_left"] is False
