"""Gossip membership mode (the gossip design, Serf-like): SWIM's own list is the membership.

Replaces GMS when ``membership="gossip"``. Each member's view is its own, eventually
consistent list (sorted by address; ``members[0]`` is the nominal coordinator) with a local
view counter, delivered as the same ViewChange events. Joining: discover any member and
subscribe through it; it is a member once that contact answered with its list (SWIM asks
again each probe interval until then); no answer within ``join_timeout_s``: discover again
and subscribe through a member found at random. Nobody found after ``found_after_rounds``
rounds: start alone.
Leaving: UNSUBSCRIBE until a member confirms, which spreads a REMOVE rumor (the gossip
design), so the
others drop the leaver at once rather than after failure detection; the Leave then goes on
down (store discovery deletes the leaver's members file). Multicasts in this mode are best
effort.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .events import Connect, FindMembers, Leave, MembersChanged, MembershipStatus, Subscribe, \
    ViewInstalled
from .layer import Layer
from .view import Left, View, ViewChange, ViewId


@dataclass
class GossipConfig:
    found_after_rounds: int = 2
    """Empty discovery rounds before starting a group alone."""
    join_timeout_s: float = 2.0
    """A joiner whose contact did not answer within this long (it may have died since
    discovery listed it) discovers again and subscribes through a member found at random."""


class GossipMembership(Layer):
    name = "gossip"

    def __init__(self, config: GossipConfig):
        super().__init__(config)
        self.view: Optional[View] = None
        self.counter = 0
        self.empty = 0
        self.tries = 0  # subscriptions sent
        self.state = "idle"

    def _on_found(self, found: list) -> None:
        if self.state != "joining":
            return
        joined = sorted(p.addr for p in found if p.joined)
        if joined:
            contact = self.ctx.rng.choice(joined) if self.tries else joined[0]
            self.tries += 1
            tries = self.tries
            self.below.down_event(Subscribe(contact))
            self.ctx.schedule(self.config.join_timeout_s, lambda: self._join_timeout(tries))
            return
        joining = [p.addr for p in found if not p.joined]
        if not found:
            self.empty += 1
        if (not found and self.empty >= self.config.found_after_rounds) or \
                (joining and all(self.ctx.local < a for a in joining)):
            self.below.down_event(Subscribe(None))  # start alone
        else:
            self.below.down_event(FindMembers(self._on_found))

    def _join_timeout(self, tries: int) -> None:
        if self.state == "joining" and tries == self.tries:
            self.stats["join_timeouts"] += 1
            self.below.down_event(FindMembers(self._on_found))

    def up_event(self, ev: Any) -> Any:
        if type(ev) is MembersChanged:
            if not ev.members:
                if self.state != "left":
                    self.state = "left"
                    return self.above.up_event(Left("left"))
                return None
            if self.state == "joining":
                self.state = "member"
            if self.view is not None and ev.members == self.view.members:
                return None
            self.counter += 1
            prev, self.view = self.view, View(ViewId(ev.members[0], self.counter),
                                              ev.members).with_member_set(ev.member_set)
            self.below.down_event(ViewInstalled(self.view, prev))
            return self.above.up_event(ViewChange(self.view, prev))
        return self.above.up_event(ev)

    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is Connect:
            if self.state == "idle":
                self.state = "joining"
                self.below.down_event(MembershipStatus(False, False))
                self.below.down_event(FindMembers(self._on_found))
            return None
        if t is Leave:
            if self.state == "member":
                self.state = "leaving"
                self.below.down_event(Subscribe(None))  # SWIM: UNSUBSCRIPTION -> REMOVE
            elif self.state != "left":
                self.state = "left"
                self.above.up_event(Left("left"))
            # the layers below learn it too, as under GMS (store discovery: a leaving
            # coordinator deletes its members file instead of leaving it to go stale)
            self.below.down_event(ev)
            return None
        return self.below.down_event(ev)
