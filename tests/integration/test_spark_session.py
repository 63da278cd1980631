"""``start_spark`` connects the Spark driver JVM's Ray worker to the raylet this process is
connected to. RayDP gives the JVM the Ray settings of the node its Spark master actor runs
on, wherever Ray placed it: the JVM claimed another host's raylet, which worked by accident
while every raylet's socket had the same name, and after a head restart under GCS fault
tolerance (the new raylet on ``raylet.1``) no session started on that host again (found by
the fault campaign across hosts; tests/hosts/pipeline.py starts Spark this way)."""
pytest_plugins = ["tests.ray_fixtures"]

from raygroups.integration.spark_session import MASTER, driver_configs  # noqa: E402
from tests.script_run import run_json  # noqa: E402


def test_the_driver_jvm_connects_to_this_drivers_raylet_on_another_host_than_rays_choice(
        tmp_path):
    r = run_json("tests.spark_session_run", tmp_path, timeout=300)
    print(r)
    assert r["other"] and r["driver"]["RayletSocketName"] not in r["other"]
    assert r["jvm"] == {"ray.node-ip": r["driver"]["NodeManagerAddress"],
                        "ray.raylet.socket-name": r["driver"]["RayletSocketName"],
                        "ray.raylet.node-manager-port": str(r["driver"]["NodeManagerPort"])}
    assert r["count"] == 10


def test_driver_configs_keep_the_callers_settings(ray_session):
    out = driver_configs({"spark.a": "b", f"{MASTER}CPU": "1"})
    assert out["spark.a"] == "b" and out[f"{MASTER}CPU"] == "1"
    assert [k for k in out if k.startswith(f"{MASTER}node:")] == \
        [f"{MASTER}node:{ray_session_address()}"]


def ray_session_address() -> str:
    import ray
    me = ray.get_runtime_context().get_node_id()
    return next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == me)
