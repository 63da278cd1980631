"""Members that follow Ray's nodes: ``Group.launch(..., follow_nodes=True)``.

A detached ``NodeFollower`` actor per group (``raygroups-follow:<cluster>``) reads Ray's node
table (``ray.nodes()``) every ``poll_s`` and keeps ``members_per_node`` member actors on
every alive node: when a node joins the cluster (added by the autoscaler or by
``ray start``), it launches that node's members with the group's settings (``Group.launch``,
which attaches the members that exist and creates the missing ones); they join the group by
its static host list or its discovery store. Every ``sweep_s`` it also relaunches when a
member is missing (its actor was killed for good). A node that goes away takes its member
actors with it; their peers exclude them (SWIM, and Ray's death signal at once). Ray 2.60
tells no public API user that a node is about to be drained, so a drained node's member is
excluded as a crash, not as a leave.

The follower holds no group state: it is restarted by Ray if its process dies
(``max_restarts=-1``) and goes on from the node table. ``Group.shutdown`` stops it first, so
that it does not bring back the members being shut down.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Optional

import ray

from .placement import alive_nodes

log = logging.getLogger("raygroups.follower")


def follower_name(cluster: str) -> str:
    return f"raygroups-follow:{cluster}"


class NodeFollower:
    def __init__(self, cluster: str, namespace: str, members_per_node: int, launch: dict,
                 poll_s: float = 0.5, sweep_s: float = 10.0):
        self.cluster, self.namespace = cluster, namespace
        self.members_per_node, self.launch = members_per_node, launch
        self.poll_s, self.sweep_s = poll_s, sweep_s
        self.nodes: frozenset = frozenset()
        self.stats = {"launches": 0, "failures": 0, "last_error": None, "last_launch_s": None}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="node-follower", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        last_sweep = time.monotonic()
        while not self.stopped.is_set():
            try:
                nodes = frozenset(n["NodeID"] for n in alive_nodes(ray.nodes()))
                now = time.monotonic()
                if nodes - self.nodes or now - last_sweep >= self.sweep_s:
                    last_sweep = now
                    self._launch()
                self.nodes = nodes
            except Exception as e:  # the next poll tries again; never end the loop
                self.stats["failures"] += 1
                self.stats["last_error"] = f"{type(e).__name__}: {e}"
                log.warning("following nodes of %s: %s", self.cluster, self.stats["last_error"])
            self.stopped.wait(self.poll_s)

    def _launch(self) -> None:
        from .group import Group
        t0 = time.monotonic()
        Group.launch(self.cluster, self.members_per_node, namespace=self.namespace,
                     **self.launch)
        self.stats["launches"] += 1
        self.stats["last_launch_s"] = round(time.monotonic() - t0, 3)

    def update(self, stack_options: Optional[dict] = None,
               runtime_env: Optional[dict] = None) -> None:
        """A rolling upgrade: members this follower launches from now on take these stack
        options (merged over the group's) and this runtime environment."""
        if stack_options:
            self.launch = {**self.launch, "stack_options": {
                **(self.launch.get("stack_options") or {}), **stack_options}}
        if runtime_env:
            self.launch = {**self.launch, "runtime_env": runtime_env}

    def status(self) -> dict:
        return {"nodes": len(self.nodes), **self.stats}

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)


def start_follower(cluster: str, namespace: str, members_per_node: int, launch: dict,
                   poll_s: float = 0.5) -> Any:
    """The group's follower (created, or the one that runs)."""
    cls = ray.remote(NodeFollower)
    return cls.options(name=follower_name(cluster), namespace=namespace, get_if_exists=True,
                       lifetime="detached", num_cpus=0, max_restarts=-1,
                       max_concurrency=4).remote(cluster, namespace, members_per_node,
                                                 launch, poll_s)


def update_follower(cluster: str, namespace: str, stack_options: Optional[dict] = None,
                    runtime_env: Optional[dict] = None) -> bool:
    """Tell the group's follower, if it runs, what members it launches from now on take
    (``NodeFollower.update``); whether one runs."""
    try:
        h = ray.get_actor(follower_name(cluster), namespace=namespace)
    except ValueError:
        return False
    ray.get(h.update.remote(stack_options, runtime_env), timeout=30)
    return True


def stop_follower(cluster: str, namespace: str) -> Optional[dict]:
    """Stop and remove the group's follower; its last status, or None when there was none."""
    try:
        h = ray.get_actor(follower_name(cluster), namespace=namespace)
    except ValueError:
        return None
    try:
        st = ray.get(h.status.remote(), timeout=10)
        ray.get(h.stop.remote(), timeout=40)
    except Exception:
        st = None
    ray.kill(h, no_restart=True)
    return st
