"""Discovery stores that do real I/O (blocking), and the asyncio glue around them.

* ``DirectoryStore`` (``file:///shared/dir``): one file per object under ``<dir>/<cluster>/``.
  Writes go to a temporary file and are renamed into place (``os.replace``: readers see the
  old or the new file, never half of one); create-only is ``os.link`` of that complete
  temporary file (fails if the name exists; ``O_EXCL`` where links are not supported);
  replace-only-this-version holds an ``flock`` on ``<dir>/<cluster>/.lock`` while it compares
  the etag (the MD5 of the content) and renames. A missing root directory (an unmounted
  share) is an outage, not an empty store.
* ``S3Store`` (``s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000``): boto3; create-only
  is ``IfNoneMatch="*"``, replace-only-this-version ``IfMatch=<etag>``; a 412 (or 409) is a
  ``StoreConflict``. Query options: ``endpoint_url``, ``region``, ``aws_access_key_id``,
  ``aws_secret_access_key``, ``timeout_s`` (connect/read), ``retry_s``.
* ``ray-kv://`` (Ray's internal KV) lives in actors/ (stack/ never imports ray) and registers
  itself with ``register_store`` when ``raygroups.actors`` is imported.
* ``memory://name``: a process-wide ``MemoryStore`` per name (tests), one call at a time.

Every store retries transient failures with tenacity: jittered exponential backoff, bounded
in total by ``retry_s`` (URL query option, default 5 s), then ``StoreUnavailable``. Every store
counts its calls by kind in ``calls`` (``attempts`` counts tries, retries included).

``CachingStore`` fronts one store per process (``shared_store(url)``) or per Ray node (the
DiscoverySupervisor): counts calls, coalesces concurrent reads of the same object into one,
and while the store is down answers reads from the last copy it had (logging one warning).
``ThreadedStoreClient`` is the ``StoreClient`` of the asyncio runtime: it runs a blocking
store's calls on a thread pool and delivers each result on the loop with
``loop.call_soon_threadsafe``.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import os
import threading
import time
import uuid
from collections import Counter
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, unquote, urlsplit

from tenacity import (Retrying, retry_if_exception_type, stop_after_delay,
                      wait_random_exponential)

from ..discovery.members_file import Entry, MembersFile
from ..discovery.store import (MemoryStore, StoreConflict, StoreError, StoreUnavailable,
                               content_etag)

log = logging.getLogger("raygroups.discovery")

DEFAULT_RETRY_S = 5.0
_executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
_executor_lock = threading.Lock()


def private_opener(path: str, flags: int) -> int:
    """``open(..., opener=private_opener)``: a new file readable by its owner only (0600):
    members files name every member's address, bootstrap files too."""
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)  # also when it existed with wider permissions
    return fd



