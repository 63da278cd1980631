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
import sys

from . import local_cluster


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    import ray

    from raygroups.integration.spark_session import start_spark, stop_spark
    c = local_cluster.start(2, 2, addresses=("127.0.0.1", "127.0.0.2"), cpus=(0, 2))
    try:
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
        local_cluster.stop(c)
    return 0


if __name__ == "__main__":
    sys.exit(main())
