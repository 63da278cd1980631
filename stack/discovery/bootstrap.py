"""Bootstrap files (JGroups cloud-store discovery): every member that will start, in start
order.

A bootstrap file is a members file named after the first coordinator (``1.list``): line *k*
gives the *k*-th member to start its logical name, port and seeded UUID (``1``, ``2``, ...).
A member started from it needs no discovery round: its address cache is filled from the file
and it joins the member marked ``T`` (or, being that member, founds the group).

UUIDs are never reused: the runtime hands out each line once per process
(``raygroups.stack.runtime.stores.claim_identity``, JGroups' AddressGenerator seeded with the
initial UUID); a channel that connects again, or a member restarted by its supervisor, takes
a fresh random UUID.

``generate_bootstrap(ray.nodes(), cluster)`` writes one for a Ray cluster: the counterpart of
the seed's ``gcutil listinstances`` and of the CLI's ``raygroups bootstrap generate``.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

from .members_file import Entry, MembersFile


def column_name(i: int) -> str:
    """0 -> A, 25 -> Z, 26 -> AA: short logical names (the bytes-per-member budget)."""
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(ord("A") + r) + out
    return out


def _node_host(node: Any) -> tuple[str, bool, str]:
    """(ip, is_head, node id) of a ``ray.nodes()`` entry, an ``"ip"`` or an ``(ip, port)``."""
    if isinstance(node, dict):
        ip = node.get("NodeManagerAddress") or node.get("node_ip_address") or node.get("ip")
        res = node.get("Resources") or {}
        head = any(k == "node:__internal_head__" for k in res) or bool(node.get("is_head_node"))
        return str(ip), head, str(node.get("NodeID", ""))
    if isinstance(node, (tuple, list)):
        return str(node[0]), False, ""
    return str(node), False, ""


def generate_bootstrap(nodes: Iterable[Any], cluster: str, port: int = 7800,
                       per_node: int = 1) -> MembersFile:
    """A bootstrap file for the live nodes of ``ray.nodes()`` (dicts; dead nodes skipped),
    or for plain IPs: ``per_node`` members per node on ports ``port``, ``port+1``, ...; the
    head node first, then by IP; logical names A, B, C, ...; seeded UUIDs 1, 2, 3, ...; the
    first member marked ``T`` (the first coordinator, so the file is ``1.list``).
    ``source`` is ``<cluster>/1.list``, where the file belongs in the discovery store."""
    hosts = []
    for n in nodes:
        if isinstance(n, dict) and not n.get("Alive", n.get("alive", True)):
            continue
        hosts.append(_node_host(n))
    hosts.sort(key=lambda h: (not h[1], h[0], h[2]))
    entries = []
    for ip, _, _ in hosts:
        for k in range(per_node):
            i = len(entries)
            entries.append(Entry(column_name(i), (i + 1).to_bytes(16, "big"), ip, port + k,
                                 coord=i == 0))
    return MembersFile(entries, source=f"{cluster}/1.list")


def seeded_uid(config: Any, cluster: str, name: Optional[str], fresh: bool) -> Optional[bytes]:
    """The simulator's rule (no process-wide claims, one Simulation per seed): a member
    listed by name in ``config.store.bootstrap`` (a MembersFile) takes its seeded UUID on its
    first incarnation; ``fresh`` (a restart) or not listed: None, a random UUID."""
    st = getattr(config, "store", None)
    if fresh or st is None or not st.use_bootstrap_identity:
        return None
    if not isinstance(st.bootstrap, MembersFile) or name is None:
        return None
    e = st.bootstrap.by_name(name)
    return e.uid if e is not None else None