def executor() -> concurrent.futures.ThreadPoolExecutor:
    """The process's thread pool for blocking store calls."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=16, thread_name_prefix="raygroups-store")
        return _executor


# -- retries ------------------------------------------------------------------------------
class RetryingStore:
    """Mixin of the blocking stores: ``self._retry(kind, fn)`` counts the call in ``calls``
    and retries StoreUnavailable (tenacity: jittered exponential backoff, at most
    ``retry_s`` in total), counting every try in ``attempts``."""

    retry_s: float = DEFAULT_RETRY_S
    calls: Counter
    attempts: Counter

    def _retry(self, kind: str, fn: Callable[[], Any]) -> Any:
        self.calls[kind] += 1
        for attempt in Retrying(stop=stop_after_delay(self.retry_s),
                                wait=wait_random_exponential(multiplier=0.05, max=1.0),
                                retry=retry_if_exception_type(StoreUnavailable), reraise=True):
            with attempt:
                self.attempts[kind] += 1
                return fn()


# -- a local or shared directory ----------------------------------------------------------
class DirectoryStore(RetryingStore):
    def __init__(self, root: str, retry_s: float = DEFAULT_RETRY_S):
        self.root = os.path.abspath(root)
        self.retry_s = retry_s
        self.calls: Counter = Counter()
        self.attempts: Counter = Counter()
        os.makedirs(self.root, exist_ok=True)

    def __repr__(self) -> str:
        return f"DirectoryStore({self.root!r})"

    def _dir(self, cluster: str) -> str:
        if not os.path.isdir(self.root):
            raise StoreUnavailable(f"store directory {self.root} is missing (not mounted?)")
        return os.path.join(self.root, cluster) if cluster else self.root

    @staticmethod
    def _io(e: OSError) -> StoreUnavailable:
        return StoreUnavailable(f"{type(e).__name__}: {e}")

    def list(self, cluster: str) -> dict:
        def op() -> dict:
            d = self._dir(cluster)
            out = {}
            try:
                names = os.listdir(d)
            except FileNotFoundError:
                return {}
            except OSError as e:
                raise self._io(e) from e
            for n in names:
                if n.startswith("."):
                    continue  # temporary and lock files
                try:
                    with open(os.path.join(d, n), "rb") as f:
                        out[n] = content_etag(f.read())
                except (FileNotFoundError, IsADirectoryError):
                    continue
                except OSError as e:
                    raise self._io(e) from e
            return out
        return self._retry("list", op)

    def get(self, cluster: str, name: str) -> Optional[tuple]:
        def op():
            path = os.path.join(self._dir(cluster), name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                if not os.path.isdir(self.root):
                    raise StoreUnavailable(f"store directory {self.root} is missing") from None
                return None
            except OSError as e:
                raise self._io(e) from e
            return data, content_etag(data)
        return self._retry("get", op)

    def put(self, cluster: str, name: str, data: bytes, if_absent: bool = False,
            if_match: Optional[str] = None) -> str:
        def op() -> str:
            d = self._dir(cluster)
            try:
                os.makedirs(d, mode=0o700, exist_ok=True)
                tmp = os.path.join(d, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
                with open(tmp, "wb", opener=private_opener) as f:
                    f.write(data)
            except OSError as e:
                raise self._io(e) from e
            final = os.path.join(d, name)
            try:
                with _DirLock(d):
                    if if_absent:
                        self._create(tmp, final, data)
                    else:
                        if if_match is not None:
                            cur = self._etag(final)
                            if cur != if_match:
                                raise StoreConflict(f"{cluster}/{name} changed "
                                                    f"({cur} != {if_match})")
                        os.replace(tmp, final)
            except StoreError:
                raise
            except OSError as e:
                raise self._io(e) from e
            finally:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            return content_etag(data)
        return self._retry("put", op)

    @staticmethod
    def _create(tmp: str, final: str, data: bytes) -> None:
        try:
            os.link(tmp, final)  # atomic, exclusive, with the whole content
            return
        except FileExistsError:
            raise StoreConflict(f"{final} exists") from None
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
                raise
        try:  # no hard links here: O_EXCL (the lock keeps our own writers out meanwhile)
            fd = os.open(final, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            raise StoreConflict(f"{final} exists") from None
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    @staticmethod
    def _etag(path: str) -> Optional[str]:
        try:
            with open(path, "rb") as f:
                return content_etag(f.read())
        except FileNotFoundError:
            return None

    def delete(self, cluster: str, name: str) -> None:
        def op() -> None:
            d = self._dir(cluster)
            try:
                with _DirLock(d, create=False):
                    os.unlink(os.path.join(d, name))
            except FileNotFoundError:
                return
            except OSError as e:
                raise self._io(e) from e
        return self._retry("delete", op)


class _DirLock:
    """An exclusive flock on ``<dir>/.lock`` (also between processes)."""

    def __init__(self, d: str, create: bool = True):
        self.path = os.path.join(d, ".lock")
        self.create = create
        self.fd: Optional[int] = None

    def __enter__(self) -> "_DirLock":
        import fcntl
        flags = os.O_RDWR | (os.O_CREAT if self.create else 0)
        try:
            self.fd = os.open(self.path, flags, 0o600)
        except FileNotFoundError:
            if self.create:
                raise
            return self  # nothing to delete in a directory that does not exist
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            import fcntl
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


# -- S3 and S3-compatible stores ----------------------------------------------------------
class S3Store(RetryingStore):
    def __init__(self, bucket: str, prefix: str = "", retry_s: float = DEFAULT_RETRY_S,
                 timeout_s: float = 5.0, **client_kw: Any):
        import boto3
        from botocore.config import Config
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.retry_s = retry_s
        self.calls: Counter = Counter()
        self.attempts: Counter = Counter()
        client_kw.setdefault("region_name", "us-east-1")
        # tenacity retries; botocore's own retries would multiply the time bound
        cfg = Config(retries={"max_attempts": 1, "mode": "standard"},
                     connect_timeout=timeout_s, read_timeout=timeout_s)
        self.client = boto3.client("s3", config=cfg, **client_kw)

    def __repr__(self) -> str:
        return f"S3Store({self.bucket!r}, {self.prefix!r})"

    def _key(self, cluster: str, name: str) -> str:
        return "/".join(p for p in (self.prefix, cluster, name) if p)

    def _translate(self, e: Exception) -> StoreError:
        from botocore.exceptions import ClientError
        if isinstance(e, ClientError):
            code = e.response.get("Error", {}).get("Code", "")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status in (412, 409) or code in ("PreconditionFailed",
                                                 "ConditionalRequestConflict"):
                return StoreConflict(f"s3://{self.bucket}: {code or status}")
            if status >= 500 or code in ("SlowDown", "Throttling", "RequestTimeout"):
                return StoreUnavailable(f"s3://{self.bucket}: {code or status}")
            return StoreError(f"s3://{self.bucket}: {code or status}: {e}")
        return StoreUnavailable(f"s3://{self.bucket}: {type(e).__name__}: {e}")

    def _s3(self, fn: Callable[[], Any]) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            return fn()
        except (ClientError, BotoCoreError, OSError) as e:
            raise self._translate(e) from e

    def list(self, cluster: str) -> dict:
        pfx = self._key(cluster, "") + "/" if (self.prefix or cluster) else ""

        def op() -> dict:
            out, token = {}, None
            while True:
                kw = {"Bucket": self.bucket, "Prefix": pfx}
                if token:
                    kw["ContinuationToken"] = token
                r = self._s3(lambda: self.client.list_objects_v2(**kw))
                for o in r.get("Contents", ()):
                    name = o["Key"][len(pfx):]
                    if name and "/" not in name:
                        out[name] = o["ETag"]
                if not r.get("IsTruncated"):
                    return out
                token = r.get("NextContinuationToken")
        return self._retry("list", op)

    def get(self, cluster: str, name: str) -> Optional[tuple]:
        from botocore.exceptions import ClientError

        def op():
            try:
                r = self.client.get_object(Bucket=self.bucket, Key=self._key(cluster, name))
                return r["Body"].read(), r["ETag"]
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return None
                raise self._translate(e) from e
            except Exception as e:
                raise self._translate(e) from e
        return self._retry("get", op)

    def put(self, cluster: str, name: str, data: bytes, if_absent: bool = False,
            if_match: Optional[str] = None) -> str:
        from botocore.exceptions import ClientError
        kw: dict = {"Bucket": self.bucket, "Key": self._key(cluster, name), "Body": data}
        if if_absent:
            kw["IfNoneMatch"] = "*"
        if if_match is not None:
            kw["IfMatch"] = if_match

        def op() -> str:
            try:
                return self.client.put_object(**kw)["ETag"]
            except ClientError as e:
                if if_match is not None and e.response.get("Error", {}).get("Code") == "NoSuchKey":
                    raise StoreConflict(f"s3://{self.bucket}/{kw['Key']} is gone") from e
                raise self._translate(e) from e
            except Exception as e:
                raise self._translate(e) from e
        return self._retry("put", op)

    def delete(self, cluster: str, name: str) -> None:
        key = self._key(cluster, name)

        def op() -> None:
            self._s3(lambda: self.client.delete_object(Bucket=self.bucket, Key=key))
        self._retry("delete", op)


# -- the URL-scheme registry --------------------------------------------------------------
_factories: dict[str, Callable[[str], Any]] = {}
_shared: dict[str, "CachingStore"] = {}
_memory: dict[str, "SerializedStore"] = {}
_shared_lock = threading.Lock()


def register_store(scheme: str, factory: Callable[[str], Any]) -> None:
    """Make ``<scheme>://...`` URLs open ``factory(url)`` (a BlockingStore)."""
    _factories[scheme] = factory


