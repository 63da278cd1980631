"""Spark executors next to a group's members: RayDP's placement-group options that put one
executor on each member's Ray node (the design's "RayDP colocates Spark with the group").

```python
spark = raydp.init_spark("etl", num_executors=2, executor_cores=1, executor_memory="1G",
                         **colocate_with(g, executor_cores=1, executor_memory="1G"))
```

``colocate_with`` reserves a Ray placement group of one bundle per member node (or
``executors_per_node`` each), every bundle pinned to its node by Ray's node-id label
(``bundle_label_selector``), with the resources a RayDP executor asks for (its cores and
memory: they must match ``init_spark``'s, and ``num_executors`` the number of bundles, so
that RayDP puts one executor in each). A streaming query's tasks then read from the member on
their own node (``queue_stream``), so the jobs travel from a member to an executor on the
same host. ``task_nodes`` shows where each executor's tasks run.

The other direction, a task for member i's partition (``repartition_by_view``) scheduled on
member i's node, is not done: Spark's locality is by executor host, PySpark cannot give a
DataFrame's partitions preferred locations, and several raylets of one host (the tests'
multi-node Ray) share one host name.
"""
from __future__ import annotations

from typing import Any, Optional, Union

NODE_LABEL = "ray.io/node-id"


def member_nodes(group: Any) -> dict:
    """{member name: Ray node id} of the members in the group's view (a ``Group`` or a
    name) that hold data: not its arbitrator, which holds no queue to read."""
    if isinstance(group, str):
        from raygroups.actors import Group
        group = Group.attach(group)
    return {m["name"]: m["node_id"] for m in group.members()
            if m.get("node_id") and m.get("role") != "arbitrator"}


def _memory_bytes(memory: Union[str, int]) -> int:
    if isinstance(memory, int):
        return memory
    text = memory.strip().upper().rstrip("B")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise ValueError(f"executor_memory {memory!r} is not a size like '1G' or '512M'") \
            from None


def colocate_with(group: Any, executor_cores: int = 1, executor_memory: Union[str, int] = "1G",
                  executors_per_node: int = 1, timeout_s: Optional[float] = 60.0) -> dict:
    """``raydp.init_spark`` keyword arguments (``placement_group``,
    ``placement_group_bundle_indexes``) that put ``executors_per_node`` executors on each
    node that holds a member of ``group``. ``executor_cores``/``executor_memory``: the same
    as ``init_spark``'s (a bundle holds one executor's resources). Waits up to ``timeout_s``
    for Ray to reserve the bundles (TimeoutError: the member nodes lack the resources);
    ``raydp.stop_spark`` does not remove the group: ``ray.util.remove_placement_group``."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    if executor_cores < 1 or executors_per_node < 1:
        raise ValueError("executor_cores and executors_per_node must be >= 1")
    nodes = sorted(set(member_nodes(group).values()))
    if not nodes:
        raise ValueError(f"no member of {group!r} is in a view with a known node")
    bundle = {"CPU": float(executor_cores), "memory": float(_memory_bytes(executor_memory))}
    per = [n for n in nodes for _ in range(executors_per_node)]
    pg = placement_group([dict(bundle) for _ in per], strategy="SPREAD",
                         bundle_label_selector=[{NODE_LABEL: n} for n in per])
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(pg)
        raise TimeoutError(f"Ray did not reserve {len(per)} executor bundles of {bundle} on "
                           f"the member nodes {nodes} in {timeout_s}s")
    return {"placement_group": pg, "placement_group_bundle_indexes": list(range(len(per)))}


def this_node() -> str:
    """The Ray node id this process runs on (in a Spark task: its executor's node). Connect
    to Ray first."""
    import ray

    from raygroups.actors.ray_compat import process_node_id
    return process_node_id() or ray.get_runtime_context().get_node_id()


def task_nodes(spark: Any, partitions: Optional[int] = None) -> list:
    """[(partition, Ray node id)] of a small Spark job's tasks (one per partition; default:
    one per executor core): where the executors' Python workers run."""
    from .task_view import connect_to
    import ray
    address = ray.get_runtime_context().gcs_address
    sc = spark.sparkContext
    n = partitions or sc.defaultParallelism

    def where(i: int, _rows: Any) -> Any:
        connect_to(address, "raygroups")
        yield (i, this_node())
    return sc.parallelize(range(n), n).mapPartitionsWithIndex(where).collect()
