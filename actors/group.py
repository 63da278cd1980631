"""``Group``: the client handle of a group of member actors. It hides the actor handles.

```python
g = Group.launch("orders", members_per_node=1)   # one MemberActor per Ray node, detached
g.view(); g.members(); g.send(b"job-1")
g.send_many([b"a", b"b"]); g.send_many(ray.put(big_list))   # one Ray call for many
pub = g.publisher(in_flight=4); pub.send_many(batch); pub.flush()  # batches in flight
for batch in g.subscribe(): ...                  # MessageBatch after MessageBatch
for view in g.views(): ...                       # every view change, in order
Group.attach("orders")                           # from any driver, by name
g.shutdown()
```

Every call has an async twin (``view_async``, ``members_async``, ``send_async``, ...;
``views_async`` is an async generator); ``launch_async``/``attach_async`` run the sync ones in a
thread. Calls go through one member at a time (the first that answers, in name order) and move
on to the next when that member is dead or not in the view. Errors are the package's own:
``NotMember``, ``JoinTimeout``, ``GroupClosed`` (``NoSuchGroup`` when no member exists);
a member's errors are re-raised unwrapped, never as Ray exceptions.

Messages: ``send_many`` carries a list (or an ObjectRef of one) in one actor call;
``receive_many`` answers with one ``MessageBatch`` (columns: actors/batch.py) and
``subscribe`` yields them (actors/subscription.py). A call that names its member never
changes the handle's current member, so a driver's batches keep going through one member
(FIFO) while it reads from every member.

The view subscription (``views``/``view_events``) is a long poll (``MemberActor.wait_for_view``):
a member answers as soon as it installs a newer view; if that member dies or leaves, the
subscription continues at another member from the last view it saw (views are ordered by
view id, so none is repeated and, between members that installed them, none is skipped).
"""
from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import replace
from typing import Any, AsyncIterator, Callable, Iterator, Optional

import ray
from ray.exceptions import (ActorDiedError, ActorUnschedulableError, GetTimeoutError,
                            RayActorError, RayTaskError)

from raygroups.stack import RaygroupsError, StackConfig
from raygroups.stack.auth import as_ring, key_id
from raygroups.stack.config import MEMBERSHIP_MODES
from raygroups.stack.primary import PrimaryConfig
from raygroups.stack.runtime.ports import free_port
from raygroups.stack.workqueue import QueueDiskError

from .batch import DEFAULT_BATCH, MessageBatch, check_batch, payload_list
from .durable import spec_extra as durable_extra
from .errors import (GroupClosed, JoinRejected, JoinTimeout, NoSuchGroup, NotMember,
                     RotationIncomplete)
from .http_api import AUTH_MODES
from .group_key import delete_ring, member_ring, read_ring, ring_ids, write_ring
from .member import MemberActor, MemberSpec
from .placement import (DEFAULT_PORT, NAMESPACE, actor_name, alive_nodes, arbitrator_slot,
                        bootstrap_slots, check_arbitrator, is_arbitrator, is_loopback,
                        member_of, plan, stack_config)
from .publisher import Publisher
from .subscription import Subscription

CALL_TIMEOUT_S = 60.0
# a member actor that died, or cannot be placed (its node is dead): another member answers
GONE = (RayActorError, ActorUnschedulableError)
_REFRESH = object()  # _route: look the group up again before the next call
_remote_cls = None
log = logging.getLogger("raygroups.group")


def _member_class():
    global _remote_cls
    if _remote_cls is None:
        _remote_cls = ray.remote(MemberActor)
    return _remote_cls


def _unwrap(e: RayTaskError) -> BaseException:
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e


def _stored_ring(namespace: str, cluster: str) -> Optional[list]:
    """The group's key ring in Ray's KV; None when none is stored or the KV is unreachable."""
    try:
        return read_ring(namespace, cluster)
    except Exception:
        return None


def _took(ref) -> bool:
    """The member took the key step (it answered), or its actor is gone: a restarted
    actor reads the step from Ray's KV, where it was written first."""
    try:
        ray.get(ref)
        return True
    except RayActorError:
        return True
    except Exception:
        return False


def _sets_expected_size(config: Optional[StackConfig], options: Optional[dict]) -> bool:
    """The caller chose the members the first primary needs (``primary__expected_size`` in
    the options, or a config whose value is not the stack's default of 1)."""
    if options and "primary__expected_size" in options:
        return True
    return config is not None and config.primary.expected_size != PrimaryConfig.expected_size


def expected_size_warning(expected: int, launched: int) -> Optional[str]:
    """The warning for a first primary component that fewer than a majority of the members
    launched may start (``primary__expected_size`` set low by hand): two disjoint parts of
    the group, cut off from each other at their first start, could each start one (MySQL
    Group Replication's bootstrap done twice). None when it takes a majority."""
    if 2 * expected > launched:
        return None
    return (f"primary__expected_size={expected} with {launched} members launched: two parts "
            f"of the group cut off from each other at their first start could each start a "
            f"primary component of its own (a majority is {launched // 2 + 1}; unset, it is "
            f"all {launched})")


def _say(progress: Optional[Callable[[str], None]], text: str) -> None:
    if progress is not None:
        progress(text)


def _supervise(cfg: StackConfig, node_id: str, detached: bool, done: set) -> None:
    """With a discovery store: the node's DiscoverySupervisor, created here (once per node
    and store) so that it lives as long as the group's members (detached with them) rather
    than as long as the member that would create it first."""
    from .supervisors import discovery_supervisor
    url = getattr(getattr(cfg, "store", None), "url", None)
    if not url or (node_id, url) in done:
        return
    done.add((node_id, url))
    discovery_supervisor(url, node_id, detached=detached)