def _query(url: str) -> tuple:
    parts = urlsplit(url)
    q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return parts, q


def _file_factory(url: str) -> DirectoryStore:
    parts, q = _query(url)
    path = unquote(parts.netloc + parts.path) or "."
    return DirectoryStore(path, retry_s=float(q.get("retry_s", DEFAULT_RETRY_S)))


def _s3_factory(url: str) -> S3Store:
    parts, q = _query(url)
    kw: dict = {}
    for k in ("endpoint_url", "aws_access_key_id", "aws_secret_access_key",
              "aws_session_token"):
        if k in q:
            kw[k] = q[k]
    if "region" in q or "region_name" in q:
        kw["region_name"] = q.get("region", q.get("region_name"))
    return S3Store(parts.netloc, parts.path, retry_s=float(q.get("retry_s", DEFAULT_RETRY_S)),
                   timeout_s=float(q.get("timeout_s", 5.0)), **kw)


class SerializedStore:
    """A BlockingStore that is not thread-safe (``MemoryStore``), called one call at a time
    from the thread pool."""

    def __init__(self, store: Any):
        self.store = store
        self._lock = threading.Lock()

    def list(self, cluster: str) -> dict:
        with self._lock:
            return self.store.list(cluster)

    def get(self, cluster: str, name: str) -> Optional[tuple]:
        with self._lock:
            return self.store.get(cluster, name)

    def put(self, cluster: str, name: str, data: bytes, if_absent: bool = False,
            if_match: Optional[str] = None) -> str:
        with self._lock:
            return self.store.put(cluster, name, data, if_absent=if_absent, if_match=if_match)

    def delete(self, cluster: str, name: str) -> None:
        with self._lock:
            self.store.delete(cluster, name)


