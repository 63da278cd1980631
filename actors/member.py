"""``MemberActor``: an async Ray actor that owns one member (a ``Channel`` over real sockets).

Launch it through ``Group.launch`` (one per Ray node by default: node affinity, ``num_cpus=0``,
named ``raygroups:<cluster>:<member>`` in the namespace ``raygroups``, detached when asked,
``get_if_exists`` so a second launch attaches). The actor joins on its own as soon as it is
created, so an actor Ray restarts (``max_restarts``) comes back by itself: a new process, a
fresh UUID, the same name and port, and it rejoins.

Around the channel it keeps
* the view history (``wait_for_view`` is a long poll on it: it answers as soon as a newer view
  is installed), and a bounded inbox of delivered messages, filled a channel batch at a time
  (``Channel.events_many``); ``receive`` takes messages as dicts, ``receive_many`` as
  one ``MessageBatch`` in columns (actors/batch.py); when nobody reads, the oldest are
  dropped and counted, so a member nobody reads from never stalls the group;
* Ray as a second failure signal (``watcher.RaySignal``), the fence that takes the member
  out for good when Ray gives up on its node (``fence.NodeFence``), the HTTP API and status
  page (``http_api.py``), metrics (``metrics.py``) and JSON logs (``logs.py``).

Member states: ``starting`` -> ``joining`` -> ``member``; ``paused`` (debug pause),
``leaving`` -> ``left`` (graceful leave; ``rejoin`` makes it a member again, fresh UUID),
``shutdown`` (debug shutdown: the stack stopped without leaving, like a crash), ``fenced``
(Ray gave up on the member's node: it left and never rejoins; its process exits).
"""
from __future__ import annotations

import asyncio
import collections
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import ray

from raygroups import __version__
from raygroups.stack import (Channel, GroupClosed, JoinRejected, JoinTimeout, Message,
                             StackConfig, ViewChange)
from raygroups.stack.auth import as_ring
from raygroups.stack.discovery.members_file import uid_to_text
from raygroups.stack.events import GetPhysical, MemberDead, Suspect, Unsuspect

from . import logs
from .batch import DEFAULT_BATCH, MessageBatch, check_batch, take
from .errors import NotMember
from .fence import FenceConfig, NodeFence, exit_process, is_fence_message
from .group_key import member_ring, read_ring, ring_ids
from .metrics import MetricsExporter, dropped, figures
from .placement import NAMESPACE, actor_name
from .durable import member_journal_dir
from .queue import QueueHost, QueueMethods
from .ray_compat import actor_state
from .send_streams import SendStreams
from .watcher import RaySignal

SWIM_STATES = {0: "alive", 1: "suspect", 2: "dead"}


@dataclass
class MemberSpec:
    """Everything a member actor needs; Ray hands the same spec to a restarted actor."""
    cluster: str
    name: str
    config: StackConfig
    namespace: str = NAMESPACE
    http: bool = True
    http_port: int = 0
    """0: any free port (see ``info()["http_url"]``)."""
    token: str = ""
    """Bearer token of the HTTP API's debug and state-changing endpoints."""
    http_host: Optional[str] = None
    """Where the HTTP API listens: None, 127.0.0.1 (this machine only); "node": the
    member's node address (the stack's bind address), reachable from the cluster; or an
    address."""
    http_auth: str = "debug"
    """"debug": the token guards the debug and state-changing endpoints, reads are open;
    "all": every endpoint and the status page need it (``actors/http_api.py``)."""
    http_tls: Optional[tuple] = None
    """(certfile, keyfile), PEM paths on the member's node: serve HTTPS."""
    ray_signal: bool = True
    """Ray as a second failure signal (``watcher.RaySignal``): peers whose actors Ray
    reports dead or restarted are excluded at once, without waiting for SWIM."""
    ray_poll_s: float = 0.1
    """How often that signal reads the actor table for each watched peer (one GCS call
    each). Shorter notices a restart sooner; each call costs about 0.4 ms of this member's
    CPU (about 9% of a member's CPU during a Spark stream, 2026-12-04)."""
    watchers: int = 2
    """Peers each member watches that way (the ones after it in the view), so each member
    is watched by as many."""
    fence: bool = True
    """Fence the member when Ray gives up on its node (actors/fence.py)."""
    fence_config: FenceConfig = field(default_factory=FenceConfig)
    join_timeout_s: float = 30.0
    history: int = 1000
    """View history entries kept."""
    inbox: int = 100_000
    """Delivered messages kept for ``receive``; beyond, the oldest are dropped and counted."""
    metrics_interval_s: float = 5.0
    """0: no metrics export."""
    use_supervisor: bool = True
    """With store discovery: go through the node's DiscoverySupervisor when it exists."""
    wait_for: Optional[str] = None
    """Actor name of the member that founds a new group: join once it has joined (or is
    gone), so that members started together do not found groups of their own."""
    extra: dict = field(default_factory=dict)


