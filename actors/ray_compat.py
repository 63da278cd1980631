"""The one module that uses Ray's private APIs, and Ray on loopback for local clusters.

Each private use is here because Ray has no public API for it (tested with the Ray versions
in ``TESTED``); ``missing()`` names whatever of them an installed Ray lacks, and
tests/unit/test_ray_compat.py fails loudly on it, so a Ray upgrade that moves one is caught
by the tests rather than by a member in production:

- ``actor_state``: the GCS actor table (``ray._private.state.actors``), about 0.4 ms a call.
  ``ray.util.state.get_actor`` answers the same through the dashboard's state API, which
  clusters may run without (local test clusters do); the member actors' second failure
  signal (watcher.py) polls it every 100 ms.
- ``RayKV``: Ray's internal key-value store in the GCS (``ray.experimental.internal_kv``),
  with its atomic create-only put: the ``ray-kv://`` discovery store (kv_store.py). A named
  actor could hold the files too, but would be one more process that dies with its node.
- ``objects_held``: the object references this process holds (the core worker's reference
  table), so that a bench or a test sees that what ``Group.send_many`` took as an
  ObjectRef was freed; Ray's public State API needs the dashboard.
- ``keep_on_loopback``: Ray rewrites 127.0.0.1 to the host's external address unless
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set before ray is imported; a process that
  imported ray earlier also needs Ray's constant (``ray._private.ray_constants``) set.
  Only for local clusters on loopback: nodes with their own addresses need none of it.
- ``process_node_id``: the Ray node a process runs on when Ray did not start it as a worker
  (a Spark executor's Python worker, forked by RayDP's executor actor): the raylet that
  started its ancestor is in the environment (``RAY_RAYLET_PID``) and its node id on that
  raylet's command line (``--node_id``). Ray's public ``get_node_id()`` there names the node
  the process connected to as a driver, which on several raylets of one host is the first.
"""
from __future__ import annotations

import os
from typing import Any, Optional

TESTED = ("2.60",)
"""Ray release lines the tests ran on (README: "Ray versions")."""
LOOPBACK = ("127.", "localhost")
KV_NAMESPACE = "raygroups"  # Ray KV namespace of the ray-kv:// store


def missing() -> list:
    """What of the private APIs used here the installed Ray lacks ([] when all is there)."""
    import ray
    out = []
    if not ray.__version__.startswith(TESTED):
        out.append(f"ray {ray.__version__} is not a tested version ({', '.join(TESTED)})")
    try:
        from ray._private import state
        if not callable(getattr(state, "actors", None)):
            out.append("ray._private.state.actors")
    except ImportError:
        out.append("ray._private.state")
    try:
        from ray.experimental import internal_kv as kv
        for fn in ("_internal_kv_initialized", "_internal_kv_get", "_internal_kv_put",
                   "_internal_kv_list", "_internal_kv_del"):
            if not callable(getattr(kv, fn, None)):
                out.append(f"ray.experimental.internal_kv.{fn}")
    except ImportError:
        out.append("ray.experimental.internal_kv")
    try:
        from ray._raylet import CoreWorker
        if not callable(getattr(CoreWorker, "get_all_reference_counts", None)):
            out.append("ray._raylet.CoreWorker.get_all_reference_counts")
    except ImportError:
        out.append("ray._raylet.CoreWorker")
    try:
        from ray._private import worker
        from ray._private.node import Node
        if not hasattr(worker, "global_worker") or \
                not callable(getattr(Node, "get_temp_dir_path", None)):
            out.append("ray._private.worker.global_worker.node.get_temp_dir_path")
    except ImportError:
        out.append("ray._private.worker / ray._private.node")
    try:
        from ray._private import ray_constants
        if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
            out.append("ray._private.ray_constants.ENABLE_RAY_CLUSTER")
    except ImportError:
        out.append("ray._private.ray_constants")
    return out


def actor_state(actor_id: str) -> Optional[dict]:
    """{"State": ..., "NumRestarts": ...} of an actor from the GCS, None if unknown."""
    from ray._private import state
    try:
        info = state.actors(actor_id=actor_id)
    except Exception:
        return None
    return info or None


class RayKV:
    """Ray's internal KV in namespace ``raygroups``: keys and values are bytes. Raises
    RuntimeError when this process is not connected to Ray."""

    def __init__(self) -> None:
        from ray.experimental import internal_kv
        if not internal_kv._internal_kv_initialized():
            raise RuntimeError("Ray is not initialized in this process (ray.init first)")
        self._kv = internal_kv

    def get(self, key: bytes) -> Optional[bytes]:
        return self._kv._internal_kv_get(key, namespace=KV_NAMESPACE)

    def put(self, key: bytes, value: bytes, overwrite: bool = True) -> bool:
        """True when the key existed before (with ``overwrite=False``: nothing written)."""
        return bool(self._kv._internal_kv_put(key, value, overwrite=overwrite,
                                              namespace=KV_NAMESPACE))

    def keys(self, prefix: bytes) -> list:
        return list(self._kv._internal_kv_list(prefix, namespace=KV_NAMESPACE))

    def delete(self, key: bytes) -> None:
        self._kv._internal_kv_del(key, namespace=KV_NAMESPACE)


def objects_held() -> set:
    """Hex ids of the objects this process holds references to (owned or borrowed)."""
    from ray._private.worker import global_worker
    return {k.decode() if isinstance(k, bytes) else str(k)
            for k in global_worker.core_worker.get_all_reference_counts()}


def node_temp_dir() -> str:
    """The Ray temp directory of this process's node (``ray start --temp-dir``, default
    ``/tmp/ray``). Raises RuntimeError when this process is not connected to Ray."""
    from ray._private.worker import global_worker
    node = getattr(global_worker, "node", None)
    if node is None:
        raise RuntimeError("Ray is not initialized in this process (no node temp dir)")
    return node.get_temp_dir_path()


def process_node_id() -> Optional[str]:
    """The node id of the raylet that started this process or an ancestor (see the module
    doc); None when there is none or it cannot be read (not Linux)."""
    pid = os.environ.get("RAY_RAYLET_PID")
    if not pid:
        return None
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except (OSError, ValueError):
        return None
    for a in args:
        if a.startswith(b"--node_id="):
            return a.split(b"=", 1)[1].decode()
    return None


def loopback_address(address: Optional[str]) -> bool:
    """Whether a Ray address (``host:port``, ``ray://host:port`` or ``auto``: the cluster this
    machine last started) is on loopback."""
    if address in (None, "", "auto"):
        try:
            with open("/tmp/ray/ray_current_cluster") as f:
                address = f.read().strip()
        except OSError:
            return False
    host = address.split("://")[-1].rsplit(":", 1)[0]
    return host.startswith(LOOPBACK)


def keep_on_loopback() -> None:
    """Keep this process's Ray on loopback (a local cluster on 127.0.0.1)."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read when ray is imported
    import sys
    if "ray" in sys.modules:  # imported already: set the constant it read
        from ray._private import ray_constants
        ray_constants.ENABLE_RAY_CLUSTER = False


def init_local(**options: Any) -> Any:
    """Start a fresh local Ray cluster on loopback (the demo, benches, tests); returns ray."""
    keep_on_loopback()
    import ray
    defaults = dict(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                    log_to_driver=False, configure_logging=False, logging_level="WARNING")
    ray.init(**{**defaults, **options})
    return ray