def _memory_factory(url: str) -> SerializedStore:
    name = urlsplit(url).netloc + urlsplit(url).path
    with _shared_lock:
        return _memory.setdefault(name, SerializedStore(MemoryStore()))


register_store("file", _file_factory)
register_store("s3", _s3_factory)
register_store("memory", _memory_factory)


def outlives_cluster(url: Optional[str]) -> bool:
    """Whether what the store at ``url`` holds outlives every member of a group (a
    directory, a bucket), as a durable queue's journals do; not Ray's KV, lost with the
    cluster, nor an in-process memory store."""
    return url is not None and (urlsplit(url).scheme if "://" in url else "file") in \
        ("file", "s3")


def open_store(url: str) -> Any:
    """A new BlockingStore for ``url`` (see the module doc for the schemes)."""
    scheme = urlsplit(url).scheme if "://" in url else "file"
    if "://" not in url:
        url = "file://" + os.path.abspath(url)
    factory = _factories.get(scheme)
    if factory is None:
        hint = " (import raygroups.actors to register it)" if scheme == "ray-kv" else ""
        raise ValueError(f"no discovery store for scheme {scheme!r}{hint}; known: "
                         f"{sorted(_factories)}")
    return factory(url)


def shared_store(url: str) -> "CachingStore":
    """This process's one CachingStore for ``url`` (every channel shares its calls, its
    coalescing and its cache)."""
    with _shared_lock:
        s = _shared.get(url)
    if s is None:
        s = CachingStore(open_store(url), url)
        with _shared_lock:
            s = _shared.setdefault(url, s)
    return s


