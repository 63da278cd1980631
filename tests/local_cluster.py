"""A multi-node Ray on one machine for the scripts that test across nodes: ``nodes`` raylets
on loopback (``ray.cluster_utils.Cluster``), this driver connected to it.

    c = start(3, num_cpus=1)
    ...
    stop(c)
"""
from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def start(nodes: int, num_cpus: int):
    import ray
    from ray.cluster_utils import Cluster
    node = dict(num_cpus=num_cpus, node_ip_address="127.0.0.1")
    c = Cluster(initialize_head=True, head_node_args=dict(include_dashboard=False, **node))
    for _ in range(nodes - 1):
        c.add_node(**node)
    ray.init(address=c.address, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False, logging_level="WARNING")
    c.wait_for_nodes()
    return c


def stop(c) -> None:
    """Disconnect and take the cluster down."""
    import ray
    ray.shutdown()
    for _ in range(3):
        try:
            c.shutdown()
            break
        except ValueError:  # a background thread of this driver (a lease renewer, the sink's
            # accept) made a late Ray call after ray.shutdown(), and Ray's auto-init connected
            # it to this cluster again: Cluster.shutdown() refuses the head then, after
            # disconnecting; the workers are gone, the head goes on the next try
            ray.shutdown()