class Group:
    """A handle on the group ``cluster``: cheap, picklable state (names only), no handles
    exposed. Create with ``Group.launch`` or ``Group.attach``."""

    def __init__(self, cluster: str, namespace: str = NAMESPACE, _names: Optional[list] = None):
        self.cluster = cluster
        self.namespace = namespace
        self._handles: dict = {}
        self._current: Optional[str] = None
        self._avoid: set = set()
        for n in _names or ():
            self._handles[n] = None

    def __repr__(self) -> str:
        return f"Group({self.cluster!r}, members={sorted(self._handles)})"

    def __reduce__(self):
        return (Group, (self.cluster, self.namespace, sorted(self._handles)))

    # -- creating ---------------------------------------------------------------------------
    @classmethod
    def launch(cls, cluster: str, members_per_node: int = 1, *, members: Optional[int] = None,
               namespace: str = NAMESPACE, detached: bool = True, transport: str = "udp",
               preset: Optional[str] = None, discovery: Optional[str] = None,
               config: Optional[StackConfig] = None, stack_options: Optional[dict] = None,
               port: Optional[int] = None, http: bool = True, http_port: int = 0,
               http_host: Optional[str] = None, http_auth: str = "debug",
               http_tls: Optional[tuple] = None, token: Optional[str] = None,
               ray_signal: bool = True, ray_poll_s: float = 0.1, fence: bool = True,
               max_restarts: int = -1, this_node: bool = False, timeout: float = 60.0,
               metrics_interval_s: float = 5.0, follow_nodes: bool = False,
               wait: bool = True, cluster_key: Any = None, insecure: bool = False,
               bootstrap: Any = None, membership: str = "views",
               runtime_env: Optional[dict] = None, arbitrator: bool = False,
               durable: bool = False, journal_dir: Optional[str] = None,
               progress: Optional[Callable[[str], None]] = None) -> "Group":
        """Start the group's member actors (or attach to those that exist) and wait until
        they agree on one view.

        ``members_per_node`` on every live Ray node, or ``members`` in all dealt round-robin
        over the nodes (on a one-node local Ray, ``members=5`` gives five members).
        ``this_node``: only this node's members (each node's start command in cluster.yaml).
        ``transport``/``preset``/``discovery``/``config``/``stack_options``: the stack
        (``placement.stack_config``); default: static discovery of every member's address,
        the ``local`` preset on loopback and ``lan`` elsewhere; the first primary component
        needs a majority of the members launched (``primary__expected_size``: set below a
        majority, the launch warns). ``port``: member k of a node
        listens on ``port + k`` (default 7800; on loopback: free ports). The HTTP API
        (``http``): on ``http_port + k`` (0: any free port), on 127.0.0.1 unless ``http_host``
        asks for "node" (the node's address) or another address; ``token``: of its guarded
        endpoints (default: a random one, see ``http_token()``); ``http_auth="all"``: reads
        and the status page need the token too; ``http_tls=(certfile, keyfile)``: HTTPS.
        ``cluster_key``: the group's key (bytes, or a key ring ``[first, other, ...]``); by
        default the key of the group's running members, or a new random one: every packet
        is encrypted and authenticated with it (AES-GCM), and it travels only through Ray
        (the member actors' specs; ``MemberActor.group_key``), never in logs, members files
        or the HTTP API. ``insecure=True`` (with no key) runs the group unauthenticated, and
        every member says so in a warning when it starts.
        ``ray_signal``: Ray as a second failure signal. ``fence``: a member whose node Ray
        declared dead (or that Ray's head cannot reach while its peers can) leaves and never
        rejoins from it (actors/fence.py). ``max_restarts``: Ray restarts a crashed member
        this often (-1: always); it rejoins with a fresh UUID.
        ``follow_nodes``: then a detached supervisor (actors/follower.py) keeps
        ``members_per_node`` members on every alive node, on nodes added later too, with
        these settings; ``shutdown`` stops it. With ``wait=False`` (only with
        ``follow_nodes``) it returns at once and the supervisor launches every member, and
        keeps retrying, in the background: a cluster's start command never fails for the
        group (the HTTP token is then the one given, or a random one: ``http_token()``).
        ``bootstrap``: a bootstrap file (path, URL or ``MembersFile``; JGroups cloud-store
        discovery) names every member instead: each line's member starts as a member actor
        on a live node at the line's address (lines sharing one address are dealt over that
        address's nodes), on the line's port, in file order, with the line's seeded UUID and
        no discovery round; with ``discovery`` the file is also written to the store where
        joiners look. A member Ray restarts takes a fresh UUID, and the coordinator's members
        file then lists it under that one. Not with ``follow_nodes``, ``members`` or
        ``this_node``.
        ``runtime_env``: the member actors' Ray runtime environment (``{"py_modules":
        [wheel]}``: another raygroups build; ``Group.upgrade`` replaces a running group's).
        ``membership="gossip"``: SWIM's eventually consistent member list instead of agreed
        views (Serf-like, for large groups; no primary component, no ordered multicast, no
        work queue): the members "agree" once each lists every member launched.
        ``arbitrator``: one more member that votes in the group's majorities and holds no
        queue (Galera's arbitrator, garbd; ``WorkQueueConfig.arbitrator``), named
        ``<node label>-arbitrator`` and placed on a live node that holds no data member of
        the group, else (with a warning) on the one that holds the fewest
        (``placement.arbitrator_slot``); it counts in the first primary's
        ``primary__expected_size``. Two data members (or two zones) and the arbitrator keep
        a primary component when one of them is lost. Queue calls through the handle never
        go to it; ``members()`` shows its ``"role": "arbitrator"``. Not with the stack's
        ``primary__tie_breaker="store"`` (the two would decide one split twice), gossip
        membership (no primary component), a bootstrap file, ``this_node`` or
        ``wait=False``; the node follower (``follow_nodes``) launches data members only.
        ``durable``: every data member journals its queues (the Qpid new-cluster design's
        persistent cluster; arbitrators never journal), in
        ``<journal_dir or the node's Ray temp dir>/raygroups/journal/<group>/<member>``
        (actors/durable.py): a publish returns once a majority has it on disk, and the group
        launched again under its name on the same nodes (after every member stopped) finds
        its queues again. Durability is the member's: every queue of a durable group is
        journaled; ``Group.queue(name, durable=True)`` on a group launched without it
        raises QueueNotDurable. A member whose journal fails (a full disk) leaves the group
        and its queue calls raise QueueDiskError. ``journal_dir`` needs ``durable``.
        Raises JoinTimeout when the members do not agree within ``timeout`` s, and
        JoinRejected (after removing the refused members it started) when the group refuses
        their settings (``GmsConfig.agreed``: ``stack_options={"gms__agreed": {...}}``);
        ConfigError, before anything is made, for settings no stack can run with."""
        if bootstrap is not None and (follow_nodes or members is not None or this_node):
            raise ValueError("a bootstrap file names every member: not with follow_nodes, "
                             "members= or this_node")
        if follow_nodes and (members is not None or this_node):
            raise ValueError("follow_nodes keeps members_per_node on every node: "
                             "not with members= or this_node")
        if not wait and not follow_nodes:
            raise ValueError("wait=False needs follow_nodes=True (a supervisor to wait)")
        if insecure and cluster_key is not None:
            raise ValueError("insecure=True runs without a key: not with cluster_key")
        if membership not in MEMBERSHIP_MODES:
            raise ValueError(f"membership must be one of {MEMBERSHIP_MODES}, "
                             f"not {membership!r}")
        if http_auth not in AUTH_MODES:
            raise ValueError(f"http_auth must be one of {AUTH_MODES}, not {http_auth!r}")
        if http_tls is not None and len(http_tls) != 2:
            raise ValueError("http_tls is (certfile, keyfile)")
        if arbitrator:
            check_arbitrator(config, stack_options, membership, bootstrap, this_node, wait)
        if journal_dir is not None and not durable:
            raise ValueError("journal_dir is where durable members journal: "
                             "it needs durable=True")
        if durable and membership == "gossip":
            raise ValueError("durable=True is for the work queue: gossip membership has none")
        journaled = durable_extra(journal_dir) if durable else {}
        # settings no stack can run with are refused (ConfigError) before anything is made
        stack_config("127.0.0.1", 0, [], preset=preset, transport=transport,
                     discovery=discovery, config=config, options=stack_options)
        if not ray.is_initialized():
            ray.init()
        stored = _stored_ring(namespace, cluster)
        if stored is not None and cluster not in cls.list_groups(namespace):
            stored = None  # left by an earlier group of this name, which is gone
        if not insecure and cluster_key is not None and stored is not None:
            try:  # a key the group still accepts: take the whole current ring
                cluster_key = member_ring(cluster_key, stored, restarted=False)
            except ValueError as e:
                raise JoinRejected(str(e)) from None
        elif not insecure and cluster_key is None:
            cluster_key = stored
        follow = dict(detached=detached, transport=transport, preset=preset,
                      discovery=discovery, config=config, stack_options=stack_options, port=port,
                      http=http, http_port=http_port, http_host=http_host,
                      http_auth=http_auth, http_tls=http_tls, ray_signal=ray_signal,
                      ray_poll_s=ray_poll_s, fence=fence, max_restarts=max_restarts,
                      timeout=min(timeout, 30.0), metrics_interval_s=metrics_interval_s,
                      cluster_key=None, insecure=insecure,  # the key: from Ray's KV
                      membership=membership, runtime_env=runtime_env, durable=durable,
                      journal_dir=journal_dir)
        if not wait:
            from .follower import start_follower
            if cluster_key is not None and stored is None:
                write_ring(namespace, cluster, cluster_key)
            follow["token"] = token or secrets.token_urlsafe(18)
            start_follower(cluster, namespace, members_per_node, follow)
            _say(progress, "following Ray's nodes: members start in the background")
            return cls(cluster, namespace)
        nodes = alive_nodes(ray.nodes())
        here = ray.get_runtime_context().get_node_id() if this_node else None
        g = cls(cluster, namespace)
        boot = None
        if bootstrap is not None:
            from .supervisors import Bootstrapper
            boot = Bootstrapper(cluster, discovery, bootstrap)
            if not boot.load().entries:
                raise ValueError("the bootstrap file lists no member")
            every = bootstrap_slots(nodes, boot.load().entries)
        else:
            every = g._keep_names(plan(nodes, members_per_node, members))
        if arbitrator:
            every = every + [g._arbitrator_slot(nodes, every, progress)]
        slots = [s for s in every if here is None or s.node_id == here]
        if not slots:
            raise RuntimeError("no member slot on this node")
        local = all(is_loopback(n["NodeManagerAddress"]) for n in nodes)
        existing = {}
        for s in every:
            h = g._lookup(s.name)
            if h is not None:
                existing[s.name] = h
        infos = g._gather({n: h.info.remote() for n, h in existing.items()}, 10.0)
        mixed = sorted(n for n, i in infos.items() if i and not is_arbitrator(n)
                       and i.get("durable", durable) != durable)
        if mixed:  # (a member of an older build says nothing: it is taken as asked)
            raise ValueError(f"group {cluster!r} runs members with durable="
                             f"{not durable} ({', '.join(mixed)}): launch it as it runs, or "
                             f"shut it down first")
        if token is None and existing:
            got = g._gather({n: h.http_info.remote() for n, h in existing.items()}, 10.0)
            token = next((v["token"] for v in got.values() if v and v.get("token")), None)
        token = token or secrets.token_urlsafe(18)
        if cluster_key is None and not insecure:
            if existing:  # the running members' key: joiners must hold the same
                got = g._gather({n: h.group_key.remote() for n, h in existing.items()}, 10.0)
                cluster_key = next((k for k in got.values() if k), None)
            if cluster_key is None and not existing:
                cluster_key = secrets.token_bytes(32)
        if cluster_key is not None and stored is None:
            write_ring(namespace, cluster, cluster_key)
        elif insecure and not existing:
            delete_ring(namespace, cluster)  # left by an earlier group of this name
        if cluster_key is not None:  # before the caller's own options, which may override
            stack_options = {"cluster_key": cluster_key, "auth_mode": "aesgcm",
                             **(stack_options or {})}
        if membership == "gossip":
            stack_options = {**(stack_options or {}), "membership": "gossip"}
        elif not _sets_expected_size(config, stack_options):
            # the first primary component needs a majority of the group launched, as MySQL
            # Group Replication bootstraps a group once: a member that starts while cut off
            # from its group (a host booted again into a partition) founds a group of one,
            # which must not be primary beside the real one (the campaign across hosts found
            # two primaries with id 1 that way)
            stack_options = {"primary__expected_size": len(every), **(stack_options or {})}
        elif not existing:
            expected = (stack_options or {}).get(
                "primary__expected_size", config.primary.expected_size if config else 1)
            text = expected_size_warning(expected, len(every))
            if text is not None:
                log.warning(text)
                _say(progress, text)
        if existing and membership != "gossip":
            # members launched into a running group join it; they never start a first
            # primary component of their own (MySQL Group Replication bootstraps once)
            stack_options = {"primary__bootstrap": False, **(stack_options or {})}
        if boot is not None:
            stack_options = {**(stack_options or {}), "bootstrap": boot.load()}
            if discovery is not None and not existing:
                boot.write()  # <store>/<cluster>/<first coordinator>.list, where joiners look
        ports, hosts = {}, []
        for s in every:
            inf = infos.get(s.name)
            if inf and inf.get("address"):
                ip, _, p = inf["address"].rpartition(":")
                hosts.append((ip, int(p)))
                continue
            if s.name in existing:
                continue
            if boot is not None:
                p = boot.load().by_name(s.name).port
            elif local:
                p = free_port(s.node_ip) if s in slots else None
            else:
                p = (port or DEFAULT_PORT) + s.k
            if p is not None:
                ports[s.name] = p
                hosts.append((s.node_ip, p))
        created, supervised = [], set()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        for s in slots:
            if s.name in existing:
                _say(progress, f"{s.name}: exists, attaching")
                g._handles[s.name] = existing[s.name]
                continue
            cfg = stack_config(s.node_ip, ports[s.name], hosts, preset=preset,
                               transport=transport, discovery=discovery, config=config,
                               options=stack_options)
            _supervise(cfg, s.node_id, detached, supervised)
            spec = MemberSpec(cluster, s.name, cfg, namespace=namespace, http=http,
                              http_port=http_port + s.k if http_port else 0, token=token,
                              http_host=http_host, http_auth=http_auth,
                              http_tls=tuple(http_tls) if http_tls else None,
                              ray_signal=ray_signal, fence=fence,
                              ray_poll_s=ray_poll_s, metrics_interval_s=metrics_interval_s,
                              extra={"detached": detached, "max_restarts": max_restarts,
                                     **({"workqueue": {"arbitrator": True}}
                                        if arbitrator and is_arbitrator(s.name)
                                        else journaled)})
            if created and not existing:
                # a new group: its first member founds it and the others join it once it
                # has (their processes start meanwhile): one coordinator, no concurrent
                # founding and no merge to wait for
                spec.wait_for = actor_name(cluster, created[0])
            opts: dict = dict(name=actor_name(cluster, s.name), namespace=namespace,
                              get_if_exists=True, num_cpus=0, max_restarts=max_restarts,
                              scheduling_strategy=NodeAffinitySchedulingStrategy(s.node_id,
                                                                                 soft=False))
            if detached:
                opts["lifetime"] = "detached"
            if runtime_env:
                opts["runtime_env"] = runtime_env
            g._handles[s.name] = _member_class().options(**opts).remote(spec)
            created.append(s.name)
            _say(progress, f"{s.name}: starting on node {s.node_ip} ({s.node_id[:8]}), "
                           f"port {ports[s.name]}")
        for n, h in existing.items():
            g._handles.setdefault(n, h)
        try:
            g._await_joined(created, timeout, progress)
        except JoinRejected:
            g._remove_rejected(created)
            raise
        want = {s.name for s in (slots if this_node else every)}
        g._await_agreement(want, timeout, progress, gossip=membership == "gossip")
        if follow_nodes:
            from .follower import start_follower
            start_follower(cluster, namespace, members_per_node, {**follow, "token": token})
            _say(progress, "following Ray's nodes: a member on every node added later")
        return g

    @classmethod
    async def launch_async(cls, cluster: str, members_per_node: int = 1, **kw: Any) -> "Group":
        return await asyncio.to_thread(cls.launch, cluster, members_per_node, **kw)

    @classmethod
    def attach(cls, cluster: str, namespace: str = NAMESPACE) -> "Group":
        """A handle on a running group, from any driver. Raises NoSuchGroup."""
        if not ray.is_initialized():
            ray.init()
        g = cls(cluster, namespace)
        g._refresh()
        if not g._handles:
            raise NoSuchGroup(f"no member of group {cluster!r} in namespace {namespace!r}")
        return g

    @classmethod
    async def attach_async(cls, cluster: str, namespace: str = NAMESPACE) -> "Group":
        return await asyncio.to_thread(cls.attach, cluster, namespace)

    @staticmethod
    def list_groups(namespace: str = NAMESPACE) -> dict:
        """{cluster: [member names]} of the groups that have member actors."""
        out: dict = {}
        for a in ray.util.list_named_actors(all_namespaces=True):
            if a.get("namespace") != namespace:
                continue
            parts = a["name"].split(":")
            if len(parts) >= 3 and parts[0] == "raygroups":
                out.setdefault(":".join(parts[1:-1]), []).append(parts[-1])
        return {k: sorted(v) for k, v in sorted(out.items())}

    # -- plumbing ---------------------------------------------------------------------------
    def _arbitrator_slot(self, nodes: list, data: list, progress):
        """The arbitrator's slot (``placement.arbitrator_slot``), under the name of the
        group's running arbitrator if it has one (a second launch attaches to it)."""
        slot, shared = arbitrator_slot(nodes, data)
        running = [n for n in self.list_groups(self.namespace).get(self.cluster, [])
                   if is_arbitrator(n)]
        if running:
            return replace(slot, name=running[0])
        if shared:
            text = (f"arbitrator of {self.cluster!r}: every live node holds data members, so "
                    f"it shares node {slot.node_ip} ({slot.node_id[:8]}) with them; that "
                    "node's loss takes the arbitrator with it (give it a node of its own)")
            log.warning(text)
            _say(progress, text)
        return slot

    def _keep_names(self, every: list) -> list:
        """The planned slots, where a node already runs members of this group under other
        names (a node's name depends on its peers': two nodes with one host name get their
        IP or node id added), with those names: a node keeps its members, never gets a second
        set."""
        planned = {s.name for s in every}
        others = [n for n in self.list_groups(self.namespace).get(self.cluster, [])
                  if n not in planned and not is_arbitrator(n)]  # data members' names
        if not others:
            return every
        handles = {n: h for n in others if (h := self._lookup(n)) is not None}
        infos = self._gather({n: h.info.remote() for n, h in handles.items()}, 10.0)
        on_node: dict = {}
        for n in sorted(infos):
            if infos[n] and infos[n].get("node_id"):
                on_node.setdefault(infos[n]["node_id"], []).append(n)
        taken = {n for n in planned if self._lookup(n) is not None}
        out = []
        for s in every:
            if s.name not in taken and on_node.get(s.node_id):
                s = replace(s, name=on_node[s.node_id].pop(0))
            out.append(s)
        return out

    def _lookup(self, name: str):
        try:
            return ray.get_actor(actor_name(self.cluster, name), namespace=self.namespace)
        except ValueError:
            return None

    def _refresh(self) -> None:
        names = set()
        for a in ray.util.list_named_actors(all_namespaces=True):
            if a.get("namespace") == self.namespace:
                m = member_of(a["name"], self.cluster)
                if m:
                    names.add(m)
        for n in list(self._handles):
            if n not in names:
                del self._handles[n]
        for n in names:
            self._handles.setdefault(n, None)

    def _handle(self, name: str):
        h = self._handles.get(name)
        if h is None:
            h = self._lookup(name)
            if h is None:
                self._handles.pop(name, None)
                raise NotMember(f"no member {name!r} in group {self.cluster!r}")
            self._handles[name] = h
        return h

    def _order(self) -> list:
        """Member names in the order unnamed calls try them: data members before the
        arbitrator."""
        names = sorted(self._handles)
        names.sort(key=lambda n: (n in self._avoid, is_arbitrator(n), n != self._current))
        return names

    def _gather(self, refs: dict, timeout: float) -> dict:
        """{name: result or None} of refs, each waited at most until ``timeout``."""
        out = {}
        if not refs:
            return out
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
        ready = set(ready)
        for n, r in refs.items():
            try:
                out[n] = ray.get(r) if r in ready else None
            except Exception:
                out[n] = None
        return out

    def _each(self, method: str, *args: Any) -> dict:
        """{name: ref} of ``method`` called on every member actor that exists now."""
        self._refresh()
        refs = {}
        for n in sorted(self._handles):
            try:
                refs[n] = getattr(self._handle(n), method).remote(*args)
            except NotMember:
                pass
        return refs

    def _failed(self, name: str, e: BaseException) -> None:
        if isinstance(e, GONE):
            self._handles[name] = None  # look it up again (restarted, or gone)
        self._avoid.add(name)
        if self._current == name:
            self._current = None

    def _targets(self, member: Optional[str], method: str = "") -> list:
        """The members to try in turn; for a queue call (``queue_*``) never the arbitrator,
        which holds no queue (QueueNotPrimary when only arbitrators are left)."""
        if member is not None:
            return [member]
        if not self._handles:
            self._refresh()
        if not self._handles:
            raise NoSuchGroup(f"no member of group {self.cluster!r} in namespace "
                              f"{self.namespace!r}")
        names = self._order()
        if method.startswith("queue_"):
            names = [n for n in names if not is_arbitrator(n)]
            if not names:
                from raygroups.stack.workqueue import QueueNotPrimary
                raise QueueNotPrimary(f"group {self.cluster!r} has no member that holds "
                                      "the queues (only its arbitrator)")
        return names

    def _call(self, method: str, *args: Any, member: Optional[str] = None,
              timeout: Optional[float] = CALL_TIMEOUT_S, unsure: Optional[type] = None,
              **kw: Any) -> Any:
        """``method`` on ``member``, or on the current member, then the others, then (after
        looking the group up again) the members found then, until one answers (the policy:
        ``_route``). ``unsure``: the call is not idempotent (a publish): when the member it
        went to vanished with it in flight, raise ``unsure`` (its outcome is unknown) rather
        than send it again elsewhere."""
        route = self._route(member, method, unsure)
        try:
            name = next(route)
            while True:
                if name is _REFRESH:
                    self._refresh()
                    name = next(route)
                    continue
                try:
                    out = ray.get(getattr(self._handle(name), method).remote(*args, **kw),
                                  timeout=timeout)
                except (RayTaskError, *GONE, NotMember) as e:
                    name = route.send(e)
                    continue
                except GetTimeoutError:
                    raise TimeoutError(f"{method} on {name} took over {timeout}s") from None
                self._answered(name, member)
                return out
        except StopIteration as stop:
            raise stop.value from None

    async def _acall(self, method: str, *args: Any, member: Optional[str] = None,
                     timeout: Optional[float] = CALL_TIMEOUT_S, unsure: Optional[type] = None,
                     **kw: Any) -> Any:
        """``_call`` for asyncio callers."""
        route = self._route(member, method, unsure)
        try:
            name = next(route)
            while True:
                if name is _REFRESH:
                    await asyncio.to_thread(self._refresh)
                    name = next(route)
                    continue
                try:
                    ref = getattr(self._handle(name), method).remote(*args, **kw)
                    out = await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout)
                except (RayTaskError, *GONE, NotMember) as e:
                    name = route.send(e)
                    continue
                except asyncio.TimeoutError:
                    raise TimeoutError(f"{method} on {name} took over {timeout}s") from None
                self._answered(name, member)
                return out
        except StopIteration as stop:
            raise stop.value from None

    def _route(self, member: Optional[str], method: str, unsure: Optional[type]):
        """The retry policy of ``_call`` and ``_acall``: yields the member to call next, or
        ``_REFRESH`` when the group must be looked up again first; is sent the error each
        call failed with; returns the error to raise when no member answered. A call naming
        its member goes to it alone, but when its actor died for good the one under its
        name is asked once more (a rolling upgrade replaces actors under their names)."""
        last: Optional[BaseException] = None
        died = False
        for refreshed in (False, True):
            if refreshed:
                if last is None or (member is not None and not died):
                    break
                if member is None:
                    yield _REFRESH
            for name in self._targets(member, method):
                e = yield name
                last = self._failure(name, e, member, method, unsure)
                died = isinstance(e, ActorDiedError) and not refreshed
                if member is not None:
                    break
        return last if last is not None else NoSuchGroup(self.cluster)

    def _get(self, name: str, ref: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        """The result of a call made on ``name``, its errors as ``_call`` raises them for a
        call that names its member."""
        try:
            return ray.get(ref, timeout=timeout)
        except (RayTaskError, *GONE) as e:
            raise self._failure(name, e, name) from None
        except GetTimeoutError:
            raise TimeoutError(f"a call on {name} took over {timeout}s") from None

    async def _aget(self, name: str, ref: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout)
        except (RayTaskError, *GONE) as e:
            raise self._failure(name, e, name) from None
        except asyncio.TimeoutError:
            raise TimeoutError(f"a call on {name} took over {timeout}s") from None

    def _failure(self, name: str, e: BaseException, member: Optional[str],
                 method: str = "", unsure: Optional[type] = None) -> BaseException:
        """A call on ``name`` failed with ``e``: raises what the caller must see (an error
        of the method itself, or ``unsure`` when the member vanished with a call that must
        not be sent twice in flight); returns the error to report if no other member
        answers (the member is gone, or is not in the group: another one may be)."""
        if unsure is not None and isinstance(e, RayActorError):
            self._failed(name, e)
            raise unsure(f"{method} on member {name}: the member went with the call in "
                         f"flight ({type(e).__name__}); it may or may not have taken effect, "
                         "and sending it again may apply it twice") from None
        if isinstance(e, RayTaskError):
            cause = _unwrap(e)
            # a member out of the group (a durable one whose journal failed, too: the call
            # took no effect there) leaves the call to another, unless it named its member
            if not (isinstance(cause, (NotMember, QueueDiskError)) and member is None):
                raise cause from None
            self._failed(name, cause)
            return cause
        self._failed(name, e)
        return e if isinstance(e, RaygroupsError) else GroupClosed(
            f"member {name} of {self.cluster!r} is gone ({type(e).__name__})")

    def _answered(self, name: str, asked: Optional[str]) -> None:
        """``name`` answered: it is the handle's current member unless the call named its
        member (``asked``), so that calls naming a member (a reader per member) never move
        where the others go (a driver's send_many batches stay FIFO through one member)."""
        if asked is None:
            self._current = name
        self._avoid.discard(name)

    def _await_joined(self, names: list, timeout: float, progress) -> None:
        if not names:
            return
        refs = {self._handles[n].ready.remote(timeout): n for n in names}
        deadline = time.monotonic() + timeout
        pending = list(refs)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise JoinTimeout(f"members {sorted(refs[r] for r in pending)} of "
                                  f"{self.cluster!r} did not join in {timeout}s")
            done, pending = ray.wait(pending, num_returns=1, timeout=left)
            for r in done:
                try:
                    inf = ray.get(r)
                except RayTaskError as e:
                    raise _unwrap(e) from None
                except RayActorError as e:
                    raise JoinTimeout(f"member {refs[r]} died while joining: {e}") from None
                _say(progress, f"{inf['name']}: joined as {inf['uuid_text']} at "
                               f"{inf['address']}, view {inf['view_id'][0]}:{inf['view_id'][1]}"
                               f" ({inf['view_size']} members)")

    def _remove_rejected(self, names: list) -> None:
        """Kill the members in ``names`` the group refused (their settings differ from the
        group's): they would never join, and their actors would linger."""
        killed = set()
        for n in names:
            h = self._handles[n]
            try:
                ray.get(h.ready.remote(10.0), timeout=10.0 + CALL_TIMEOUT_S)
            except RayTaskError as e:
                if isinstance(_unwrap(e), JoinRejected):
                    ray.kill(h, no_restart=True)
                    killed.add(n)
            except (GetTimeoutError, RayActorError):
                pass
        self._wait_gone(killed, 10.0)

    def _wait_gone(self, names: set, timeout: float) -> None:
        """Until Ray no longer lists the killed member actors ``names`` (at most ``timeout``
        s), so that no handle on the group sees them afterwards."""
        deadline = time.monotonic() + timeout
        while names and time.monotonic() < deadline:
            self._refresh()
            if not names & self._handles.keys():
                break
            time.sleep(0.05)
        for n in names:
            self._handles.pop(n, None)

    def _await_agreement(self, names: set, timeout: float, progress,
                         gossip: bool = False) -> None:
        """Until every member in ``names`` has installed one view that holds them all (gossip
        mode: until each lists them all, alive)."""
        if gossip:
            return self._await_lists(names, timeout, progress)
        deadline = time.monotonic() + timeout
        last = None
        while True:
            infos = self._gather({n: self._handle(n).info.remote() for n in names}, 10.0)
            ids = {tuple(i["view_id"]) if i and i["view_id"] else None for i in infos.values()}
            if len(ids) == 1 and None not in ids and \
                    all(i["view_size"] >= len(names) for i in infos.values()):
                vid = ids.pop()
                _say(progress, f"agreed: view {vid[0]}:{vid[1]} with {len(names)} members")
                return
            if time.monotonic() > deadline:
                raise JoinTimeout(f"members of {self.cluster!r} did not agree on a view in "
                                  f"{timeout}s: {infos}")
            state = sorted(ids - {None})
            if state != last:
                last = state
                _say(progress, f"waiting for one view: {len(state)} distinct view(s) so far")
            time.sleep(0.05)

    def _await_lists(self, names: set, timeout: float, progress) -> None:
        """Gossip mode: until every member in ``names`` lists exactly them, all alive (each
        list is the member's own; no view id is shared)."""
        deadline = time.monotonic() + timeout
        lists: dict = {}
        while True:
            got = self._gather({n: self._handle(n).members.remote() for n in names}, 10.0)
            lists = {n: sorted(m["name"] for m in (ms or ()) if m["state"] == "alive")
                     for n, ms in got.items()}
            if all(v == sorted(names) for v in lists.values()):
                _say(progress, f"agreed: every member lists the {len(names)} members")
                return
            if time.monotonic() > deadline:
                raise JoinTimeout(f"members of {self.cluster!r} did not list each other in "
                                  f"{timeout}s: {lists}")
            time.sleep(0.05)

    # -- the view and the members -----------------------------------------------------------
    def view(self):
        """The current view (``raygroups.stack.View``): the same on every member."""
        return self._call("view")

    async def view_async(self):
        return await self._acall("view")

    def arbitrators(self) -> list:
        """The names of the group's arbitrator member actors (``launch(arbitrator=True)``)."""
        return [n for n in self.member_names() if is_arbitrator(n)]

    def member_names(self) -> list:
        """The names of the group's member actors (whether in the view or not)."""
        self._refresh()
        return sorted(self._handles)

    def _merge(self, listed: list, infos: dict) -> list:
        by_uuid = {i["uuid"]: i for i in infos.values() if i and i.get("uuid")}
        out = []
        for m in listed:
            d = dict(m)
            inf = by_uuid.get(m["uuid"])
            d["node_id"] = inf["node_id"] if inf else None
            d["actor_name"] = inf["actor_name"] if inf else None
            d["http_url"] = inf["http_url"] if inf else None
            d["pid"] = inf["pid"] if inf else None
            if inf and inf.get("role"):  # the member's own word on its role
                d["role"] = inf["role"]
            if m["state"] not in ("suspect", "dead") and inf:
                d["state"] = "alive" if inf["state"] == "member" else inf["state"]
            d.pop("self", None)
            out.append(d)
        return out

    def members(self) -> list:
        """The view's members: [{name, uuid, address, node_id, state, coordinator,
        actor_name, http_url, pid, role}], in view order (the coordinator first).
        ``role``: "arbitrator" (it votes and holds no queue: ``launch(arbitrator=True)``) or
        "data". ``state``:
        "alive", "suspect" or "dead" (as the answering member's failure detector sees it),
        or the member's own "paused", "leaving", "left", "shutdown"."""
        listed = self._call("members")
        return self._merge(listed, self._gather(self._each("info"), 10.0))

    async def members_async(self) -> list:
        listed = await self._acall("members")
        await asyncio.to_thread(self._refresh)
        infos = {}
        for n in sorted(self._handles):
            try:
                infos[n] = await self._acall("info", member=n, timeout=10.0)
            except (RaygroupsError, TimeoutError):
                infos[n] = None
        return self._merge(listed, infos)

    def view_history(self, member: Optional[str] = None) -> list:
        """The views a member installed (JSON, oldest first)."""
        return self._call("view_history", member=member)

    async def view_history_async(self, member: Optional[str] = None) -> list:
        return await self._acall("view_history", member=member)

    def probe(self) -> list:
        """Every member's state and attributes (JGroups probe): ``state_info()`` of each
        member actor, in name order; an unreachable member as {"name", "error"}."""
        refs = self._each("state_info")
        got = self._gather(refs, 15.0)
        return [got.get(n) or {"name": n, "error": "unreachable"} for n in sorted(refs)]

    async def probe_async(self) -> list:
        return await asyncio.to_thread(self.probe)

    def status_urls(self) -> dict:
        """{member: URL of its status page}."""
        got = self._gather(self._each("http_info"), 10.0)
        return {n: v["url"] for n, v in got.items() if v and v.get("url")}

    async def status_urls_async(self) -> dict:
        return await asyncio.to_thread(self.status_urls)

    def rotate_key(self, new_key: Optional[bytes] = None, timeout: float = 30.0) -> str:
        """Replace the group's key with ``new_key`` (default: a new random 256-bit key) while
        it runs: no restart, no view change, no message lost. Three steps (``stack/auth.py``),
        each written to Ray's KV first (a member that Ray restarts meanwhile takes it from
        there) and then applied to every member: ``[old, new]`` (everyone accepts the new
        key), ``[new, old]`` (everyone seals with it), ``[new]``. Returns the new key's id
        (hex; never the key). A member that does not answer within ``timeout`` s stops the
        rotation with RotationIncomplete; calling again finishes it. ValueError for an
        insecure group."""
        ring = _stored_ring(self.namespace, self.cluster)
        if ring is None:
            got = self._gather(self._each("group_key"), timeout)
            ring = next((as_ring(k) for k in got.values() if k), None)
        if ring is None:
            raise ValueError(f"group {self.cluster!r} runs insecure: it has no key to rotate")
        new = as_ring(new_key)[0] if new_key is not None else secrets.token_bytes(32)
        steps = ([ring] if len(ring) > 1 else []) + [[ring[0], new], [new, ring[0]], [new]]
        for k, step in enumerate(steps, 1):
            write_ring(self.namespace, self.cluster, step)
            refs = self._each("set_group_key", step)
            ready, late = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
            failed = sorted(n for n, r in refs.items() if r in late or not _took(r))
            if failed:
                raise RotationIncomplete(
                    f"members {failed} did not take step {k} of {len(steps)} of the key "
                    f"rotation (key ids {ring_ids(step)}); rotate_key again finishes it")
        return key_id(new).hex()

    async def rotate_key_async(self, new_key: Optional[bytes] = None,
                               timeout: float = 30.0) -> str:
        return await asyncio.to_thread(self.rotate_key, new_key, timeout)

    def http_token(self) -> str:
        """The bearer token of the members' guarded HTTP endpoints."""
        return self._call("http_info")["token"]

    async def http_token_async(self) -> str:
        return (await self._acall("http_info"))["token"]

    # -- messages ---------------------------------------------------------------------------
    def send(self, payload: Any, dest: Optional[str] = None) -> None:
        """Reliable multicast to the view through one member (or unicast to the member
        named ``dest``, by name or UUID)."""
        self._call("send", payload, dest)

    async def send_async(self, payload: Any, dest: Optional[str] = None) -> None:
        await self._acall("send", payload, dest)

    def send_many(self, payloads: Any, dest: Optional[str] = None) -> int:
        """Many messages in one Ray call (the way to get throughput), multicast in list
        order (FIFO). ``payloads``: a list, or an ObjectRef of one (``ray.put(list)``:
        Ray hands the list to the member, and frees it when the call and the caller are
        done with it, as for any task argument). Returns how many were sent."""
        return self._call("send_many", payload_list(payloads), dest)

    async def send_many_async(self, payloads: Any, dest: Optional[str] = None) -> int:
        return await self._acall("send_many", payload_list(payloads), dest)

    def receive(self, max_messages: int = 1000, timeout: float = 1.0,
                member: Optional[str] = None) -> list:
        """Up to ``max_messages`` messages delivered at one member (``member``, or the
        handle's current one), waiting up to ``timeout`` s for the first:
        [{"sender", "sender_uuid", "payload", "view"}] (``view``: [coordinator uuid, counter]
        of the view the message was delivered in)."""
        return self._call("receive", max_messages, timeout, member=member,
                          timeout=timeout + CALL_TIMEOUT_S)

    async def receive_async(self, max_messages: int = 1000, timeout: float = 1.0,
                            member: Optional[str] = None) -> list:
        return await self._acall("receive", max_messages, timeout, member=member,
                                 timeout=timeout + CALL_TIMEOUT_S)

    def receive_many(self, max_messages: int = DEFAULT_BATCH, timeout: float = 1.0,
                     member: Optional[str] = None, min_messages: int = 1,
                     linger_s: float = 0.0) -> MessageBatch:
        """The batch form of ``receive``: up to ``max_messages`` messages delivered at one
        member as one ``MessageBatch`` (actors/batch.py: the payloads in one list, senders
        and views in runs; iterate it for one ``Delivered`` per message). Waits up to
        ``timeout`` s for the first message (none: an empty batch); once one is there, up
        to ``linger_s`` s more until ``min_messages`` are: for throughput, ask for a large
        batch (``min_messages`` in the thousands, ``linger_s`` of some ms) so that a busy
        reader makes few calls. Messages are taken off the member's inbox: each goes to
        one reader, in delivery order."""
        check_batch(max_messages, min_messages, timeout, linger_s)
        return self._call("receive_many", max_messages, timeout, min_messages, linger_s,
                          member=member, timeout=timeout + linger_s + CALL_TIMEOUT_S)

    async def receive_many_async(self, max_messages: int = DEFAULT_BATCH,
                                 timeout: float = 1.0, member: Optional[str] = None,
                                 min_messages: int = 1, linger_s: float = 0.0) -> MessageBatch:
        check_batch(max_messages, min_messages, timeout, linger_s)
        return await self._acall("receive_many", max_messages, timeout, min_messages,
                                 linger_s, member=member,
                                 timeout=timeout + linger_s + CALL_TIMEOUT_S)

    def subscribe(self, member: Optional[str] = None, max_messages: int = DEFAULT_BATCH,
                  min_messages: int = 1, linger_s: float = 0.0,
                  wait_s: float = 1.0) -> Subscription:
        """The messages delivered at ``member`` (default: the handle's current member) as
        a stream of ``MessageBatch``es: ``for batch in g.subscribe(): ...`` or ``async for``
        (actors/subscription.py). One ``receive_many`` call at a time (a long poll of
        ``wait_s``; ``min_messages``/``linger_s`` as there), never more than
        ``max_messages`` held; it ends with GroupClosed/NotMember when that member is gone."""
        check_batch(max_messages, min_messages, wait_s, linger_s)
        return Subscription(self, self._pinned(member), max_messages, min_messages, linger_s,
                            wait_s)

    def publisher(self, member: Optional[str] = None, in_flight: int = 4) -> Publisher:
        """Batches to the group with up to ``in_flight`` Ray calls on their way, multicast
        in the order given, each once (actors/publisher.py): ``pub.send_many(batch)``, then
        ``pub.flush()``. Through ``member`` (default: the handle's current member) for its
        whole life."""
        return Publisher(self, self._pinned(member), in_flight)

    def _pinned(self, member: Optional[str]) -> str:
        """``member``, or the member that answers for the handle now."""
        return member if member is not None else self._call("info")["name"]

    # -- work queues ---------------------------------------------------------------
    def queue(self, name: str, alternate: Optional[str] = None, member: Optional[str] = None,
              **limits: Any):
        """The replicated work queue ``name`` (created with its ``alternate`` if new): a
        ``WorkQueueHandle`` (actors/queue.py). ``member``: use that member (its consumers);
        None: the handle's current member. ``limits``: max_depth, max_bytes, overflow
        ("reject_publish" or "dead_letter_oldest"), ttl_s, lease_s, durable (True: raises
        QueueNotDurable unless the group was launched with ``durable=True``, whose members
        journal every queue)."""
        from .queue import WorkQueueHandle
        return WorkQueueHandle(self, name, alternate, member, **limits)

    def queues(self, member: Optional[str] = None) -> dict:
        """The group's work queues: {name: {"depth", "available", "acquired", "bytes",
        "max_depth", "max_bytes", "overflow", "ttl_s", "alternate", and the counters}}, as
        ``member`` (default: the handle's current member) holds them; every member holds
        the same once it applied the same commands."""
        return self._call("queue_list", member=member)

    # -- the subscription -------------------------------------------------------------------
    def view_events(self, after=None, timeout: Optional[float] = None,
                    poll_s: float = 10.0) -> Iterator[dict]:
        """Every view installed after ``after`` (a ViewId; None: starting with the current
        view), in order, as {"view", "installed_at", "answered_at", "member"}; ends after
        ``timeout`` s without a new view (None: never) or when the group is gone."""
        last = after
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = poll_s if deadline is None else min(poll_s, deadline - time.monotonic())
            if wait <= 0:
                return
            try:
                res = self._call("wait_for_view", last, wait, timeout=wait + CALL_TIMEOUT_S)
            except NoSuchGroup:
                return
            except (GroupClosed, NotMember):
                self._refresh()
                if not self._handles:
                    return
                time.sleep(0.05)
                continue
            got = False
            for e in res["views"]:
                vid = e["view"].view_id
                if last is not None and not vid > last:
                    continue
                last = vid
                got = True
                if deadline is not None:
                    deadline = time.monotonic() + timeout
                yield {**e, "member": res["member"]}
            if not got and res["state"] not in ("member", "paused"):
                self._failed(res["member"], NotMember(res["state"]))

    def views(self, after=None, timeout: Optional[float] = None) -> Iterator:
        """Every view change, in order (``raygroups.stack.View``s), from the current view on.
        Blocks between changes; see ``view_events`` for ``timeout``."""
        for e in self.view_events(after, timeout):
            yield e["view"]

    async def view_events_async(self, after=None, timeout: Optional[float] = None,
                                poll_s: float = 10.0) -> AsyncIterator[dict]:
        last = after
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            wait = poll_s if deadline is None else min(poll_s, deadline - loop.time())
            if wait <= 0:
                return
            try:
                res = await self._acall("wait_for_view", last, wait,
                                        timeout=wait + CALL_TIMEOUT_S)
            except NoSuchGroup:
                return
            except (GroupClosed, NotMember):
                await asyncio.to_thread(self._refresh)
                if not self._handles:
                    return
                await asyncio.sleep(0.05)
                continue
            got = False
            for e in res["views"]:
                vid = e["view"].view_id
                if last is not None and not vid > last:
                    continue
                last = vid
                got = True
                if deadline is not None:
                    deadline = loop.time() + timeout
                yield {**e, "member": res["member"]}
            if not got and res["state"] not in ("member", "paused"):
                self._failed(res["member"], NotMember(res["state"]))

    async def views_async(self, after=None, timeout: Optional[float] = None) -> AsyncIterator:
        async for e in self.view_events_async(after, timeout):
            yield e["view"]

    # -- operating members --------------------------------------------------------------------
    def leave(self, member: str) -> bool:
        """``member`` leaves gracefully (its actor stays; ``rejoin`` brings it back); True
        when the group confirmed the leave (else the others exclude it as a crash)."""
        return self._call("leave", member=member)

    async def leave_async(self, member: str) -> bool:
        return await self._acall("leave", member=member)

    def upgrade(self, stack_options: Optional[dict] = None,
                runtime_env: Optional[dict] = None, timeout: float = 60.0,
                progress: Optional[Callable[[str], None]] = None) -> list:
        """A rolling upgrade: every member in turn leaves and is replaced, on its node and
        port, by a member actor with ``stack_options`` (``{"transport__wire_versions":
        (1, 2)}``) and/or Ray's ``runtime_env`` (``{"py_modules": [wheel]}``), the
        coordinator last, each once the group is whole again (actors/upgrade.py). The names
        in the order replaced."""
        from .upgrade import rolling_upgrade
        return rolling_upgrade(self, stack_options, runtime_env, timeout, progress)

    def rejoin(self, member: str) -> dict:
        """``member`` joins again (fresh UUID) after a leave; its info."""
        return self._call("rejoin", member=member)

    async def rejoin_async(self, member: str) -> dict:
        return await self._acall("rejoin", member=member)

    def pause(self, member: str, seconds: float) -> None:
        """Debug: ``member`` stops answering for ``seconds``."""
        self._call("pause", seconds, member=member)

    async def pause_async(self, member: str, seconds: float) -> None:
        await self._acall("pause", seconds, member=member)

    def crash(self, member: str) -> None:
        """Debug: ``member``'s process exits at once (Ray restarts it, fresh UUID)."""
        h = self._handle(member)
        h.crash.remote()

    async def crash_async(self, member: str) -> None:
        await asyncio.to_thread(self.crash, member)

    def kill(self, member: str, restart: bool = False) -> None:
        """``ray.kill`` the member's actor (``restart``: let Ray restart it; it rejoins with a
        fresh UUID)."""
        ray.kill(self._handle(member), no_restart=not restart)
        if not restart:
            self._handles.pop(member, None)

    async def kill_async(self, member: str, restart: bool = False) -> None:
        await asyncio.to_thread(self.kill, member, restart)

    async def member_names_async(self) -> list:
        return await asyncio.to_thread(self.member_names)

    def info(self, member: str) -> dict:
        """One member actor's own attributes (name, uuid, address, node_id, state, ...)."""
        return self._call("info", member=member)

    async def info_async(self, member: str) -> dict:
        return await self._acall("info", member=member)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Every member leaves, then its actor is killed; the names are free afterwards.
        A node follower (``follow_nodes``) is stopped first."""
        from .follower import stop_follower
        stop_follower(self.cluster, self.namespace)
        try:
            delete_ring(self.namespace, self.cluster)
        except Exception:  # the GCS unreachable: the ring goes with the cluster
            pass
        self._gather(self._each("close", min(5.0, timeout)), timeout)
        for n in list(self._handles):
            # by name too: a member whose handle was dropped (a call to it failed while Ray
            # restarted it) would live on, and _wait_gone wait its whole timeout for it
            h = self._handles[n] or self._lookup(n)
            try:
                if h is not None:
                    ray.kill(h, no_restart=True)
            except Exception:
                pass
        self._wait_gone(set(self._handles), timeout)
        self._handles.clear()

    async def shutdown_async(self, timeout: float = 10.0) -> None:
        await asyncio.to_thread(self.shutdown, timeout)
