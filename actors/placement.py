"""Where members go: names, Ray nodes, addresses, ports and stack configs.

Members are named after their node, ``<node label>-<k>`` (k = 0, 1, ... on that node), so the
same member gets the same name whoever launches it: a second ``Group.launch`` (or each node's
``raygroups up`` in cluster.yaml) finds the existing actors by name and attaches
(``get_if_exists``). The node label is the node's host name; when live nodes share a host
name, the host name plus the node's IP (stable across Ray restarts, so a durable group
launched again finds its members' journals); when they share that too (several raylets on
one machine), the host name plus the start of the node id. Actors are named
``raygroups:<cluster>:<member>`` in the namespace ``raygroups``.

Addresses: a member binds its sockets to its node's IP as Ray reports it, so on a local Ray
started with ``_node_ip_address="127.0.0.1"`` everything stays on loopback. Ports: with every
node on loopback ("local mode") the launcher picks free ports; on a real cluster member k of
a node listens on ``port + k`` (7800 by default), so the static host list is known up front.

The arbitrator (``Group.launch(..., arbitrator=True)``; Galera's garbd): one more member that
votes and holds no queue, named ``<node label>-arbitrator`` (``arbitrator_name``; handles
tell it by that name, ``is_arbitrator``) and placed by ``arbitrator_slot``: on a live node
that holds no data member of the group (the "third node"), else on the node with the
fewest, which then takes the arbitrator with it when it goes. It listens on ``port + 99``
(``ARBITRATOR_K``), so data members added to its node later never take its port.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from raygroups.stack import StackConfig
from raygroups.stack.primary import PrimaryConfig

NAMESPACE = "raygroups"
DEFAULT_PORT = 7800
ARBITRATOR_SUFFIX = "-arbitrator"
ARBITRATOR_K = 99
"""The arbitrator's index on its node: ports ``port + 99`` and ``http_port + 99``."""


def actor_name(cluster: str, member: str) -> str:
    return f"raygroups:{cluster}:{member}"


def member_of(name: str, cluster: str) -> Optional[str]:
    """The member name in an actor name of ``cluster``, else None."""
    prefix = actor_name(cluster, "")
    return name[len(prefix):] if name.startswith(prefix) else None


def clusters_of(names: Iterable[str]) -> dict:
    """{cluster: [member, ...]} of the raygroups actor names among ``names``."""
    out: dict = {}
    for n in names:
        parts = n.split(":")
        if len(parts) >= 3 and parts[0] == "raygroups":
            out.setdefault(":".join(parts[1:-1]), []).append(parts[-1])
    return out


@dataclass(frozen=True)
class Slot:
    """One member's place: its name, its node and its index on that node."""
    name: str
    node_id: str
    node_ip: str
    k: int


def is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return ip == "localhost"


def alive_nodes(nodes: Iterable[dict]) -> list[dict]:
    """The live nodes of ``ray.nodes()``, head first, then by IP and node id."""
    live = [n for n in nodes if n.get("Alive", n.get("alive", False))]

    def key(n: dict) -> tuple:
        head = "node:__internal_head__" in (n.get("Resources") or {})
        return (not head, n.get("NodeManagerAddress", ""), n.get("NodeID", ""))
    return sorted(live, key=key)


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "node"


def node_labels(nodes: list[dict]) -> dict:
    """{node id: label}: the host name, made unique with the IP, then the node id's start,
    if needed."""
    hosts = [_clean(n.get("NodeManagerHostname") or n.get("NodeManagerAddress", "node"))
             for n in nodes]
    with_ip = [f"{h}-{_clean(n.get('NodeManagerAddress', ''))}" for n, h in zip(nodes, hosts)]
    out = {}
    for n, h, hi in zip(nodes, hosts, with_ip):
        out[n["NodeID"]] = h if hosts.count(h) == 1 else \
            hi if with_ip.count(hi) == 1 else f"{h}-{n['NodeID'][:6]}"
    return out


def plan(nodes: list[dict], members_per_node: int = 1, members: Optional[int] = None,
         only_node: Optional[str] = None) -> list[Slot]:
    """Slots on the live ``nodes``: ``members_per_node`` on each, or ``members`` in all, dealt
    round-robin over the nodes (head first); ``only_node``: just that node's slots."""
    if not nodes:
        raise RuntimeError("no live Ray node")
    labels = node_labels(nodes)
    if members is not None:
        if members < 1:
            raise ValueError("members must be >= 1")
        per = [0] * len(nodes)
        for i in range(members):
            per[i % len(nodes)] += 1
    else:
        if members_per_node < 1:
            raise ValueError("members_per_node must be >= 1")
        per = [members_per_node] * len(nodes)
    slots = []
    for n, count in zip(nodes, per):
        if only_node is not None and n["NodeID"] != only_node:
            continue
        for k in range(count):
            slots.append(Slot(f"{labels[n['NodeID']]}-{k}", n["NodeID"],
                              n["NodeManagerAddress"], k))
    return slots


def arbitrator_name(label: str) -> str:
    """The arbitrator's member name on the node labelled ``label``."""
    return f"{label}{ARBITRATOR_SUFFIX}"


