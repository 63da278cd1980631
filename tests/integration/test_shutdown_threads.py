"""A driver that shuts Ray down while raygroups' background threads still have work (here the
queue's lease renewer, holding a delivery) stays shut down: the thread stops instead of making
a Ray call, which Ray's auto-init would answer by starting or joining Ray again (a CI run once
failed that way: a multi-node test's driver could not take its cluster down). Runs its own
Ray in a process of its own. (A call already in flight when Ray goes is outside any check:
the renewer then stops on Ray's SystemExit.)"""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = r"""
import json, os, time
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray
ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=1,
         log_to_driver=False, configure_logging=False, logging_level="WARNING")
from raygroups.actors import Group
from raygroups.actors import queue_lease
g = Group.launch("t-shutdown-%d" % os.getpid(), members=1, detached=False, http=False,
                 metrics_interval_s=0, timeout=60)
q = g.queue("jobs", lease_s=6.0)  # renewed every 2 s: asleep when Ray goes
q.publish(b"x")
held = q.acquire(timeout_s=30)          # held under a lease: the renewer thread runs
renewing = queue_lease.KEEPER.thread is not None and queue_lease.KEEPER.thread.is_alive()
time.sleep(0.5)                         # its first renewal done: it sleeps when Ray goes
ray.shutdown()
time.sleep(5.0)                         # two renewal periods
print(json.dumps({"renewing": renewing, "ray_again": ray.is_initialized(),
                  "thread_left": queue_lease.KEEPER.thread is not None}))
"""


def test_background_threads_never_start_ray_again_after_shutdown():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = subprocess.run([sys.executable, "-c", DRIVER], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    r = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["renewing"]                  # the thread had work when Ray went
    assert r["thread_left"] is False      # it stopped
    assert r["ray_again"] is False        # and did not bring Ray back, nor try: Ray's init
    assert "not the main thread" not in run.stderr  # from a thread says so on stderr