# -- counting, coalescing, caching front --------------------------------------------------
class CachingStore:
    """A BlockingStore in front of another (see the module doc).

    ``calls``: calls made to the store, by kind; ``requests``: calls received;
    ``coalesced``: reads that waited for an identical read in flight instead of calling;
    ``cached``: reads answered from a copy younger than ``ttl_s``; ``stale``: reads
    answered from the last copy because the store was down."""

    def __init__(self, inner: Any, url: str = "", ttl_s: float = 0.0):
        self.inner, self.url, self.ttl_s = inner, url, ttl_s
        self.calls: Counter = Counter()
        self.requests: Counter = Counter()
        self.coalesced: Counter = Counter()
        self.cached: Counter = Counter()
        self.stale: Counter = Counter()
        self._cache: dict = {}     # key -> (value, monotonic time)
        self._inflight: dict = {}  # key -> Future
        self._lock = threading.Lock()
        self.down = False

    def __repr__(self) -> str:
        return f"CachingStore({self.inner!r})"

    def _read(self, kind: str, key: tuple, fn: Callable[[], Any]) -> Any:
        with self._lock:
            self.requests[kind] += 1
            hit = self._cache.get(key)
            if hit is not None and self.ttl_s > 0 and time.monotonic() - hit[1] < self.ttl_s:
                self.cached[kind] += 1
                return hit[0]
            fut = self._inflight.get(key)
            leader = fut is None
            if leader:
                fut = self._inflight[key] = concurrent.futures.Future()
        if not leader:
            self.coalesced[kind] += 1
            return fut.result()
        try:
            self.calls[kind] += 1
            value = fn()
        except StoreUnavailable as e:
            with self._lock:
                self._inflight.pop(key, None)
                hit = self._cache.get(key)
            self._went_down(e)
            if hit is not None:
                self.stale[kind] += 1
                fut.set_result(hit[0])
                return hit[0]
            fut.set_exception(e)
            raise
        except BaseException as e:
            with self._lock:
                self._inflight.pop(key, None)
            fut.set_exception(e)
            raise
        with self._lock:
            self._cache[key] = (value, time.monotonic())
            self._inflight.pop(key, None)
        self._came_back()
        fut.set_result(value)
        return value

    def _went_down(self, e: Exception) -> None:
        if not self.down:
            self.down = True
            log.warning("discovery store %s unavailable (%s); answering reads from the last "
                        "copies until it is back", self.url or self.inner, e)

    def _came_back(self) -> None:
        if self.down:
            self.down = False
            log.warning("discovery store %s is reachable again", self.url or self.inner)

    def list(self, cluster: str) -> dict:
        return dict(self._read("list", ("list", cluster), lambda: self.inner.list(cluster)))

    def get(self, cluster: str, name: str) -> Optional[tuple]:
        return self._read("get", ("get", cluster, name), lambda: self.inner.get(cluster, name))

    def _write(self, kind: str, fn: Callable[[], Any], cluster: str, name: str,
               after: Callable[[Any], None]) -> Any:
        with self._lock:
            self.requests[kind] += 1
            self.calls[kind] += 1
        try:
            result = fn()
        except StoreConflict:
            with self._lock:
                self._cache.pop(("get", cluster, name), None)
            raise
        except StoreUnavailable as e:
            self._went_down(e)
            raise
        self._came_back()
        with self._lock:
            after(result)
        return result

    def put(self, cluster: str, name: str, data: bytes, if_absent: bool = False,
            if_match: Optional[str] = None) -> str:
        def after(etag: str) -> None:
            now = time.monotonic()
            self._cache[("get", cluster, name)] = ((bytes(data), etag), now)
            lst = self._cache.get(("list", cluster))
            if lst is not None:
                self._cache[("list", cluster)] = ({**lst[0], name: etag}, lst[1])
        return self._write("put", lambda: self.inner.put(cluster, name, data,
                                                         if_absent=if_absent,
                                                         if_match=if_match),
                           cluster, name, after)

    def delete(self, cluster: str, name: str) -> None:
        def after(_: Any) -> None:
            self._cache.pop(("get", cluster, name), None)
            lst = self._cache.get(("list", cluster))
            if lst is not None:
                self._cache[("list", cluster)] = ({k: v for k, v in lst[0].items()
                                                   if k != name}, lst[1])
        return self._write("delete", lambda: self.inner.delete(cluster, name), cluster, name,
                           after)


