"""Metrics through ``ray.util.metrics``: a small periodic exporter reading ``channel.stats()``.

Every ``interval_s`` a member's exporter reads its channel's counters and records

| metric | kind | tags |
|---|---|---|
| ``raygroups_views_installed`` | counter | cluster, member |
| ``raygroups_members`` | gauge (members of the current view) | cluster, member |
| ``raygroups_suspicions`` | counter (suspicions this member raised) | cluster, member |
| ``raygroups_messages_sent`` / ``_received`` / ``_retransmitted`` | counters | cluster, member |
| ``raygroups_bytes_sent`` / ``_received`` | counters | cluster, member |
| ``raygroups_dropped_packets`` | counter | cluster, member, reason |

Counters are fed the increase since the last reading; a rejoin (a fresh channel whose counts
restart at zero) starts a new baseline. ``figures(stats)`` and ``dropped(stats)`` are the
pure functions behind it (also used by the status page).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Optional

log = logging.getLogger("raygroups.metrics")

COUNTERS = {
    "views_installed": "Views installed by this member",
    "suspicions": "Suspicions this member raised (SWIM)",
    "messages_sent": "Messages sent (transport)",
    "messages_received": "Messages received (transport)",
    "messages_retransmitted": "Messages retransmitted (NAKACK and UNICAST)",
    "bytes_sent": "Bytes sent (transport)",
    "bytes_received": "Bytes received (transport)",
}


def figures(stats: dict) -> dict:
    """The counters above (without ``members`` and ``dropped``) from ``channel.stats()``."""
    def get(layer: str, key: str) -> int:
        return int((stats.get(layer) or {}).get(key, 0))
    views = get("gms", "views_installed") or get("member", "views_installed")
    return {
        "views_installed": views,
        "suspicions": get("swim", "suspicions"),
        "messages_sent": get("transport", "sent_msgs"),
        "messages_received": get("transport", "recv_msgs"),
        "messages_retransmitted": get("nakack", "retransmitted") + get("unicast", "retransmitted"),
        "bytes_sent": get("transport", "sent_bytes"),
        "bytes_received": get("transport", "recv_bytes"),
    }


def dropped(stats: dict) -> dict:
    """{reason: count} of every dropped packet or message any layer or the runtime counted:
    keys ``dropped_<reason>`` (reason as is) and ``malformed*`` (``<layer>_malformed``)."""
    out: dict = {}
    for layer, counts in stats.items():
        if not isinstance(counts, dict):
            continue
        for key, n in counts.items():
            if key.startswith("dropped_"):
                reason = key[len("dropped_"):]
            elif key.startswith("malformed"):
                reason = f"{layer}_{key}"
            else:
                continue
            if n:
                out[reason] = out.get(reason, 0) + int(n)
    return out


class MetricsExporter:
    """Records ``figures``/``dropped``/members of one member into Ray's metrics."""

    def __init__(self, cluster: str, member: str, interval_s: float = 5.0):
        from ray.util import metrics as m
        self.interval_s = interval_s
        self.tags = {"cluster": cluster, "member": member}
        keys = ("cluster", "member")
        self.counters = {k: m.Counter(f"raygroups_{k}", description=d, tag_keys=keys)
                         for k, d in COUNTERS.items()}
        self.members = m.Gauge("raygroups_members", description="Members of the current view",
                               tag_keys=keys)
        self.dropped = m.Counter("raygroups_dropped_packets",
                                 description="Packets and messages dropped, by reason",
                                 tag_keys=keys + ("reason",))
        self.last: dict = {}
        self.last_dropped: dict = {}
        self.exports = 0

    def reset(self) -> None:
        """A new channel: its counts start again at zero."""
        self.last, self.last_dropped = {}, {}

    def export(self, stats: dict, members: int) -> None:
        now = figures(stats)
        for k, v in now.items():
            delta = v - self.last.get(k, 0)
            if delta > 0:
                self.counters[k].inc(delta, tags=self.tags)
        self.last = now
        d = dropped(stats)
        for reason, v in d.items():
            delta = v - self.last_dropped.get(reason, 0)
            if delta > 0:
                self.dropped.inc(delta, tags={**self.tags, "reason": reason})
        self.last_dropped = d
        self.members.set(members, tags=self.tags)
        self.exports += 1

    async def run(self, read: Callable[[], Optional[tuple]]) -> None:
        """Every ``interval_s``: ``read()`` -> (stats, members) or None (no channel)."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                got = read()
                if got is not None:
                    self.export(*got)
            except Exception:  # metrics never take a member down
                log.exception("metrics export failed")
