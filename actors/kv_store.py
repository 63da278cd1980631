"""``ray-kv://[prefix]``: members files in Ray's internal KV (the GCS), for discovery on Ray.

Registered with the stack's store registry when ``raygroups.actors`` is imported, so
``StackConfig.local(discovery="ray-kv://")`` works in any process attached to a Ray cluster
(a driver, an actor). Keys ``<prefix>/<cluster>/<name>`` in namespace ``raygroups`` (prefix
``raygroups`` by default); values are the members files' text. Ray's KV is reached through
ray_compat.RayKV (Ray has no public API for it).

Conditional writes: create-only is the KV's own ``overwrite=False`` (atomic in the GCS);
replace-only-this-version takes a per-object lock key (created with ``overwrite=False``, so
one holder at a time; a lock older than ``LOCK_STALE_S`` is a crashed holder's and is broken),
compares the etag (MD5 of the value) and writes. Failures to reach the GCS are retried
(tenacity, like every store) and then reported as ``StoreUnavailable``.
"""
from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, urlsplit

from raygroups.stack.discovery.store import StoreConflict, StoreUnavailable, content_etag
from raygroups.stack.runtime.stores import DEFAULT_RETRY_S, RetryingStore, register_store

from .ray_compat import RayKV

LOCK_STALE_S = 10.0


class RayKVStore(RetryingStore):
    def __init__(self, prefix: str = "raygroups", retry_s: float = DEFAULT_RETRY_S):
        self.prefix = prefix.strip("/") or "raygroups"
        self.retry_s = retry_s
        self.calls: Counter = Counter()
        self.attempts: Counter = Counter()

    @classmethod
    def from_url(cls, url: str) -> "RayKVStore":
        parts = urlsplit(url)
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return cls((parts.netloc + parts.path).strip("/") or "raygroups",
                   retry_s=float(q.get("retry_s", DEFAULT_RETRY_S)))

    def __repr__(self) -> str:
        return f"RayKVStore({self.prefix!r})"

    def _key(self, cluster: str, name: str) -> bytes:
        return "/".join(p for p in (self.prefix, cluster, name) if p).encode()

    def _lock_key(self, cluster: str, name: str) -> bytes:
        return "/".join(p for p in (self.prefix, ".locks", cluster, name) if p).encode()

    def _op(self, fn: Callable[[RayKV], Any]) -> Any:
        try:
            kv = RayKV()
        except RuntimeError as e:
            raise StoreUnavailable(str(e)) from None
        try:
            return fn(kv)
        except (StoreConflict, StoreUnavailable):
            raise
        except Exception as e:  # GCS RPC failures, connection errors
            raise StoreUnavailable(f"ray internal KV: {type(e).__name__}: {e}") from e

    def list(self, cluster: str) -> dict:
        pfx = self._key(cluster, "") + b"/"

        def op(kv) -> dict:
            out = {}
            for key in kv.keys(pfx):
                name = key[len(pfx):].decode()
                if not name or "/" in name or name.startswith("."):
                    continue
                val = kv.get(key)
                if val is not None:
                    out[name] = content_etag(val)
            return out
        return self._retry("list", lambda: self._op(op))

    def get(self, cluster: str, name: str) -> Optional[tuple]:
        key = self._key(cluster, name)

        def op(kv):
            val = kv.get(key)
            return None if val is None else (val, content_etag(val))
        return self._retry("get", lambda: self._op(op))

    def put(self, cluster: str, name: str, data: bytes, if_absent: bool = False,
            if_match: Optional[str] = None) -> str:
        key, data = self._key(cluster, name), bytes(data)

        def op(kv) -> str:
            if if_absent:
                if kv.put(key, data, overwrite=False):
                    raise StoreConflict(f"ray-kv {key.decode()} exists")
            elif if_match is not None:
                with _KVLock(kv, self._lock_key(cluster, name)):
                    cur = kv.get(key)
                    if cur is None or content_etag(cur) != if_match:
                        raise StoreConflict(f"ray-kv {key.decode()} changed")
                    kv.put(key, data)
            else:
                kv.put(key, data)
            return content_etag(data)
        return self._retry("put", lambda: self._op(op))

    def delete(self, cluster: str, name: str) -> None:
        key = self._key(cluster, name)
        self._retry("delete", lambda: self._op(lambda kv: kv.delete(key)))


class _KVLock:
    def __init__(self, kv: RayKV, key: bytes, wait_s: float = 5.0):
        self.kv, self.key, self.wait_s = kv, key, wait_s

    def __enter__(self) -> "_KVLock":
        kv, deadline = self.kv, time.monotonic() + self.wait_s
        while True:
            stamp = repr(time.time()).encode()
            if not kv.put(self.key, stamp, overwrite=False):
                return self
            held = kv.get(self.key)
            try:
                age = time.time() - float(held or b"0")
            except ValueError:
                age = LOCK_STALE_S
            if age >= LOCK_STALE_S:  # its holder crashed: break it
                kv.delete(self.key)
                continue
            if time.monotonic() > deadline:
                raise StoreUnavailable(f"ray-kv lock {self.key.decode()} busy")
            time.sleep(random.uniform(0.002, 0.02))

    def __exit__(self, *exc) -> None:
        self.kv.delete(self.key)


def register() -> None:
    register_store("ray-kv", RayKVStore.from_url)