def is_arbitrator(member: str) -> bool:
    """Whether the member name is an arbitrator's (``arbitrator_name``)."""
    return member.endswith(ARBITRATOR_SUFFIX)


def arbitrator_slot(nodes: list[dict], data: list[Slot]) -> tuple[Slot, bool]:
    """The arbitrator's slot beside the data members' ``data`` on the live ``nodes``: the
    first node (head first, as ``alive_nodes`` sorts) that holds none of them; else the
    node that holds the fewest (the first of those). The flag: it shares its node with data
    members (then that node's loss takes the arbitrator with it, and a primary component
    needs the others to be a majority without both)."""
    if not nodes:
        raise RuntimeError("no live Ray node")
    count = {n["NodeID"]: 0 for n in nodes}
    for s in data:
        if s.node_id in count:
            count[s.node_id] += 1
    node = min(nodes, key=lambda n: count[n["NodeID"]])  # the first of the fewest
    label = node_labels(nodes)[node["NodeID"]]
    return (Slot(arbitrator_name(label), node["NodeID"], node["NodeManagerAddress"],
                 ARBITRATOR_K), count[node["NodeID"]] > 0)


def _tie_breaker(config: Optional[StackConfig], options: Optional[dict]) -> str:
    """The stack's even-split tie-breaker the members would run with."""
    if options and "primary__tie_breaker" in options:
        return options["primary__tie_breaker"]
    return config.primary.tie_breaker if config is not None else PrimaryConfig.tie_breaker


def check_arbitrator(config: Optional[StackConfig], options: Optional[dict], membership: str,
                     bootstrap: Any, this_node: bool, wait: bool) -> None:
    """ValueError for what ``launch(arbitrator=True)`` does not go with."""
    if _tie_breaker(config, options) == "store":
        raise ValueError('arbitrator=True: not with primary__tie_breaker="store": the '
                         "two would decide one split twice (a view holding exactly half of the "
                         "last primary with the arbitrator is never primary for the work "
                         "queue, whatever the lease says); choose one")
    if membership == "gossip":
        raise ValueError("arbitrator=True: gossip membership has no primary component to "
                         "vote in")
    if bootstrap is not None or this_node or not wait:
        raise ValueError("arbitrator=True: launch it from one driver that waits (not with "
                         "a bootstrap file, this_node or wait=False)")


def bootstrap_slots(nodes: list[dict], entries: Iterable[Any]) -> list[Slot]:
    """Slots for the lines of a bootstrap file, in file order, each named by its line and
    placed on a live node at the line's address; lines that name one address shared by
    several nodes (raylets of one host) are dealt round-robin over those nodes. Raises
    ValueError for a line whose address no live node has."""
    at: dict = {}
    for n in nodes:
        at.setdefault(n["NodeManagerAddress"], []).append(n)
    dealt: dict = {}
    per_node: dict = {}
    slots = []
    for e in entries:
        here = at.get(e.host)
        if not here:
            raise ValueError(f"bootstrap line {e.name} names {e.host}, where no live Ray node "
                             f"is (nodes at {sorted(at)})")
        node = here[dealt.get(e.host, 0) % len(here)]
        dealt[e.host] = dealt.get(e.host, 0) + 1
        k = per_node.get(node["NodeID"], 0)
        per_node[node["NodeID"]] = k + 1
        slots.append(Slot(e.name, node["NodeID"], e.host, k))
    return slots


def stack_config(bind_addr: str, port: int, hosts: list, *, preset: Optional[str] = None,
                 transport: str = "udp", discovery: Optional[str] = None,
                 config: Optional[StackConfig] = None,
                 options: Optional[dict] = None) -> StackConfig:
    """The config of one member. Default discovery: the static list ``hosts`` (TCPPING) with
    unicast fan-out (no IP multicast, which clouds do not carry); ``discovery="file:///dir"``
    (or ``s3://``, ``ray-kv://``): the discovery store instead. ``preset`` defaults to
    ``local`` on loopback, else ``lan``. ``config`` replaces the preset (its discovery is kept
    unless ``discovery`` is given); ``options`` are ``layer__field=value`` overrides."""
    opts: dict = {"bind_addr": bind_addr, "port": port}
    if config is None:
        preset = preset or ("local" if is_loopback(bind_addr) else "lan")
        make = {"local": StackConfig.local, "lan": StackConfig.lan, "wan": StackConfig.wan}[preset]
        cfg = make(transport)
        opts["transport__ip_multicast"] = False
        if discovery is None:
            opts["initial_hosts"] = hosts
    else:
        cfg = config
    if discovery is not None:
        opts["discovery"] = discovery
    opts.update(options or {})
    return cfg.with_options(**opts)


def describe_nodes(nodes: Iterable[dict]) -> list[dict]:
    """A plain summary of ``ray.nodes()`` entries for output."""
    return [{"node_id": n.get("NodeID"), "ip": n.get("NodeManagerAddress"),
             "host": n.get("NodeManagerHostname"), "alive": n.get("Alive")} for n in nodes]