def _view_id(view) -> Optional[list]:
    return [view.view_id.coord.name, view.view_id.id] if view is not None else None


def view_json(view, installed_at: Optional[float] = None, previous=None) -> dict:
    """A view as plain JSON."""
    out = {"view_id": _view_id(view), "coord_uuid": view.view_id.coord.uuid_hex,
           "members": [m.name for m in view.members],
           "uuids": [m.uuid_hex for m in view.members], "coordinator": view.coordinator.name,
           "primary": bool(getattr(view, "primary", True)),
           "primary_id": int(getattr(view, "primary_id", 0))}
    if installed_at is not None:
        out["installed_at"] = installed_at
    if previous is not None:
        old, new = set(previous.members), set(view.members)
        out["joined"] = [m.name for m in view.members if m not in old]
        out["left"] = [m.name for m in previous.members if m not in new]
    return out


def join_config(config: StackConfig, restarts: int) -> StackConfig:
    """The stack config of a join: a process Ray restarted never takes its bootstrap line's
    seeded UUID again (JGroups cloud-store discovery: a restart takes a fresh UUID, which the
    coordinator's members file then lists). Left to the per-process claim, the new process
    would claim the line again and join under the UUID of its dead self, still in the view."""
    if not restarts:
        return config
    # a restarted process never bootstraps the group again (a first start belongs to the
    # launch), and never takes its bootstrap line's seeded UUID again
    config = config.with_options(primary__bootstrap=False)
    if config.store is not None and config.store.bootstrap is not None:
        return config.with_options(store__use_bootstrap_identity=False)
    return config


