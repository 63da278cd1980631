"""STABLE: agree on what every member has delivered, then let NAKACK purge (the JGroups
design notes).

Each member multicasts its delivered digest every ``desired_avg_gossip_s`` (or after
``max_bytes`` delivered); in views larger than ``coord_only_above`` it sends it to the
coordinator only (JGroups' ``send_stable_msgs_to_coord_only``), which alone hears from
everyone and multicasts STABILITY: N messages per round instead of N^2. Receivers merge digests by minimum and strike the sender off a
heard-from list; a digest for another membership resets the round (no unilateral action).
When everyone has been heard from, one member (after a random stagger, cancelled by the
first STABILITY it hears) multicasts the agreed digest as STABILITY, and every member
passes it down to NAKACK.

A member whose digest is all stable (it equals the last STABILITY of its view, and nothing
was delivered since) gossips only every ``idle_gossip_rounds`` rounds: its digest is in
every round's minimum, so no round can agree on more than it until it delivers more, and
then it gossips at once. An idle group of N members thus sends almost no STABLE traffic
instead of N digests of N entries every round (O(N^2) work a round at the coordinator and
at every member applying STABILITY). The rare round completes the one a member that lost
the last STABILITY still waits for. A member that delivered nothing since its last gossip
resends that digest without asking NAKACK for it again.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Any, Optional

from .events import GetDigest, Stability, ViewInstalled
from .layer import Layer, MALFORMED
from .message import CONTROL, Message

GOSSIP, STABILITY = 0, 1
_INT = {int}


@dataclass
class StableConfig:
    desired_avg_gossip_s: float = 0.2
    """How often each member gossips its digest. Shorter frees send windows sooner, for a
    little more control traffic."""
    max_bytes: int = 2_000_000
    """Gossip early once this many payload bytes were delivered since the last gossip."""
    stability_delay_s: float = 0.005
    """Upper bound of the random stagger before sending STABILITY."""
    coord_only_above: int = 32
    """Views with more members than this send digests to the coordinator only (one unicast
    each, the coordinator multicasts STABILITY); smaller ones multicast them, so any member
    can complete a round (no single collector). 0: always to the coordinator."""
    idle_gossip_rounds: int = 10
    """A member whose digest is all stable gossips every this many rounds only (see the
    module docstring); 1: every round."""


class Stable(Layer):
    name = "stable"
    header_id = 4

    def __init__(self, config: StableConfig):
        super().__init__(config)
        self.members: tuple = ()
        self.vid: Optional[list] = None
        self.digest: Optional[list] = None
        self.heard: set = set()
        self.pending = None
        self.bytes = 0
        self.mine: Optional[list] = None    # our digest as last gossiped in this view
        self.agreed: Optional[list] = None  # the last STABILITY of this view
        self.fresh = True  # delivered something since ``mine`` (or a new view)
        self.idle = 0      # rounds skipped while all stable
        self.member = False  # we are in our view (not a leaver's last one)

    def start(self) -> None:
        self.ctx.every(self.config.desired_avg_gossip_s, self._gossip)

    def _gossip(self) -> None:
        if self.vid is None or not self.member:
            return
        self.bytes = 0
        if self.fresh or self.mine is None:
            d = self.below.down_event(GetDigest())
            self.mine = list(map(d.get, self.members, repeat(0)))  # (in C: O(N) a round)
            self.fresh = False
        elif self.mine == self.agreed:
            self.idle += 1
            if self.idle < self.config.idle_gossip_rounds:
                self.stats["gossips_idle"] += 1
                return
        self.idle = 0
        seqnos = self.mine
        self.stats["gossips_sent"] += 1
        dest = self.members[0] if len(self.members) > self.config.coord_only_above else None
        self.below.down(Message(dest, b"", CONTROL, {4: [GOSSIP, self.vid, seqnos]}))

    def up(self, batch: list) -> None:
        out = []
        for m in batch:
            h = m.headers.get(4)
            if h is None:
                out.append(m)
                self.fresh = True
                if type(m.payload) is bytes:
                    self.bytes += len(m.payload)
                continue
            try:
                typ, vid, seqnos = h
                if vid != self.vid or type(seqnos) is not list or len(seqnos) != len(self.members):
                    self.stats["other_membership"] += 1
                    self._reset()
                elif typ == GOSSIP:
                    self._on_gossip(m.sender, seqnos)
                elif typ == STABILITY:
                    self._on_stability(seqnos)
                else:
                    self.malformed()
            except MALFORMED:
                self.malformed()
        if self.bytes >= self.config.max_bytes:
            self._gossip()
        if out:
            self.above.up(out)

    def _on_gossip(self, sender, seqnos: list) -> None:
        if sender not in self.heard:
            return
        if not set(map(type, seqnos)) <= _INT:  # all ints (at C speed: O(N) per digest)
            raise TypeError
        self.digest = seqnos if self.digest is None else list(map(min, self.digest, seqnos))
        self.heard.discard(sender)
        if not self.heard and self.pending is None:
            delay = self.ctx.rng.uniform(0, self.config.stability_delay_s)
            self.pending = self.ctx.schedule(delay, self._send_stability)

    def _send_stability(self) -> None:
        self.pending = None
        if self.digest is not None and not self.heard:
            self.stats["stability_sent"] += 1
            self.below.down(Message(None, b"", CONTROL, {4: [STABILITY, self.vid, self.digest]}))

    def _on_stability(self, seqnos: list) -> None:
        if not set(map(type, seqnos)) <= _INT:  # all ints (at C speed: O(N) per digest)
            raise TypeError
        self.stats["stability_received"] += 1
        self.below.down_event(Stability(dict(zip(self.members, seqnos))))
        self.agreed = seqnos
        self._reset()

    def _reset(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None
        self.digest = None
        self.heard = set(self.members)

    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is ViewInstalled:
            v = ev.view
            self.members = v.members
            self.member = self.ctx.local in v.member_set
            self.vid = [v.view_id.coord.uid, v.view_id.id]
            self.mine = self.agreed = None
            self.fresh = True
            self._reset()
        return self.below.down_event(ev)
