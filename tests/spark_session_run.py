"""Where the Spark driver JVM's Ray worker connects, on a Ray of two hosts: the scenario of
tests/integration/test_spark_session.py, in a process of its own (its own Ray).

    python -m tests.spark_session_run --json out.json

Two raylets with addresses of their own (127.0.0.1 and 127.0.0.2 on loopback, as two
machines would have), this driver on the first, which has no CPU for actors: an actor Ray
places by its default needs lands on the second, and so would RayDP's Spark master. Starts
Spark with ``start_spark`` and writes the driver's node and the JVM's Ray settings to
``--json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    import ray
    from ray.cluster_utils import Cluster

    from raygroups.integration.spark_session import start_spark, stop_spark
    c = Cluster(initialize_head=True, head_node_args=dict(
        include_dashboard=False, num_cpus=0, node_ip_address="127.0.0.1"))
    c.add_node(num_cpus=2, node_ip_address="127.0.0.2")
    try:
        ray.init(address=c.address, _node_ip_address="127.0.0.1", log_to_driver=False,
                 configure_logging=False, logging_level="WARNING")
        c.wait_for_nodes()
        me = ray.get_runtime_context().get_node_id()
        nodes = {n["NodeID"]: n for n in ray.nodes()}
        spark = start_spark("raygroups-session", executors=1, memory="512M")
        props = spark.sparkContext._jvm.System.getProperties()
        out = {"driver": {k: nodes[me][k] for k in ("NodeManagerAddress", "RayletSocketName",
                                                     "NodeManagerPort")},
               "other": [n["RayletSocketName"] for i, n in nodes.items() if i != me],
               "jvm": {k: props.getProperty(k) for k in ("ray.node-ip",
                                                         "ray.raylet.socket-name",
                                                         "ray.raylet.node-manager-port")},
               "count": spark.range(10).count()}
        stop_spark()
        with open(a.json, "w") as f:
            json.dump(out, f)
    finally:
        ray.shutdown()
        c.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