# -- asyncio glue -------------------------------------------------------------------------
class ThreadedStoreClient:
    """The asyncio runtime's StoreClient: a blocking store's calls on the process's thread
    pool, each result delivered on ``loop`` (``call_soon_threadsafe``). ``calls`` counts this
    client's calls by kind; ``await drain()`` waits for the calls in flight (a leaving
    coordinator's delete) before the runtime closes."""

    def __init__(self, store: Any, loop: Optional[asyncio.AbstractEventLoop] = None):
        self.store = store
        self.loop = loop or asyncio.get_running_loop()
        self.calls: Counter = Counter()
        self.pending: set = set()

    def _submit(self, kind: str, fn: Callable[[], Any], cb: Callable) -> None:
        self.calls[kind] += 1
        fut = executor().submit(fn)
        self.pending.add(fut)

        def done(f: concurrent.futures.Future) -> None:
            self.pending.discard(f)
            try:
                result, error = f.result(), None
            except StoreError as e:
                result, error = None, e
            except Exception as e:  # a store bug or an unexpected library error
                result, error = None, StoreUnavailable(f"{kind}: {type(e).__name__}: {e}")
            try:
                self.loop.call_soon_threadsafe(cb, result, error)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for this result any more
        fut.add_done_callback(done)

    def list(self, cluster: str, cb: Callable) -> None:
        self._submit("list", lambda: self.store.list(cluster), cb)

    def get(self, cluster: str, name: str, cb: Callable) -> None:
        self._submit("get", lambda: self.store.get(cluster, name), cb)

    def put(self, cluster: str, name: str, data: bytes, cb: Callable, if_absent: bool = False,
            if_match: Optional[str] = None) -> None:
        self._submit("put", lambda: self.store.put(cluster, name, data, if_absent=if_absent,
                                                   if_match=if_match), cb)

    def delete(self, cluster: str, name: str, cb: Callable) -> None:
        self._submit("delete", lambda: self.store.delete(cluster, name), cb)

    async def drain(self, timeout: float = 2.0) -> None:
        """Until no call is in flight, or ``timeout``: a result's callback may make another
        call (a leaving coordinator's delete that waited for its write)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self.pending and loop.time() < end:
            waits = [asyncio.wrap_future(f) for f in list(self.pending)]
            for w in waits:  # outcomes already went to the callbacks: only wait here
                w.add_done_callback(_consume)
            await asyncio.wait(waits, timeout=end - loop.time())
            await asyncio.sleep(0)  # the callbacks scheduled with the results run first


def _consume(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


# -- members files by path or URL (bootstrap files) ---------------------------------------
def _split_object_url(spec: str) -> tuple[str, str]:
    """``s3://b/p/c/1.list?q`` -> (``s3://b/p/c?q``, ``1.list``)."""
    parts = urlsplit(spec)
    head, _, name = parts.path.rpartition("/")
    if not name:
        raise ValueError(f"no file name in {spec!r}")
    return _unsplit(parts.scheme, parts.netloc, head, parts.query), name