class MemberActor(QueueMethods):
    def __init__(self, spec: MemberSpec):
        self.spec = spec
        ctx = ray.get_runtime_context()
        self.node_id = ctx.get_node_id()
        self.actor_id = ctx.get_actor_id()
        st = actor_state(self.actor_id)
        self.restarts = int(st.get("NumRestarts", 0)) if st else 0
        self.pid = os.getpid()
        self.state = "starting"
        self.error: Optional[str] = None
        self.channel: Optional[Channel] = None
        self.queue_host = QueueHost(spec.name, spec.extra.get("workqueue"),
                                    member_journal_dir(spec.extra, spec.cluster, spec.name))
        self.history: collections.deque = collections.deque(maxlen=spec.history)
        self.views_installed = 0
        self.inbox: collections.deque = collections.deque()  # (message, view it came in)
        self.inbox_dropped = 0
        self.inbox_taken = 0  # messages handed out so far (MessageBatch.first)
        self.send_streams = SendStreams()  # the order of Publishers' batches
        self._delivered_in: Optional[list] = None  # [coordinator uuid, counter] of the view
        self.suspicions: collections.deque = collections.deque(maxlen=200)
        self.ray_verdicts = 0
        self.paused_until = 0.0
        self.started_at = time.time()
        self.http = None
        self._view_event = asyncio.Event()
        self._inbox_event = asyncio.Event()
        self._join_done = asyncio.Event()   # joined, or refused for good (self.rejected)
        self.rejected: Optional[JoinRejected] = None
        self._tasks: list = []
        self._pump: Optional[asyncio.Task] = None
        self._orig_emit = None
        self._resume_handle = None
        self.log = logs.setup(spec.cluster, spec.name, self._view_counter)
        self.exporter: Optional[MetricsExporter] = None
        self.signal: Optional[RaySignal] = None
        self.fence: Optional[NodeFence] = None
        self.fenced: Optional[str] = None
        self._signal_task: Optional[asyncio.Task] = None
        # Ray 2.60 runs an async actor's __init__ on its event loop: start right away, so a
        # restarted actor (nobody calls it) rejoins by itself.
        self._start_task = asyncio.get_running_loop().create_task(self._start())

    # -- lifecycle ------------------------------------------------------------------------
    async def _start(self) -> None:
        spec = self.spec
        if spec.config.transport.cluster_key is None:
            self.log.warning("insecure: this member sends and accepts unauthenticated, "
                             "unencrypted packets (launched with insecure=True); any process "
                             "that reaches its port can join, read and inject")
        if spec.http:
            from .http_api import HttpApi
            host = spec.http_host or "127.0.0.1"
            if host == "node":
                host = spec.config.transport.bind_addr
            try:
                self.http = HttpApi(self, host, spec.http_port, spec.token, spec.http_auth,
                                    spec.http_tls)
                await self.http.start()
            except (OSError, ValueError) as e:
                self.log.warning("HTTP API not started: %s", e)
                self.http = None
        if spec.metrics_interval_s > 0:
            try:
                self.exporter = MetricsExporter(spec.cluster, spec.name, spec.metrics_interval_s)
                self._tasks.append(asyncio.create_task(self.exporter.run(self._metrics_read)))
            except Exception as e:  # metrics are optional
                self.log.warning("metrics disabled: %s", e)
        if spec.ray_signal:
            self.signal = RaySignal(spec.cluster, spec.namespace, self._view_members,
                                    self._local, self._on_ray_dead, spec.ray_poll_s,
                                    spec.watchers)
            self._signal_task = asyncio.create_task(self.signal.run())
            self._tasks.append(self._signal_task)
        if spec.fence:
            self.fence = NodeFence(self.node_id, spec.fence_config, ray.nodes, self._fence_view,
                                   self._fence_send, self._do_fence, self._hold_merges)
            self._tasks.append(asyncio.create_task(self.fence.run()))
        if spec.wait_for:
            await self._wait_for_founder(spec.wait_for)
        if not await self._take_group_key():
            return
        await self._join_until_member()

    async def _take_group_key(self) -> bool:
        """The group's current key ring from Ray's KV (actors/group_key.py) replaces the one
        this actor was created with when a rotation went on since; False (and the member
        refused for good) when a fresh member holds a key the group does not use."""
        loop = asyncio.get_running_loop()
        given = self.spec.config.transport.cluster_key
        try:
            stored = await loop.run_in_executor(None, read_ring, self.spec.namespace,
                                                self.spec.cluster)
        except Exception as e:  # the GCS unreachable: start with the key we were given
            self.log.warning("group key not read from Ray's KV: %s", type(e).__name__)
            return True
        if self.spec.config.transport.cluster_key is not given:
            return True  # a rotation step (set_group_key) came meanwhile: newer than the read
        try:
            ring = member_ring(given, stored, self.restarts > 0)
        except ValueError as e:
            self.state, self.error, self.rejected = "rejected", str(e), JoinRejected(str(e))
            self.log.error("%s", e)
            self._join_done.set()
            return False
        if ring is not given:
            self._set_spec_key(ring)
            self.log.info("took the group's key ring from Ray's KV (key ids %s)", ring_ids(ring))
        return True

    def _set_spec_key(self, ring) -> None:
        """Later channels (a rejoin) start with ``ring``."""
        cfg = self.spec.config
        self.spec.config = replace(cfg, transport=replace(cfg.transport, cluster_key=ring))

    def set_group_key(self, ring) -> list:
        """One step of a key rotation (``Group.rotate_key``): this member seals with the
        ring's first key from now on and accepts any of its keys; a rejoin uses it too.
        Returns the ring's key ids (hex), never the keys."""
        if self.spec.config.transport.cluster_key is None:
            raise ValueError("an insecure member has no key to rotate")
        ring = as_ring(ring)
        if self.channel is not None and self.channel.stack is not None:
            self.channel.set_cluster_key(ring)
        self._set_spec_key(ring)
        self.log.info("key ring now %s", ring_ids(ring))
        return ring_ids(ring).split(",")

    async def _wait_for_founder(self, name: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            founder = await loop.run_in_executor(
                None, lambda: ray.get_actor(name, namespace=self.spec.namespace))
            await asyncio.wait_for(asyncio.wrap_future(
                founder.ready.remote(self.spec.join_timeout_s).future()),
                self.spec.join_timeout_s)
        except Exception as e:  # gone, failed or slow: join anyway
            self.log.info("not waiting for the founder %s: %s", name, type(e).__name__)

    async def _join_until_member(self) -> None:
        """Join; on failure (a port still held by our previous process, ...) try again."""
        delay = 0.2
        while self.fenced is None:
            try:
                await self._join()
                return
            except asyncio.CancelledError:
                raise
            except JoinRejected as e:  # our settings differ from the group's: final
                self.state, self.error, self.rejected = "rejected", str(e), e
                self.log.error("%s", e)
                self._join_done.set()
                return
            except Exception as e:  # JoinTimeout, a port still held (OSError), a store error
                self.error = f"{type(e).__name__}: {e}"
                self.log.warning("join failed (%s); retrying in %.1fs", self.error, delay,
                                 exc_info=not isinstance(e, (JoinTimeout, OSError)))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _join(self) -> None:
        spec = self.spec
        if self.fenced is not None:
            raise NotMember(f"{spec.name} is fenced ({self.fenced}): it never rejoins")
        self.state = "joining"
        kw: dict = {}
        store = self._store_client()
        if store is not None:
            kw["store"] = store
        if self._pump is not None:
            self._pump.cancel()
            self._pump = None
        ch = Channel(spec.cluster, spec.name, join_config(spec.config, self.restarts), **kw)
        await self.queue_host.attach(ch)  # the work queues ride on each new channel
        await ch.connect(timeout=spec.join_timeout_s)
        self.channel = ch
        self.error = None
        if self.exporter is not None:
            self.exporter.reset()
        self._observe(ch)
        self._pump = asyncio.create_task(self._pump_events(ch))
        self.state = "member"
        self.joined_at = time.time()
        self.log.info("joined as %s at %s:%s", ch.address.uuid_hex, *ch.physical_address)
        while not self.history or self.history[-1]["ch"] is not ch:
            await asyncio.sleep(0.001)  # the pump records the first view
        self._join_done.set()

    def _store_client(self) -> Any:
        """With store discovery: the node's DiscoverySupervisor as the store (it caches and
        counts for every member on the node)."""
        st = getattr(self.spec.config, "store", None)
        if st is None or not self.spec.use_supervisor or not getattr(st, "url", None):
            return None
        from .supervisors import SupervisorStoreClient, discovery_supervisor
        try:
            handle = discovery_supervisor(st.url, self.node_id,
                                          detached=self.spec.extra.get("detached", False))
            return SupervisorStoreClient(handle, asyncio.get_running_loop())
        except Exception as e:
            self.log.warning("no discovery supervisor (%s): the member calls the store", e)
            return None

    def _observe(self, ch: Channel) -> None:
        """Keep a log of suspicions and verdicts as the stack reports them (read only)."""
        rt = ch.runtime
        inner = rt.on_event

        def on_event(ev: Any) -> None:
            t = type(ev)
            if t is Suspect or t is Unsuspect or t is MemberDead:
                self.suspicions.append({"t": time.time(), "event": t.__name__,
                                        "member": ev.addr.name, "uuid": ev.addr.uuid_hex,
                                        "reason": getattr(ev, "reason", None)})
            inner(ev)
        rt.on_event = on_event

    async def _pump_events(self, ch: Channel) -> None:
        """Views into the history, messages into the inbox, as the channel delivers them
        (every event waiting per await)."""
        inbox, cap = self.inbox, self.spec.inbox
        try:
            while True:
                try:
                    events = await ch.events_many()
                except GroupClosed:
                    return
                for ev in events:
                    t = type(ev)
                    if t is ViewChange:
                        self._on_view(ch, ev)
                    elif t is not Message:
                        continue
                    elif is_fence_message(ev.payload):  # the fence's question and answers
                        if self.fence is not None:
                            asyncio.get_running_loop().create_task(
                                self.fence.on_message(ev.sender, ev.payload))
                    else:
                        if len(inbox) >= cap:
                            inbox.popleft()
                            self.inbox_dropped += 1
                        inbox.append((ev, self._delivered_in))
                self._inbox_event.set()
        finally:
            if self.channel is ch and self.state in ("member", "paused"):
                self.state = "left"
                self.log.info("channel closed")
            self._wake()

    def _on_view(self, ch: Channel, vc: ViewChange) -> None:
        self._delivered_in = [vc.view.view_id.coord.uuid_hex, vc.view.view_id.id]
        self.history.append({"view": vc.view, "installed_at": time.time(),
                             "previous": vc.previous, "ch": ch})
        self.views_installed += 1
        self.log.info("installed view %s: %s (joined %s, left %s)", _view_id(vc.view),
                      [m.name for m in vc.view.members], [m.name for m in vc.joined],
                      [m.name for m in vc.left])
        if self.fence is not None and len(vc.view) == 1 and vc.previous is not None \
                and len(vc.previous) > 1:  # excluded: ask Ray before merging back
            asyncio.get_running_loop().create_task(self.fence.excluded())
        self._wake()

    def _wake(self) -> None:
        self._view_event.set()
        self._view_event = asyncio.Event()
        self._inbox_event.set()

    # -- helpers --------------------------------------------------------------------------
    def _view_counter(self) -> int:
        v = self.channel.view if self.channel is not None else None
        return v.view_id.id if v is not None else 0

    def _local(self):
        ch = self.channel
        return ch.address if ch is not None and ch.stack is not None and \
            self.state in ("member", "paused") else None

    def _view_members(self) -> tuple:
        ch = self.channel
        return ch.view.members if ch is not None and ch.view is not None else ()

    def _member_channel(self) -> Channel:
        if self.state not in ("member", "paused") or self.channel is None or \
                self.channel.view is None:
            raise NotMember(f"{self.spec.name} is not a member of {self.spec.cluster!r} "
                            f"(state {self.state})")
        return self.channel

    def _find(self, who: str):
        """A member of the current view by name or UUID (hex, with or without dashes)."""
        view = self._member_channel().view
        key = who.replace("-", "").lower() if isinstance(who, str) else who
        for m in view.members:
            if m.name == who or m.uid.hex() == key:
                return m
        raise NotMember(f"{who!r} is not in the view {_view_id(view)}")

    def _phys(self, addr) -> Optional[str]:
        ch = self.channel
        if ch is None or ch.stack is None:
            return None
        if addr == ch.address:
            p = ch.physical_address
        else:
            p = ch.stack.top.below.down_event(GetPhysical(addr))
        return f"{p[0]}:{p[1]}" if p else None

    def _swim_state(self, addr) -> str:
        ch = self.channel
        if addr == ch.address:
            return "alive" if self.state == "member" else self.state
        try:
            n = ch.stack.layer("swim").nodes.get(addr)
        except KeyError:
            n = None
        state = SWIM_STATES.get(n.state, "alive") if n is not None else "alive"
        try:
            if addr in ch.stack.layer("gms").suspects:
                state = "dead"
        except KeyError:
            pass
        return state

    def _metrics_read(self) -> Optional[tuple]:
        ch = self.channel
        if ch is None or ch.stack is None:
            return None
        return self._stats(), len(ch.view) if ch.view is not None else 0

    def _stats(self) -> dict:
        ch = self.channel
        out = ch.stats() if ch is not None and ch.stack is not None else {}
        out["member"] = {"views_installed": self.views_installed, "inbox": len(self.inbox),
                         "dropped_inbox_full": self.inbox_dropped,
                         "ray_verdicts": self.ray_verdicts}
        return out

    # -- the fence (actors/fence.py) ---------------------------------------------------------
    def _fence_view(self) -> Optional[tuple]:
        ch = self.channel
        if ch is None or ch.stack is None or ch.view is None or self.state != "member":
            return None
        return ch.view.members, bool(ch.view.primary), ch.address

    def _hold_merges(self, held: bool) -> None:
        ch = self.channel
        if ch is not None and ch.stack is not None and self._has_gms():
            ch.stack.layer("gms").hold_merges(held)
            self.log.info("merges %s", "held: asking Ray about this node" if held else
                          "released: Ray counts this node alive")

    async def _fence_send(self, dest, payload: bytes) -> None:
        ch = self._member_channel()
        await asyncio.wait_for(ch.send(payload, dest=dest), 1.0)

    async def _do_fence(self, reason: str) -> None:
        """Out of the group for good: leave (gracefully when in a primary component), never
        rejoin, and let the process go so that Ray starts a fresh incarnation where it can."""
        self.fenced, self.error = reason, f"fenced: {reason}"
        ch, was = self.channel, self.state
        self.state = "fenced"
        if self._signal_task is not None:
            self._signal_task.cancel()  # we report nobody dead any more
        if ch is not None and ch.stack is not None and was in ("member", "paused"):
            self._resume()
            try:
                if ch.view is not None and ch.view.primary:
                    await ch.close(timeout=5.0)
                else:
                    ch.stack.stop()
                    await ch.runtime.close()
            except Exception as e:
                self.log.warning("fence: leaving failed (%s); stopping", e)
        self._wake()
        exit_process(self.spec.fence_config.exit_after_s)

    # -- Ray as a failure signal ------------------------------------------------------------
    async def _on_ray_dead(self, addr) -> None:
        """Ray says ``addr``'s actor (or node) is dead: feed our stack, and the acting
        coordinator's, which excludes it at once."""
        self.ray_verdicts += 1
        self.suspicions.append({"t": time.time(), "event": "RayDead", "member": addr.name,
                                "uuid": addr.uuid_hex, "reason": "ray"})
        ch = self.channel
        if ch is None or ch.view is None or addr not in ch.view:
            return
        coord = next((m for m in ch.view.members if m != addr), None)
        if coord is not None and coord != ch.address and self._has_gms():
            try:
                other = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: ray.get_actor(actor_name(self.spec.cluster, coord.name),
                                                namespace=self.spec.namespace))
                other.report_dead.remote(addr.uuid_hex, "ray")
            except Exception as e:
                self.log.warning("could not tell coordinator %s: %s", coord.name, e)
        self._feed(addr, "ray")

    def _has_gms(self) -> bool:
        try:
            self.channel.stack.layer("gms")
            return True
        except KeyError:
            return False

    def _feed(self, addr, reason: str) -> None:
        ch = self.channel
        if ch is None or ch.stack is None or ch.view is None or addr not in ch.view:
            return
        if hasattr(ch, "report_dead"):
            ch.report_dead(addr, reason)
        else:
            ch.stack.top.below.down_event(MemberDead(addr, reason))
        # The verdict straight to GMS when we are the acting coordinator: SWIM turns an
        # external MemberDead into a REMOVE rumor that its verify window overrules while the
        # member was heard from in the last verify_window_s, and then waits a full unconfirmed
        # suspicion (1.5 s in the local preset); GMS takes a verdict at once (see REPORT).
        if self._has_gms():
            gms = ch.stack.layer("gms")
            acting = next((m for m in ch.view.members if m != addr and m not in gms.suspects),
                          None)
            if acting == ch.address:
                gms.up_event(MemberDead(addr, reason))

    # -- the actor's API --------------------------------------------------------------------
    def spec_of(self) -> MemberSpec:
        """The spec this actor was started with (a rolling upgrade starts its successor from
        it)."""
        return self.spec

    async def ready(self, timeout: float = 60.0) -> dict:
        """Wait until this member joined; its ``info()``. Raises JoinTimeout, or
        JoinRejected when the group refused this member's settings."""
        try:
            await asyncio.wait_for(self._join_done.wait(), timeout)
        except asyncio.TimeoutError:
            raise JoinTimeout(f"{self.spec.name} did not join {self.spec.cluster!r} in "
                              f"{timeout}s ({self.error or self.state})") from None
        if self.rejected is not None:
            raise self.rejected
        return self.info()

    def uid(self) -> Optional[str]:
        ch = self.channel
        return ch.address.uuid_hex if ch is not None and ch.stack is not None and \
            self.state in ("member", "paused") else None

    def info(self) -> dict:
        ch = self.channel
        view = ch.view if ch is not None else None
        uid = self.uid()
        return {"name": self.spec.name, "cluster": self.spec.cluster, "uuid": uid,
                "uuid_text": uid_to_text(ch.address.uid) if uid else None,
                "address": self._phys(ch.address) if ch is not None and ch.stack else None,
                "node_id": self.node_id,
                "actor_name": actor_name(self.spec.cluster, self.spec.name),
                "actor_id": self.actor_id, "state": self.state, "pid": self.pid,
                "http_url": self.http.url if self.http else None,
                "view_id": _view_id(view), "view_size": len(view) if view else 0,
                "coordinator": bool(view and ch.address == view.coordinator),
                "restarts": self.restarts, "started_at": self.started_at,
                "error": self.error, "fenced": self.fenced,
                "role": self._role(),  # "arbitrator": votes, holds no queue (Galera's garbd)
                "durable": self.queue_host.durable,  # journals its queues (actors/durable.py)
                "journal_dir": self.queue_host.journal_dir,
                "version": __version__}  # the build this member runs (rolling upgrades)

    def _role(self) -> str:
        """"arbitrator" (``MemberSpec.extra["workqueue"]["arbitrator"]``), else "data"."""
        return "arbitrator" if self.queue_host.arbitrator else "data"

    def view(self):
        """The current view (a ``raygroups.stack.View``)."""
        return self._member_channel().view

    def members(self) -> list:
        """The view's members as this member sees them; ``recovery``: each one's recovery
        status as the last state exchange and the ordered announcements since carried it
        (MySQL Group Replication's member state: ONLINE, RECOVERING, DONOR, OFFLINE, ERROR;
        None in gossip mode, which has no state exchange), the same answer at every member
        of the view; ``role``: "arbitrator" for an arbitrator (its queue position in the
        last state exchange says so; it votes and holds no queue), else "data"."""
        ch = self._member_channel()
        view = ch.view
        attrs = ch.member_attributes()
        arbs = self.queue_host.arbitrators()
        return [{"name": m.name, "uuid": m.uuid_hex, "uuid_text": uid_to_text(m.uid),
                 "address": self._phys(m),
                 "coordinator": i == 0, "state": self._swim_state(m), "self": m == ch.address,
                 "recovery": attrs.get(m, {}).get("status"),
                 "role": "arbitrator" if m.uid in arbs else "data"}
                for i, m in enumerate(view.members)]

    async def send(self, payload: Any, dest: Optional[str] = None) -> None:
        ch = self._member_channel()
        await ch.send(payload, dest=self._find(dest) if dest is not None else None)

    async def send_many(self, payloads: list, dest: Optional[str] = None,
                        stream: Optional[tuple] = None) -> int:
        """``payloads``: a list (Ray resolves an ObjectRef of one before the call); returns
        how many were sent. ``stream``: (publisher id, batch number) of a ``Publisher``'s
        batch: sent once its predecessor was, and not again (0) when it was already
        (actors/send_streams.py)."""
        if not isinstance(payloads, list):
            raise TypeError(f"send_many takes a list of payloads, not {type(payloads).__name__}")
        if stream is None:
            return await self._send_list(payloads, dest)
        async with self.send_streams.turn(*stream) as now:
            return await self._send_list(payloads, dest) if now else 0

    async def _send_list(self, payloads: list, dest: Optional[str]) -> int:
        ch = self._member_channel()
        await ch.send_many(payloads, dest=self._find(dest) if dest is not None else None)
        return len(payloads)

    async def receive(self, max_messages: int = 1000, timeout: float = 1.0) -> list:
        """Up to ``max_messages`` delivered messages, waiting at most ``timeout`` for the
        first: [{"sender": name, "sender_uuid": hex, "payload": ..., "view": [coordinator
        uuid, counter] of the view it was delivered in}, ...]."""
        return (await self.receive_many(max_messages, timeout)).as_dicts()

    async def receive_many(self, max_messages: int = DEFAULT_BATCH, timeout: float = 1.0,
                           min_messages: int = 1, linger_s: float = 0.0) -> MessageBatch:
        """Up to ``max_messages`` delivered messages as one ``MessageBatch`` (columns, in
        delivery order), waiting up to ``timeout`` s for the first (none came: an empty
        batch); once one is here, up to ``linger_s`` s more until ``min_messages`` are (a
        busy reader makes fewer, larger calls). Raises NotMember when the member is out of
        the group and has nothing left to give."""
        check_batch(max_messages, min_messages, timeout, linger_s)
        if not self.inbox:
            await self._await_inbox(1, timeout)
        if self.inbox and len(self.inbox) < min_messages and linger_s > 0:
            await self._await_inbox(min_messages, linger_s)
        b = take(self.inbox, max_messages, self.spec.name, self.inbox_taken,
                 self.inbox_dropped)
        self.inbox_taken += len(b)
        return b

    async def _await_inbox(self, want: int, timeout: float) -> None:
        """Until the inbox holds ``want`` messages, ``timeout`` s passed, or the member is
        out of the group (NotMember when then nothing is left for the caller)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.inbox) < want:
            if self.state not in ("member", "paused", "joining", "starting"):
                if not self.inbox:
                    self._member_channel()
                return
            left = deadline - loop.time()
            if left <= 0:
                return
            self._inbox_event.clear()
            try:
                await asyncio.wait_for(self._inbox_event.wait(), left)
            except asyncio.TimeoutError:
                return

    def _after(self, after) -> list:
        h = list(self.history)
        if not h:
            return []
        if after is None:
            return h[-1:]
        for i, e in enumerate(h):
            if e["view"].view_id == after:
                return h[i + 1:]
        return [e for e in h if e["view"].view_id > after]

    async def wait_for_view(self, after_view_id=None, timeout: float = 30.0) -> dict:
        """Long poll: the views installed after ``after_view_id`` (a ViewId; None: the
        current view), waiting up to ``timeout`` s for one; answers at once when a newer view
        is installed. {"views": [{"view", "installed_at", "answered_at"}...], "state",
        "member"}."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = self._after(after_view_id)
            if found or self.state in ("left", "shutdown"):
                break
            ev = self._view_event
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(ev.wait(), left)
            except asyncio.TimeoutError:
                break
        now = time.time()
        return {"views": [{"view": e["view"], "installed_at": e["installed_at"],
                           "answered_at": now} for e in found],
                "state": self.state, "member": self.spec.name}

    def view_history(self) -> list:
        """Every view this member installed (JSON), oldest first."""
        return [view_json(e["view"], e["installed_at"], e["previous"]) for e in self.history]

    async def report_dead(self, uuid_hex: str, reason: str = "ray") -> bool:
        """Another member (its Ray signal) says the member ``uuid_hex`` is dead."""
        ch = self.channel
        if ch is None or ch.view is None:
            return False
        for m in ch.view.members:
            if m.uuid_hex == uuid_hex and m != ch.address:
                self.suspicions.append({"t": time.time(), "event": "RayDead", "member": m.name,
                                        "uuid": uuid_hex, "reason": f"{reason} (relayed)"})
                self._feed(m, reason)
                return True
        return False

    async def leave(self, timeout: float = 10.0) -> bool:
        """Leave gracefully (the others install a view without us), then stop the stack;
        True when the group confirmed it (``Channel.close``). The actor stays: its HTTP API
        answers and ``rejoin`` makes it a member again."""
        ch = self.channel
        if ch is None or self.state not in ("member", "paused"):
            return False
        self._resume()
        self.state = "leaving"
        try:
            return await ch.close(timeout)
        finally:
            self.state = "left"
            self._wake()

    async def rejoin(self, timeout: float = 30.0) -> dict:
        """Join again (after leave or a debug shutdown): a fresh UUID. No-op for a member;
        a fenced member never rejoins (NotMember)."""
        if self.fenced is not None:
            raise NotMember(f"{self.spec.name} is fenced ({self.fenced}): it never rejoins")
        if self.state in ("left", "shutdown"):
            self._join_done.clear()
            await self._join()
        return await self.ready(timeout)

    async def shutdown_stack(self) -> None:
        """Debug: stop the stack without leaving (the others see a crash)."""
        ch = self.channel
        if ch is None or self.state not in ("member", "paused"):
            return
        self._resume()
        self.state = "shutdown"
        ch.stack.stop()
        await ch.runtime.close()
        if self._pump is not None:
            self._pump.cancel()
            self._pump = None
        self._wake()

    async def pause(self, seconds: float) -> dict:
        """Debug: stop answering for ``seconds`` (a long GC pause or a stalled host): the
        sockets are not read (packets wait in the kernel), nothing is sent (dropped and counted
        as ``runtime.paused_emits``), the timers fire into silence. HTTP and Ray calls still
        answer. Returns when the pause started."""
        ch = self._member_channel()
        rt = ch.runtime
        loop = asyncio.get_running_loop()
        if self._orig_emit is None:
            rt.pause_reading()
            self._orig_emit = rt.emit

            def silent(dest, data) -> None:
                rt.stats["paused_emits"] += 1
            rt.emit = silent
            self.state = "paused"
            self.log.info("paused for %.2fs", seconds)
        if self._resume_handle is not None:
            self._resume_handle.cancel()
        self.paused_until = time.time() + seconds
        self._resume_handle = loop.call_later(seconds, self._resume)
        return {"paused_until": self.paused_until}

    def _resume(self) -> None:
        if self._orig_emit is None:
            return
        ch = self.channel
        rt = ch.runtime
        del rt.emit  # back to the class's method
        self._orig_emit = None
        if self._resume_handle is not None:
            self._resume_handle.cancel()
            self._resume_handle = None
        rt.resume_reading()
        if self.state == "paused":
            self.state = "member"
        self.paused_until = 0.0
        self.log.info("resumed")

    async def crash(self, delay: float = 0.05) -> None:
        """Debug: the process exits at once (``os._exit``), no leave: like kill -9."""
        self.log.warning("crashing on request")
        asyncio.get_running_loop().call_later(delay, os._exit, 1)

    def state_info(self) -> dict:
        """Everything about this member, for debugging (JGroups probe)."""
        out = self.info()
        ch = self.channel
        live = ch is not None and ch.stack is not None and ch.view is not None
        out["view"] = view_json(ch.view) if live else None
        out["members"] = self.members() if live and self.state in ("member", "paused") else []
        out["suspicions"] = list(self.suspicions)
        current = []
        if live:
            try:
                swim = ch.stack.layer("swim")
                current = [{"member": a.name, "uuid": a.uuid_hex, "state": SWIM_STATES[n.state],
                            "incarnation": n.inc} for a, n in swim.nodes.items()
                           if n.state != 0]
            except KeyError:
                pass
        out["suspected"] = current
        stats = self._stats()
        out["stats"] = stats
        out["figures"] = figures(stats)
        out["dropped"] = dropped(stats)
        out["history_length"] = len(self.history)
        out["inbox"] = len(self.inbox)
        out["paused_until"] = self.paused_until
        out["metrics_exports"] = self.exporter.exports if self.exporter is not None else 0
        out["ray_signal"] = ({"watching": self.signal.watched(), **self.signal.stats,
                              "verdicts_fed": self.ray_verdicts}
                             if self.signal is not None else None)
        out["fence"] = self.fence.info() if self.fence is not None else None
        out["config"] = {"transport": self.spec.config.transport.kind,
                         "membership": self.spec.config.membership,
                         "bind_addr": self.spec.config.transport.bind_addr,
                         "discovery": (getattr(getattr(self.spec.config, "store", None), "url",
                                               None) or self.spec.config.discovery.mode)}
        return out

    def group_key(self) -> Optional[list]:
        """The group's key ring, first key first (None: an insecure group). Only for callers
        that reach the actor through Ray, i.e. Ray-authenticated processes (Group.launch, for
        new members)."""
        key = self.spec.config.transport.cluster_key
        return None if key is None else as_ring(key)

    def http_info(self) -> dict:
        """Where the HTTP API listens and its token (callers that reach the actor through
        Ray are trusted with it)."""
        return {"url": self.http.url if self.http else None, "token": self.spec.token}

    async def close(self, timeout: float = 5.0) -> None:
        """Leave and stop everything but the process (``Group.shutdown`` then kills it)."""
        try:
            await self.leave(timeout)
        except Exception:
            pass
        for t in self._tasks:
            t.cancel()
        if self.http is not None:
            await self.http.stop()
            self.http = None
        self.state = "left"
        self._wake()
