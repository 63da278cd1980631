"""A multi-node Ray on one machine for the scripts that test across nodes: ``nodes`` raylets
on loopback (``ray.cluster_utils.Cluster``), this driver connected to it.

    c = start(3, num_cpus=1)
    ...
    stop(c)
"""
from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def start(nodes: int, num_cpus: int, addresses: tuple = ("127.0.0.1",), cpus: tuple = ()):
    """``nodes`` raylets, node ``i`` at ``addresses[i]`` (the last one repeats) with
    ``cpus[i]`` CPUs (default ``num_cpus``); this driver on the first."""
    import ray
    from ray.cluster_utils import Cluster

    def node(i: int) -> dict:
        return dict(num_cpus=cpus[i] if i < len(cpus) else num_cpus,
                    node_ip_address=addresses[min(i, len(addresses) - 1)])
    c = Cluster(initialize_head=True, head_node_args=dict(include_dashboard=False, **node(0)))
    for i in range(1, nodes):
        c.add_node(**node(i))
    ray.init(address=c.address, _node_ip_address=addresses[0], log_to_driver=False,
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
