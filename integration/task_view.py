"""Reading the group's view from code inside a Spark task (a Python worker of a RayDP
executor), or from any process that holds a ``ViewSnapshot``.

Two ways, measured on the 2-core machine (bench/spark_views.py):
* through Ray: the worker process connects to the Ray cluster (``ray.init`` with the GCS
  address and namespace the snapshot carries; about 0.3 s once per worker process, and
  Spark reuses its Python workers) and asks a member actor (``Group.attach(...).view()``,
  a few ms). ``watch()`` long-polls there, so a running task sees a new view within
  milliseconds of its install.
* over HTTP: a GET of ``/membership/nodes`` on a member's HTTP API (about 2 ms, nothing to
  connect first); the fallback when Ray cannot be reached.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any, Iterator, Optional

from .snapshot import ViewSnapshot

HTTP_TIMEOUT_S = 2.0
_lock = threading.Lock()
_groups: dict = {}


def connect(snap: ViewSnapshot) -> None:
    """Connect this process to the snapshot's Ray cluster (no-op when connected)."""
    connect_to(snap.gcs_address, snap.namespace)


def connect_to(gcs_address: Optional[str], namespace: str) -> None:
    """Connect this process (a Spark Python worker, say) to the Ray cluster at
    ``gcs_address`` (None: "auto") in ``namespace``; a no-op when it is connected."""
    from raygroups.actors.ray_compat import keep_on_loopback, loopback_address
    if gcs_address and loopback_address(gcs_address):
        keep_on_loopback()  # a local Ray on loopback: keep this process on loopback too
    import ray
    if ray.is_initialized():
        return
    ray.init(address=gcs_address or "auto", namespace=namespace,
             log_to_driver=False, configure_logging=False, logging_level="WARNING")


def group_of(snap: ViewSnapshot) -> Any:
    """A ``Group`` handle of the snapshot's group in this process (one per group, cached)."""
    with _lock:
        g = _groups.get((snap.cluster, snap.namespace))
        if g is None:
            connect(snap)
            from raygroups.actors import Group
            g = _groups[(snap.cluster, snap.namespace)] = Group.attach(snap.cluster,
                                                                       snap.namespace)
        return g


def _from_view(snap: ViewSnapshot, view: Any, installed_at: float = 0.0,
               source: Optional[str] = None) -> ViewSnapshot:
    return ViewSnapshot.of(view, snap.cluster, installed_at=installed_at, seen_at=time.time(),
                           source=source, namespace=snap.namespace,
                           gcs_address=snap.gcs_address, http_urls=snap.http_urls)


def via_ray(snap: ViewSnapshot) -> ViewSnapshot:
    return _from_view(snap, group_of(snap).view())


def via_http(snap: ViewSnapshot) -> ViewSnapshot:
    """The view of the first member whose HTTP API answers as a member."""
    last: Optional[BaseException] = None
    for name, url in snap.http_urls:
        try:
            with urllib.request.urlopen(url + "membership/nodes", timeout=HTTP_TIMEOUT_S) as r:
                got = json.loads(r.read())
        except Exception as e:  # gone or restarting: the next member
            last = e
            continue
        if not got.get("view_id") or not got.get("nodes"):
            continue
        nodes = got["nodes"]
        coord = next((n for n in nodes if n.get("coordinator")), nodes[0])
        return ViewSnapshot(
            cluster=snap.cluster, view_id=(got["view_id"][0], int(got["view_id"][1])),
            coord_uuid=coord["uuid"].replace("-", "").lower(),
            members=tuple(n["name"] for n in nodes),
            uuids=tuple(n["uuid"].replace("-", "").lower() for n in nodes),
            seen_at=time.time(), source=name, namespace=snap.namespace,
            gcs_address=snap.gcs_address, http_urls=snap.http_urls)
    raise ConnectionError(f"no member of {snap.cluster!r} answered over HTTP ({last})")


def latest_view(snap: ViewSnapshot, via: str = "ray") -> ViewSnapshot:
    """The group's current view (see the module doc). ``via``: "ray" (falls back to HTTP when
    Ray cannot be reached) or "http". Primary flags are known through Ray only."""
    if via == "http":
        return via_http(snap)
    if via != "ray":
        raise ValueError(f"via must be 'ray' or 'http', not {via!r}")
    try:
        return via_ray(snap)
    except Exception:
        if not snap.http_urls:
            raise
        return via_http(snap)


def watch(snap: ViewSnapshot, timeout: Optional[float] = None,
          poll_s: float = 5.0) -> Iterator[ViewSnapshot]:
    """Inside a task: every view installed after ``snap``, as it is installed (a long poll on
    a member actor through Ray); ends after ``timeout`` s without a new view."""
    from raygroups.stack.address import Address
    from raygroups.stack.view import ViewId
    g = group_of(snap)
    after = ViewId(Address(bytes.fromhex(snap.coord_uuid), snap.view_id[0]), snap.view_id[1])
    for e in g.view_events(after=after, timeout=timeout, poll_s=poll_s):
        yield _from_view(snap, e["view"], e["installed_at"], e["member"])
