"""The frozen-raylet probe (bench/fence.py, one trial, in a process of its own: a driver holds
one Ray connection): on a multi-node Ray, the raylet of a worker is stopped while its member's
process runs on; Ray's GCS declares the node dead. The member fences itself: it is excluded
from the group exactly once and never comes back while its node is dead, before or after the
raylet is continued. Without the fence (the bench's control run) it merges back from the dead
node within about a second, which this test's checks would catch."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_member_on_a_node_ray_declared_dead_is_excluded_once_and_never_comes_back(tmp_path):
    out = tmp_path / "fence.json"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = subprocess.run([sys.executable, os.path.join(REPO, "bench", "fence.py"), "--trials",
                          "1", "--no-control", "--freeze", "15", "--after", "8", "--json",
                          str(out)], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    [r] = json.loads(out.read_text())
    assert r["fence"] is True and r["verdict_s"] is not None, r  # Ray did declare it dead
    assert r["exclusions"] == 1, r
    assert r["comebacks_after_verdict"] == 0, r
