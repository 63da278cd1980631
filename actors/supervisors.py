"""Supervisor actors for store discovery and bootstrap files (JGroups cloud-store discovery).

``DiscoverySupervisor``: one per Ray node (node affinity, ``num_cpus=0``), the only thing
that calls the discovery store in a Ray deployment. Members on its node talk to it through
``SupervisorStoreClient`` (a ``StoreClient``: ``Channel(..., store=SupervisorStoreClient(h))``).
It caches the members file for every member on the node (a read younger than ``ttl_s`` is
answered from the cache, a read while the store is down from the last copy), coalesces
concurrent reads of the same object into one store call, and counts every store call by kind
(list, get, put, delete). If its process dies, Ray restarts it (``max_restarts=-1``): the
members' calls fail as a store outage meanwhile (cached files are used) and go through the
same handle once it is back. Its logic is ``DiscoveryService``, plain Python: without Ray,
give channels ``ThreadedStoreClient(DiscoveryService(url).store)``.

``BootstrapSupervisor``: reads a bootstrap file (path or URL) or generates one from
``ray.nodes()``, writes it where members look for it (``<store>/<cluster>/1.list`` by default)
and starts the members in file order, each with its line's logical name, port and seeded
UUID (no discovery round); a member it restarts takes a fresh random UUID. Members are
started by a factory, ``factory(cluster, entry, config, fresh) -> member`` (a member has an
async ``close()``), e.g. the member-actor hook; the default starts plain ``Channel``s in the
supervisor's own process. Its logic is ``Bootstrapper``, usable without Ray.

Both actors are created through ``discovery_supervisor(url)`` and
``BootstrapSupervisor.options(...).remote(...)``.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
from collections import Counter
from typing import Any, Callable, Optional

import ray

from raygroups.stack import Channel, StackConfig
from raygroups.stack.discovery import MembersFile, StoreConflict, StoreError, StoreUnavailable
from raygroups.stack.discovery.bootstrap import generate_bootstrap
from raygroups.stack.discovery.members_file import file_name
from raygroups.stack.runtime.stores import (CachingStore, members_file_url, open_store,
                                            read_members_file, write_members_file)

log = logging.getLogger("raygroups.supervisors")
NAMESPACE = "raygroups"


# -- discovery ------------------------------------------------------------------------------
class DiscoveryService:
    """The DiscoverySupervisor's logic: one CachingStore (counting, coalescing, caching) in
    front of the store at ``url``. ``call(kind, *args)`` answers ``(status, value)`` with status
    "ok", "conflict" or "unavailable": results cross process boundaries as plain data."""

    def __init__(self, url: str, ttl_s: float = 1.0, store: Any = None):
        self.url = url
        self.store = CachingStore(store if store is not None else open_store(url), url, ttl_s)

    def call(self, kind: str, *args: Any, **kw: Any) -> tuple:
        if kind not in ("list", "get", "put", "delete"):
            return ("unavailable", f"unknown store call {kind!r}")
        try:
            return ("ok", getattr(self.store, kind)(*args, **kw))
        except StoreConflict as e:
            return ("conflict", str(e))
        except StoreError as e:
            return ("unavailable", str(e))
        except Exception as e:  # a store bug: report it as an outage, never crash the caller
            log.exception("discovery store %s: %s failed", self.url, kind)
            return ("unavailable", f"{type(e).__name__}: {e}")

    def counts(self) -> dict:
        s = self.store
        return {"calls": dict(s.calls), "requests": dict(s.requests),
                "coalesced": dict(s.coalesced), "cached": dict(s.cached),
                "stale": dict(s.stale)}


@ray.remote(num_cpus=0, max_concurrency=64)
class DiscoverySupervisor:
    """One per node: the only caller of the discovery store (see the module doc). Threaded
    (``max_concurrency``), so concurrent reads of the members on its node really coalesce."""

    def __init__(self, url: str, ttl_s: float = 1.0):
        self.service = DiscoveryService(url, ttl_s)

    def call(self, kind: str, args: tuple, kw: dict) -> tuple:
        return self.service.call(kind, *args, **kw)

    def counts(self) -> dict:
        return self.service.counts()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        return os.getpid()


def discovery_supervisor(url: str, node_id: Optional[str] = None, ttl_s: float = 1.0,
                         detached: bool = False) -> Any:
    """The DiscoverySupervisor of ``node_id`` (default: this process's node) for ``url``:
    found by name, or created pinned to that node (node affinity, ``num_cpus=0``)."""
    import hashlib

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    node_id = node_id or ray.get_runtime_context().get_node_id()
    tag = hashlib.sha1(url.encode()).hexdigest()[:10]
    opts: dict = dict(name=f"raygroups-discovery-{node_id[:16]}-{tag}", namespace=NAMESPACE,
                      get_if_exists=True, max_restarts=-1,
                      scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
    if detached:
        opts["lifetime"] = "detached"
    return DiscoverySupervisor.options(**opts).remote(url, ttl_s)


class SupervisorStoreClient:
    """A StoreClient that forwards every call to a DiscoverySupervisor actor; results are
    delivered on ``loop`` (the stack's). A dead supervisor reads as an outage."""

    def __init__(self, handle: Any, loop: Optional[asyncio.AbstractEventLoop] = None):
        self.handle = handle
        self.loop = loop
        self.calls: Counter = Counter()
        self.pending: set = set()

    def _submit(self, kind: str, args: tuple, kw: dict, cb: Callable) -> None:
        loop = self.loop or asyncio.get_running_loop()
        self.loop = loop
        self.calls[kind] += 1
        fut = self.handle.call.remote(kind, args, kw).future()
        self.pending.add(fut)

        def done(f: concurrent.futures.Future) -> None:
            self.pending.discard(f)
            try:
                status, value = f.result()
            except Exception as e:  # the actor died, the node went away
                status, value = "unavailable", f"discovery supervisor: {type(e).__name__}: {e}"
            if status == "ok":
                result, error = value, None
            elif status == "conflict":
                result, error = None, StoreConflict(value)
            else:
                result, error = None, StoreUnavailable(value)
            try:
                loop.call_soon_threadsafe(cb, result, error)
            except RuntimeError:
                pass  # the loop closed meanwhile
        fut.add_done_callback(done)

    def list(self, cluster: str, cb: Callable) -> None:
        self._submit("list", (cluster,), {}, cb)

    def get(self, cluster: str, name: str, cb: Callable) -> None:
        self._submit("get", (cluster, name), {}, cb)

    def put(self, cluster: str, name: str, data: bytes, cb: Callable, if_absent: bool = False,
            if_match: Optional[str] = None) -> None:
        self._submit("put", (cluster, name, bytes(data)),
                     {"if_absent": if_absent, "if_match": if_match}, cb)

    def delete(self, cluster: str, name: str, cb: Callable) -> None:
        self._submit("delete", (cluster, name), {}, cb)

    async def drain(self, timeout: float = 2.0) -> None:
        if self.pending:
            await asyncio.wait([asyncio.wrap_future(f) for f in list(self.pending)],
                               timeout=timeout)


# -- bootstrap ------------------------------------------------------------------------------
class ChannelMember:
    """The default member: a Channel in this process."""

    def __init__(self, channel: Channel):
        self.channel = channel

    async def close(self) -> None:
        await self.channel.close()

    async def crash(self) -> None:
        """kill -9 for tests: stop without leaving."""
        self.channel.stack.stop()
        await self.channel.runtime.close()

    @property
    def view(self):
        return self.channel.view

    @property
    def address(self):
        return self.channel.address


async def channel_factory(cluster: str, entry: Any, config: StackConfig, fresh: bool,
                          store: Any = None) -> ChannelMember:
    """Start a Channel in this process for a bootstrap line (``fresh``: a restart, so a
    random UUID); returns once it joined."""
    ch = Channel(cluster, entry.name, config, store=store)
    await ch.connect()
    return ChannelMember(ch)


class Bootstrapper:
    """The BootstrapSupervisor's logic (see the module doc), usable without Ray.

    ``discovery``: the store URL members use (None: the bootstrap file alone); ``bootstrap``:
    a path/URL to read it from, or a MembersFile; ``options``: more ``StackConfig.local``
    options for every member (e.g. ``transport="tcp"``, timers)."""

    def __init__(self, cluster: str, discovery: Optional[str] = None, bootstrap: Any = None,
                 options: Optional[dict] = None, factory: Optional[Callable] = None,
                 preset: str = "local"):
        self.cluster = cluster
        self.discovery = discovery
        self.source = bootstrap if isinstance(bootstrap, str) else None
        self.file: Optional[MembersFile] = bootstrap if isinstance(bootstrap, MembersFile) else None
        self.options = dict(options or {})
        self.factory = factory or channel_factory
        self.preset = preset
        self.members: dict[str, Any] = {}
        self.restarts: Counter = Counter()

    # the file ---------------------------------------------------------------------------
    def generate(self, nodes: Optional[list] = None, port: int = 7800,
                 per_node: int = 1) -> MembersFile:
        """From ``ray.nodes()`` (or the given nodes): see ``generate_bootstrap``."""
        if nodes is None:
            import ray
            nodes = ray.nodes()
        self.file = generate_bootstrap(nodes, self.cluster, port=port, per_node=per_node)
        return self.file

    def load(self) -> MembersFile:
        if self.file is None:
            if self.source is None:
                raise ValueError("no bootstrap file: generate() or give one")
            self.file = read_members_file(self.source)
            for err in self.file.errors:
                log.warning("bootstrap file line skipped: %s", err)
        return self.file

    def location(self) -> str:
        """Where the file goes by default: ``<store>/<cluster>/<first coordinator>.list``,
        the first coordinator's members file (seed)."""
        mf = self.load()
        first = mf.coordinator or mf.entries[0]
        if self.discovery is None:
            raise ValueError("no discovery store to write the bootstrap file to")
        return members_file_url(self.discovery, self.cluster, file_name(first.uid))

    def write(self, location: Optional[str] = None) -> str:
        location = location or self.location()
        write_members_file(location, self.load())
        self.source = location
        return location

    # the members ------------------------------------------------------------------------
    def config(self, entry: Any, fresh: bool) -> StackConfig:
        opts = dict(self.options)
        if self.discovery is not None:
            opts["discovery"] = self.discovery
        opts["bootstrap"] = self.load()
        opts["port"] = entry.port
        opts.setdefault("bind_addr", entry.host)  # where the file says the member listens
        if fresh:  # a restart: never reuse a UUID
            opts["store__use_bootstrap_identity"] = False
        return getattr(StackConfig, self.preset)(**opts)

    async def _start(self, entry: Any, fresh: bool) -> Any:
        m = self.factory(self.cluster, entry, self.config(entry, fresh), fresh)
        if inspect.isawaitable(m):
            m = await m
        self.members[entry.name] = m
        return m

    async def start_all(self) -> list:
        """Start every member in file order: the first (the coordinator) alone, then the
        others (started in order, joining concurrently: they need no discovery round)."""
        entries = self.load().entries
        if not entries:
            return []
        await self._start(entries[0], False)
        await asyncio.gather(*(self._start(e, False) for e in entries[1:]))
        return [e.name for e in entries]

    async def restart(self, name: str, crashed: bool = True) -> Any:
        """Start ``name`` again (after a crash: with a fresh random UUID)."""
        entry = self.load().by_name(name)
        if entry is None:
            raise KeyError(name)
        old = self.members.pop(name, None)
        if old is not None and not crashed:
            await old.close()
        self.restarts[name] += 1
        return await self._start(entry, True)

    async def close_all(self) -> None:
        members, self.members = self.members, {}
        await asyncio.gather(*(m.close() for m in members.values()), return_exceptions=True)


@ray.remote(num_cpus=0)
class BootstrapSupervisor:
    """Reads or generates the bootstrap file and starts members in its order (see the
    module doc). Async actor: the default members are Channels on its own loop."""

    def __init__(self, cluster: str, discovery: Optional[str] = None, bootstrap: Any = None,
                 options: Optional[dict] = None, factory: Optional[Callable] = None):
        self.core = Bootstrapper(cluster, discovery, bootstrap, options, factory)

    async def generate(self, port: int = 7800, per_node: int = 1) -> str:
        return self.core.generate(None, port, per_node).render()

    async def write(self, location: Optional[str] = None) -> str:
        return await asyncio.get_running_loop().run_in_executor(None, self.core.write,
                                                                location)

    async def start_all(self) -> list:
        return await self.core.start_all()

    async def restart(self, name: str) -> str:
        m = self.core.members.get(name)
        if m is not None and hasattr(m, "crash"):
            await m.crash()
        m = await self.core.restart(name, crashed=True)
        return m.address.uuid_hex if hasattr(m, "address") else ""

    async def crash(self, name: str) -> None:
        m = self.core.members.get(name)
        if m is not None and hasattr(m, "crash"):
            await m.crash()

    async def views(self) -> dict:
        """{member name: (uuid int of each view member, view id counter)} of the
        members started in this process."""
        out = {}
        for name, m in self.core.members.items():
            v = getattr(m, "view", None)
            if v is not None:
                out[name] = ([int.from_bytes(a.uid, "big") for a in v.members], v.view_id.id)
        return out

    async def stats(self, name: str) -> dict:
        m = self.core.members[name]
        return m.channel.stats() if hasattr(m, "channel") else {}

    async def close_all(self) -> None:
        await self.core.close_all()
