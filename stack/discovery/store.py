"""The discovery store interfaces (no I/O here).

A store holds small named objects (members files) per cluster: ``<location>/<cluster>/<name>``.
Two faces of the same four operations:

* ``StoreClient``: what the sans-IO discovery layer calls. Every call returns at once; the
  result comes later through ``cb(result, error)``, run on the stack's own loop (the asyncio
  runtime's loop, the simulator's clock). Exactly one of ``result``/``error`` is meaningful:
  ``error`` is None on success, else a ``StoreError``.
* ``BlockingStore``: a store that does real I/O and blocks (stack/runtime/stores.py: a
  directory, S3 through boto3; actors/: Ray's internal KV). The asyncio runtime wraps one in
  a thread pool to get a ``StoreClient``.

Results: ``list`` -> ``{name: etag}``; ``get`` -> ``(data, etag)`` or None when absent;
``put`` -> the new etag; ``delete`` -> None (deleting an absent object succeeds). Conditional
``put``: ``if_absent=True`` creates only if absent; ``if_match=etag`` replaces only that
version; either failing is a ``StoreConflict``. A store that cannot be reached (after its own
retries) reports ``StoreUnavailable``.

``MemoryStore`` is an in-memory ``BlockingStore`` for one thread (the simulator, tests; the
runtime's ``memory://`` URLs call it under a lock);
``ScheduledStoreClient`` turns one into a ``StoreClient`` on any scheduler (the simulator's
virtual clock), counting calls.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, Callable, Optional, Protocol

from ..errors import RaygroupsError

Callback = Callable[[Any, Optional[BaseException]], None]
KINDS = ("list", "get", "put", "delete")


class StoreError(RaygroupsError):
    """A discovery store operation failed."""


class StoreConflict(StoreError):
    """A conditional write lost: the object exists (``if_absent``) or changed (``if_match``).
    Re-read, merge, write again."""


class StoreUnavailable(StoreError):
    """The store could not be reached or failed, after its retries."""


def content_etag(data: bytes) -> str:
    """The etag stores without their own use: the MD5 of the content, quoted like S3's."""
    return '"' + hashlib.md5(data).hexdigest() + '"'


class StoreClient(Protocol):
    """The non-blocking face the discovery layer uses (see the module doc)."""

    def list(self, cluster: str, cb: Callback) -> None: ...

    def get(self, cluster: str, name: str, cb: Callback) -> None: ...

    def put(self, cluster: str, name: str, data: bytes, cb: Callback, if_absent: bool = False,
            if_match: Optional[str] = None) -> None: ...

    def delete(self, cluster: str, name: str, cb: Callback) -> None: ...


class BlockingStore(Protocol):
    """A store doing real I/O; raises StoreConflict / StoreUnavailable."""

    calls: Counter

    def list(self, cluster: str) -> dict: ...

    def get(self, cluster: str, name: str) -> Optional[tuple]: ...

    def put(self, cluster: str, name: str, data: bytes, if_absent: bool = False,
            if_match: Optional[str] = None) -> str: ...

    def delete(self, cluster: str, name: str) -> None: ...


class MemoryStore:
    """In-memory BlockingStore with the same conditional semantics as the real ones.

    ``unavailable = True`` makes every call fail with StoreUnavailable (an outage);
    ``calls`` counts calls by kind (failed ones too). Not thread-safe: callers on several
    threads serialize their calls (stack/runtime/stores.py does for ``memory://``)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, tuple[bytes, str]]] = {}
        self.unavailable = False
        self.calls: Counter = Counter()

    def _check(self, kind: str) -> None:
        self.calls[kind] += 1
        if self.unavailable:
            raise StoreUnavailable(f"store unavailable ({kind})")

    def list(self, cluster: str) -> dict:
        self._check("list")
        return {n: e for n, (_, e) in self.objects.get(cluster, {}).items()}

    def get(self, cluster: str, name: str) -> Optional[tuple]:
        self._check("get")
        return self.objects.get(cluster, {}).get(name)

    def put(self, cluster: str, name: str, data: bytes, if_absent: bool = False,
            if_match: Optional[str] = None) -> str:
        self._check("put")
        objs = self.objects.setdefault(cluster, {})
        cur = objs.get(name)
        if if_absent and cur is not None:
            raise StoreConflict(f"{cluster}/{name} exists")
        if if_match is not None and (cur is None or cur[1] != if_match):
            raise StoreConflict(f"{cluster}/{name} changed")
        etag = content_etag(bytes(data))
        objs[name] = (bytes(data), etag)
        return etag

    def delete(self, cluster: str, name: str) -> None:
        self._check("delete")
        self.objects.get(cluster, {}).pop(name, None)

    # -- for tests and the simulator (not counted) --------------------------------------
    def files(self, cluster: str) -> dict:
        """{name: text} of a cluster's objects."""
        return {n: d.decode() for n, (d, _) in sorted(self.objects.get(cluster, {}).items())}


class ScheduledStoreClient:
    """A StoreClient over a BlockingStore that never blocks for long (MemoryStore), on any
    scheduler: each call runs ``delay()`` later via ``schedule(delay, fn)`` (the simulator's
    virtual clock), then calls back. ``calls`` counts this client's calls by kind."""

    def __init__(self, store: Any, schedule: Callable[[float, Callable[[], None]], Any],
                 delay: Callable[[], float] = lambda: 0.0, calls: Optional[Counter] = None):
        self.store = store
        self.schedule = schedule
        self.delay = delay
        self.calls = calls if calls is not None else Counter()

    def _run(self, kind: str, op: Callable[[], Any], cb: Callback) -> None:
        self.calls[kind] += 1

        def run() -> None:
            try:
                result = op()
            except StoreError as e:
                cb(None, e)
                return
            cb(result, None)
        self.schedule(self.delay(), run)

    def list(self, cluster: str, cb: Callback) -> None:
        self._run("list", lambda: self.store.list(cluster), cb)

    def get(self, cluster: str, name: str, cb: Callback) -> None:
        self._run("get", lambda: self.store.get(cluster, name), cb)

    def put(self, cluster: str, name: str, data: bytes, cb: Callback, if_absent: bool = False,
            if_match: Optional[str] = None) -> None:
        self._run("put", lambda: self.store.put(cluster, name, data, if_absent=if_absent,
                                                 if_match=if_match), cb)

    def delete(self, cluster: str, name: str, cb: Callback) -> None:
        self._run("delete", lambda: self.store.delete(cluster, name), cb)
