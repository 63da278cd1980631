"""``start_spark`` pins the Spark driver JVM's Ray worker to the raylet this process is
connected to. Left alone, the JVM looks its raylet up in Ray's node table by IP address, and
after a head restart under GCS fault tolerance the table still lists the dead head at the
same IP: the JVM picked its socket ("Failed to connect to socket ... sockets/raylet", the new
raylet listening on ``raylet.1``) and no session started on that host again (found by the
fault campaign across hosts; tests/hosts/pipeline.py starts Spark this way, and the
fixed-seed campaign of test_host_campaign.py restarts the head under it)."""
import ray

pytest_plugins = ["tests.ray_fixtures", "tests.spark_fixtures"]

from raygroups.integration.spark_session import JAVA_OPTS, driver_configs  # noqa: E402


def test_the_driver_jvm_connects_to_this_drivers_raylet(spark_session):
    me = ray.get_runtime_context().get_node_id()
    node = next(n for n in ray.nodes() if n["NodeID"] == me)
    props = spark_session.sparkContext._jvm.System.getProperties()
    assert props.getProperty("ray.raylet.socket-name") == node["RayletSocketName"]
    assert props.getProperty("ray.object-store.socket-name") == node["ObjectStoreSocketName"]
    assert props.getProperty("ray.raylet.node-manager-port") == str(node["NodeManagerPort"])
    assert spark_session.range(10).count() == 10


def test_driver_configs_extend_the_callers_java_options(ray_session):
    out = driver_configs({JAVA_OPTS: "-Dx=1", "spark.a": "b"})
    assert out["spark.a"] == "b"
    assert out[JAVA_OPTS].startswith("-Dx=1 -Dray.raylet.socket-name=")
