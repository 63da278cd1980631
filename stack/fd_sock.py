"""FD_SOCK: crash detection by connection loss (JGroups' FD_SOCK design).

Each member keeps one TCP connection to its ring neighbour, the member after it in the
membership (views mode: the installed view's order; gossip mode: SWIM's member list, in
address order), so every member is watched by exactly one other. The kernel of a process
that dies, kill -9 included, closes its sockets at once: the watcher reads EOF or a reset
within a round trip, where SWIM's timers need a missed probe and a suspicion timeout.

A lost connection is a hint, never a verdict: a middlebox, a NAT or a restarted firewall
can reset a connection between two healthy members. So the watcher hands the loss to SWIM
(``ConnectionLost``), which suspects the member at once and verifies it the way it verifies
a missed probe: it pings it and asks ``indirect_probes`` others to ping it. Only when none
of them reaches it is it declared dead; if anyone does, the suspicion is refuted as usual
and nothing changes. A member that says goodbye before it closes (it is leaving: the
runtime writes a BYE on the connections its watchers opened) is not suspected, nor is one
that is no longer in the membership.

Not detected here: a hung process (SIGSTOP, a long GC pause) keeps its sockets open, and a
host that vanishes (power loss, a partition, a cable) sends no FIN or reset. SWIM's timers
find those.

Sans-IO: the layer never opens a socket. The host provides ``watch`` (optional, like
``store``): ``watch.open(phys, uid, on_up, on_lost)`` keeps one connection to the member
``uid`` listening at ``phys`` (the member's own physical address: the runtime listens for
watch connections on the same port number, TCP, so nothing needs advertising) and returns
a handle with ``close()``; ``on_up()`` once the member proved its uid, ``on_lost(reason)``
once, with reason "eof" or "reset" (an established connection closed), "left" (it closed
after a BYE), "refused" (nobody listens there, or another member does), "unreachable"
(the connect timed out or found no route). ``watch.leaving()`` writes the BYE to our own
watchers. A host without ``watch`` leaves the layer inert (counted as ``no_watch``).
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Optional

from .events import ConnectionLost, GetPhysical, Leave, MembersChanged, ViewInstalled
from .layer import Layer

_uid = attrgetter("uid")


@dataclass
class FdSockConfig:
    enabled: bool = True
    """Watch the ring neighbour's connection (on in the ``local`` and ``lan`` presets, off
    in ``wan``, where middleboxes reset idle connections and the links are too slow for it
    to win much over SWIM). A member with it off opens no watch connection and listens for
    none; a member watching it then sees "refused" once per pick, verified as a loss."""
    retry_s: float = 0.2
    """First delay before connecting again after a connection failed or was lost; doubles
    up to ``retry_max_s`` while connects keep failing, back to this once one succeeds."""
    retry_max_s: float = 5.0
    """Longest delay between connection attempts to the same neighbour."""


class FdSock(Layer):
    name = "fd_sock"

    def __init__(self, config: FdSockConfig):
        super().__init__(config)
        self.members: tuple = ()
        self.target = None       # the neighbour watched (or to be watched)
        self.handle = None       # the host's handle of the connection (connecting or up)
        self.up_now = False      # the connection is established
        self.gen = 0             # connection attempts: callbacks of older ones are ignored
        self.delay = config.retry_s
        self.refused = False     # a refusal seen since the last established connection
        self.timer = None        # the next connection attempt
        self.leaving = False
        self.watch: Any = None

    def start(self) -> None:
        self.watch = getattr(self.ctx.host, "watch", None)
        if self.watch is None:
            self.stats["no_watch"] = 1

    def stop(self) -> None:
        self._close()
        self.target = None

    # -- membership -----------------------------------------------------------------------
    def neighbour(self):
        """The member after us in the membership, cyclically (None: alone or not in it)."""
        m, uid = self.members, self.ctx.local.uid
        if len(m) < 2:
            return None
        # (members are distinct: where a view is in address order, as in gossip mode, a
        # bisection finds us; else one pass over the UUIDs in C, not Address.__eq__ per
        # member: views of 1,000 members, O(N) of them at each member, made it N^3)
        i = bisect_left(m, uid, key=_uid)
        if i == len(m) or m[i].uid != uid:
            try:
                i = list(map(_uid, m)).index(uid)
            except ValueError:
                return None
        return m[(i + 1) % len(m)]

    def _membership(self, members) -> None:
        self.members = tuple(members)
        want = None if self.leaving else self.neighbour()
        if want == self.target:
            return
        self._close()
        self.target, self.delay, self.refused = want, self.config.retry_s, False
        if want is not None:
            self.stats["picks"] += 1
            self._connect()

    # -- the connection -------------------------------------------------------------------
    def _close(self) -> None:
        self.gen += 1
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.up_now = False

    def _connect(self) -> None:
        self.timer = None
        if self.watch is None or self.target is None or not self.ctx.running:
            return
        phys = self.below.down_event(GetPhysical(self.target))
        if not phys:
            self.stats["no_address"] += 1
            self._retry()
            return
        self.gen += 1
        gen = self.gen
        self.stats["connects"] += 1
        self.handle = self.watch.open(tuple(phys), self.target.uid,
                                      lambda: self._up(gen), lambda r: self._lost(gen, r))

    def _retry(self) -> None:
        if self.timer is None and self.target is not None:
            self.timer = self.ctx.schedule(self.delay, self._connect)
            self.delay = min(self.delay * 2, self.config.retry_max_s)

    def _up(self, gen: int) -> None:
        if gen != self.gen:
            return
        self.up_now, self.refused, self.delay = True, False, self.config.retry_s
        self.stats["connected"] += 1

    def _lost(self, gen: int, reason: str) -> None:
        if gen != self.gen or not self.ctx.running:
            return
        self.handle, self.up_now = None, False
        target = self.target
        self.stats["lost_" + reason] += 1
        if target is None or self.leaving or target not in self.members:
            self.stats["not_suspected_gone"] += 1
        elif reason == "left":
            self.refused = True  # it is going: its closed port is no news either
        elif reason in ("eof", "reset") or (reason == "refused" and not self.refused):
            self.refused = self.refused or reason == "refused"
            self.stats["suspected"] += 1
            if not self.below.down_event(ConnectionLost(target, reason)):
                self.stats["not_verified"] += 1  # SWIM knew better (already dead, inactive)
        self._retry()

    # -- events ---------------------------------------------------------------------------
    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is ViewInstalled:
            self._membership(ev.view.members)
        elif t is Leave:
            if not self.leaving:
                self.leaving = True
                if self.watch is not None:
                    self.watch.leaving()  # BYE to our watchers: they do not suspect us
                self._membership(self.members)
        return self.below.down_event(ev)

    def up_event(self, ev: Any) -> Any:
        if type(ev) is MembersChanged:
            self._membership(ev.members)
        return self.above.up_event(ev)

    @property
    def watching(self) -> Optional[Any]:
        """The neighbour whose connection is established (None otherwise)."""
        return self.target if self.up_now else None
