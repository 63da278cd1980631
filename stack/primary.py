"""PRIMARY: primary component through state exchange after every view (seed 002, MySQL
Group Replication WL#7332).

After each installed view every member multicasts a STATE message with its last primary
view-id, the members of that primary view, and its attributes (address, port, recovery
status). The view is held back from the application until the STATE of every member of the
view was delivered; then every member computes the same result: joiners are those whose
primary view-id is behind the maximum; the view is quorate when it holds a majority of the
last primary view's members (or, before any primary existed, a majority of
``expected_size``); the primary view-id becomes the maximum + 1 when quorate and 0
otherwise. A view change that interrupts the round restarts it (the awaited vector of the
seed). Application sends are refused outside a primary component: the stack stops being
writable, so channel sends wait (or fail at once with ``block_sends=False``). Every member
answers ``attributes()`` from the same STATE messages, so the answer is the same everywhere
(seed FR-1).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import NotPrimary
from .events import GetPhysical, Writable
from .layer import Layer
from .message import INTERNAL, Message
from .view import ViewChange

STATE = 0
_BYTES = {bytes}
ONLINE, IN_PROGRESS, OFFLINE, SERVING_DONOR = "ONLINE", "IN_PROGRESS", "OFFLINE", "SERVING_DONOR"


@dataclass
class PrimaryConfig:
    expected_size: int = 1
    """Members expected at the first formation: the first primary component needs a
    majority of them. 1 lets a lone founder be primary; set it to the cluster size to
    avoid a minority forming the first primary."""
    block_sends: bool = True
    """Outside a primary component a send waits (up to ``send_timeout_s``) for it to come
    back; False: it raises NotPrimary at once."""
    send_timeout_s: float = 30.0
    """How long a waiting send waits before raising NotPrimary."""
    max_held: int = 100_000
    """Deliveries held while a state exchange is in progress; beyond that they are dropped
    and counted (they arrive only from members that finished the round early)."""
    attributes: dict = field(default_factory=dict)
    """Extra attributes this member announces (merged with address, port, status)."""


class Primary(Layer):
    name = "primary"
    header_id = 9

    def __init__(self, config: PrimaryConfig):
        super().__init__(config)
        self.last_pid = 0
        self.last_members: list = []          # uids of the last primary view
        self.status = ONLINE
        self.round: Optional[dict] = None
        self.held: list = []
        self.primary: Optional[bool] = None
        self.attrs: dict = {}                 # member -> attributes of the last round

    # -- the state exchange ------------------------------------------------------------------
    def up_event(self, ev: Any) -> Any:
        if type(ev) is ViewChange:
            self._start_round(ev)
            return None
        return self.above.up_event(ev)

    def _start_round(self, change: ViewChange) -> None:
        if self.round is not None:
            # interrupted (seed 002: break the round, restart it for the new view); the
            # application still sees the interrupted view, as not primary, with what was
            # delivered in it, so virtual synchrony holds
            old, self.round = self.round, None
            self.stats["rounds_interrupted"] += 1
            self._deliver(old["change"], False, 0)
        view = change.view
        self._set_primary(False)
        vid = [view.view_id.coord.uid, view.view_id.id]
        self.round = {"vid": vid, "change": change, "awaited": set(view.members), "states": {}}
        self.stats["rounds"] += 1
        if self.ctx.local not in view:
            self._finish()  # a view without us (we left or were excluded): nothing to agree
            return
        phys = self.below.down_event(GetPhysical())
        attrs = {"address": phys[0] if phys else None, "port": phys[1] if phys else None,
                 "status": self.status, **self.config.attributes}
        extra = self.above.up_event(CollectExchange({}))  # layers above add their state
        self.below.down(Message(None, b"", INTERNAL,
                                {9: [STATE, vid, self.last_pid, self.last_members, attrs,
                                     extra or {}]}))

    def up(self, batch: list) -> None:
        out = []
        for m in batch:
            h = m.headers.get(9)
            if h is None:
                out.append(m)
                continue
            if out:
                self._pass(out)
                out = []
            try:
                typ, vid, pid, members, attrs, extra = h
                if typ != STATE or type(pid) is not int or type(attrs) is not dict \
                        or type(extra) is not dict or type(members) is not list \
                        or not set(map(type, members)) <= _BYTES:
                    raise ValueError("not a STATE")
                self._on_state(m.sender, vid, pid, list(members), attrs, extra)
            except (TypeError, ValueError):
                self.malformed()
        if out:
            self._pass(out)

    def _pass(self, msgs: list) -> None:
        if self.round is None:
            self.above.up(msgs)
        elif len(self.held) + len(msgs) <= self.config.max_held:
            self.held.extend(msgs)
        else:
            self.stats["dropped_held"] += len(msgs)

    def _on_state(self, sender, vid, pid: int, members: list, attrs: dict, extra: dict) -> None:
        r = self.round
        if r is None or vid != r["vid"] or sender not in r["awaited"]:
            self.stats["stale_states"] += 1
            return
        r["states"][sender] = (pid, members, attrs, extra)
        r["awaited"].discard(sender)
        if not r["awaited"]:
            self._finish()

    def _finish(self) -> None:
        r, self.round = self.round, None
        view = r["change"].view
        states = r["states"]
        quorate, pid = False, 0
        if states:
            top = max(states.values(), key=lambda s: s[0])
            max_pid, last = top[0], top[1]
            if max_pid == 0:
                quorate = 2 * len(view) > self.config.expected_size
            else:
                present = sum(1 for m in view.members if m.uid in set(last))
                quorate = 2 * present > len(last)
            # max + 1 (seed 002), but never below the view's own counter: a member whose
            # round for an earlier view was interrupted may not know that view became
            # primary elsewhere, and view counters only grow along a primary lineage
            pid = max(max_pid + 1, view.view_id.id) if quorate else 0
            self.attrs = {a: dict(s[2], primary_id=s[0], joiner=s[0] < max_pid)
                          for a, s in states.items()}
        if states:
            self.above.up_event(ExchangeResult({a: st[3] for a, st in states.items()}))
        if quorate:
            self.last_pid, self.last_members = pid, [m.uid for m in view.members]
            self.stats["primary_views"] += 1
        else:
            self.stats["non_primary_views"] += 1
        self._deliver(r["change"], quorate, pid)

    def _deliver(self, change: ViewChange, primary: bool, pid: int) -> None:
        """The view goes up with its verdict, then what arrived during its round."""
        view = dataclasses.replace(change.view, primary=primary, primary_id=pid)
        self._set_primary(primary)
        self.above.up_event(dataclasses.replace(change, view=view))
        held, self.held = self.held, []
        if held:
            self.above.up(held)

    def _set_primary(self, primary: bool) -> None:
        if primary != self.primary:
            self.primary = primary
            self.above.up_event(Writable("primary", primary))

    def down(self, msg: Message) -> None:
        if not self.primary and not msg.flags & INTERNAL:
            raise NotPrimary("not in a primary component")  # never dropped silently
        self.below.down(msg)

    # -- queries ----------------------------------------------------------------------------
    def down_event(self, ev: Any) -> Any:
        if type(ev) is MemberAttributes:
            return dict(self.attrs)
        if type(ev) is SetStatus:
            self.status = ev.status
            return None
        return self.below.down_event(ev)


@dataclass
class MemberAttributes:
    """PRIMARY answers every member's attributes from the last state exchange."""


@dataclass
class SetStatus:
    """Announce this recovery status in the next state exchange."""
    status: str


@dataclass
class CollectExchange:
    """Sent up at the start of a state exchange: layers above add what they need agreed
    (e.g. the sequencer's delivered counters) to ``data`` and answer it."""
    data: dict


@dataclass
class ExchangeResult:
    """Sent up when a state exchange completed: every member's ``data`` by member."""
    data: dict
