"""RayDP Spark as the demo and the benches start it: quiet (no UI, no progress bars, errors
only in the log) on the Ray cluster this process is connected to, its Python workers running
this interpreter (so they import the same raygroups).

```python
spark = start_spark("etl", executors=2, memory="1G")   # two executors of one core
stop_spark()
```

The Spark driver's JVM joins Ray as a worker of its own, and RayDP gives it the Ray settings
(node address, raylet socket, node-manager port) of the node its Spark master actor runs on,
wherever Ray placed that actor. On a cluster of several hosts the JVM then claims another
host's raylet: it works by accident while every host's raylet has the same socket name, and
fails once the names differ, as after a head restart under GCS fault tolerance (the new
raylet listens on ``raylet.1``; "Failed to connect to socket ... sockets/raylet", and no
session starts on that host again). ``start_spark`` places the master actor on the node this
process is connected to (``driver_configs``: RayDP's
``spark.ray.raydp_spark_master.actor.resource.*`` settings, Ray's ``node:<address>``
resource); pass ``configs=driver_configs()`` to ``raydp.init_spark`` when calling it
directly.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

QUIET = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
MASTER = "spark.ray.raydp_spark_master.actor.resource."


def driver_configs(configs: Optional[dict] = None) -> dict:
    """``configs`` (Spark settings) with RayDP's Spark master actor placed on the Ray node this
    process is connected to (its ``node:<address>`` resource, from ``ray.nodes()``) and
    holding no CPU there (as a Ray actor by default, once placed), so that the driver JVM's
    Ray worker connects where this driver does. The caller's own master settings win."""
    import ray
    me = ray.get_runtime_context().get_node_id()
    node = next(n for n in ray.nodes() if n["NodeID"] == me)
    pins = {f"{MASTER}node:{node['NodeManagerAddress']}": "0.001", f"{MASTER}CPU": "0"}
    return {**pins, **(configs or {})}


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
