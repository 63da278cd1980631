"""RayDP Spark as the demo and the benches start it: quiet (no UI, no progress bars, errors
only in the log) on the Ray cluster this process is connected to, its Python workers running
this interpreter (so they import the same raygroups).

```python
spark = start_spark("etl", executors=2, memory="1G")   # two executors of one core
stop_spark()
```

The Spark driver's JVM joins Ray as a worker of its own, and left alone it looks up its raylet
in Ray's node table by IP address. After a head restart under GCS fault tolerance that table
still lists the head's dead node (same IP) next to the new one, and the JVM can pick the dead
node's socket: the session never starts ("Failed to connect to socket ... sockets/raylet";
the new raylet listens on ``raylet.1``). ``start_spark`` pins the JVM to the raylet this
process is connected to (``driver_configs``); pass ``configs=driver_configs()`` to
``raydp.init_spark`` when calling it directly.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

QUIET = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
JAVA_OPTS = "spark.driver.extraJavaOptions"


def driver_configs(configs: Optional[dict] = None) -> dict:
    """``configs`` (Spark settings) with the driver JVM's Java options extended by the raylet,
    object store and node-manager port of the Ray node this process is connected to (from
    ``ray.nodes()``), so that the JVM's Ray worker connects where this driver does."""
    import ray
    me = ray.get_runtime_context().get_node_id()
    node = next(n for n in ray.nodes() if n["NodeID"] == me)
    pins = (f"-Dray.raylet.socket-name={node['RayletSocketName']} "
            f"-Dray.object-store.socket-name={node['ObjectStoreSocketName']} "
            f"-Dray.raylet.node-manager-port={node['NodeManagerPort']}")
    out = dict(configs or {})
    out[JAVA_OPTS] = f"{out[JAVA_OPTS]} {pins}" if out.get(JAVA_OPTS) else pins
    return out


def start_spark(app: str, executors: int = 2, cores: int = 1, memory: str = "1G",
                configs: Optional[dict] = None, log_level: str = "ERROR", **raydp_kw: Any) -> Any:
    """``raydp.init_spark`` with ``executors`` executors of ``cores`` cores and ``memory``
    each, the ``QUIET`` settings and ``configs``; ``raydp_kw``: more of init_spark's
    arguments (``placement_group`` and the like, see ``colocate_with``)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import raydp
    spark = raydp.init_spark(app, num_executors=executors, executor_cores=cores,
                             executor_memory=memory,
                             configs=driver_configs({**QUIET, **(configs or {})}),
                             **raydp_kw)
    spark.sparkContext.setLogLevel(log_level)
    return spark


def stop_spark() -> None:
    import raydp
    raydp.stop_spark()