def _unsplit(scheme: str, netloc: str, path: str, query: str) -> str:
    """Like urlunsplit, but keeps ``//`` with an empty netloc (``ray-kv:///c/1.list``)."""
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def read_members_file(spec: str) -> MembersFile:
    """Load a members file from a local path or a store URL (blocking). Raises
    FileNotFoundError when it does not exist; malformed lines are in ``.errors``."""
    if "://" not in spec or spec.startswith("file://"):
        path = unquote(urlsplit(spec).netloc + urlsplit(spec).path) if "://" in spec else spec
        with open(path, "rb") as f:
            return MembersFile.parse(f.read(), source=path)
    store_url, name = _split_object_url(spec)
    got = open_store(store_url).get("", name)
    if got is None:
        raise FileNotFoundError(spec)
    return MembersFile.parse(got[0], source=spec)


def write_members_file(spec: str, mf: MembersFile) -> str:
    """Write a members file to a local path or a store URL (unconditionally); returns spec."""
    if "://" not in spec or spec.startswith("file://"):
        path = unquote(urlsplit(spec).netloc + urlsplit(spec).path) if "://" in spec else spec
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, mode=0o700, exist_ok=True)
        tmp = os.path.join(d, f".{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "wb", opener=private_opener) as f:
            f.write(mf.encode())
        os.replace(tmp, path)
        return spec
    store_url, name = _split_object_url(spec)
    open_store(store_url).put("", name, mf.encode())
    return spec


def members_file_url(store_url: str, cluster: str, name: str) -> str:
    """The URL of ``<cluster>/<name>`` in the store at ``store_url`` (query kept)."""
    if "://" not in store_url:
        return os.path.join(store_url, cluster, name)
    parts = urlsplit(store_url)
    path = "/".join(p for p in (parts.path.rstrip("/"), cluster, name) if p)
    if not path.startswith("/"):
        path = "/" + path
    return _unsplit(parts.scheme, parts.netloc, path, parts.query)


_claimed: set = set()
_claimed_lock = threading.Lock()


def claim_identity(mf: MembersFile, cluster: str, name: Optional[str]) -> Optional[Entry]:
    """The line this member takes from the bootstrap file, once per process: the line of
    logical name ``name``, or without a name the first line in file order not taken yet.
    None: no line left (or ``name`` is not in the file): the member takes a random UUID and
    announces itself when it joins."""
    with _claimed_lock:
        for e in mf.entries:
            if (cluster, e.uid) in _claimed:
                continue
            if name is None or e.name == name:
                _claimed.add((cluster, e.uid))
                return e
        return None


async def prepare_channel(config: Any, cluster: str, name: str, named: bool,
                          store: Any = None) -> tuple:
    """What ``Channel.connect`` needs for store discovery: ``(config, uid, name, store)``.

    Opens the store client (``store`` given: used as is; else the process's shared store
    for ``config.store.url`` on the thread pool), loads a bootstrap file given by path or URL
    (failures are logged; the member then discovers as usual) and takes this member's line
    from it (``claim_identity``: by ``name`` if the channel was named, else the next line in
    file order): its UUID, logical name and port (unless a port was configured)."""
    st = getattr(config, "store", None)
    if st is None:
        return config, None, name, store
    loop = asyncio.get_running_loop()
    if store is None and st.url:
        store = ThreadedStoreClient(shared_store(st.url), loop)
    boot = st.bootstrap
    if boot is not None and not isinstance(boot, MembersFile):
        try:
            boot = await loop.run_in_executor(executor(), read_members_file, str(boot))
        except (OSError, StoreError, ValueError) as e:
            log.warning("[%s %s] bootstrap file %s not loaded (%s); discovering instead",
                        cluster, name, st.bootstrap, e)
            boot = None
        config = config.with_options(store__bootstrap=boot)
    if boot is not None and boot.errors:
        for err in boot.errors:
            log.warning("[%s %s] bootstrap file line skipped: %s", cluster, name, err)
    uid = None
    if boot is not None and st.use_bootstrap_identity:
        e = claim_identity(boot, cluster, name if named else None)
        if e is not None:
            uid, name = e.uid, e.name
            if not config.transport.port:
                config = config.with_options(port=e.port)
    return config, uid, name, store
