"""STATE_TRANSFER: a joiner receives the application state from the coordinator as part
of joining (JGroups STATE_TRANSFER), so a service built on total order can bring a new
member up to date.

The application registers ``get_state() -> bytes`` and ``set_state(bytes)``. When the
coordinator delivers a view with joiners, it calls ``get_state()`` at that point of the
delivery order (after every message of the previous view: FLUSH guarantees the joiner's
digest starts exactly there) and unicasts the state to each joiner; large states go through
FRAG below. A joiner holds back every delivery until the state arrived and ``set_state``
ran, so it never applies a message twice or misses one.

The recovery status (MySQL Group Replication's node_status, exchanged by PRIMARY below): in
the state exchange of the view it joins, a joiner that will wait for the state announces
RECOVERING and the coordinator that sends it DONOR (``CollectExchange.status``); once
``set_state`` ran, the joiner announces ONLINE, and the donor does once none of its joiners
is RECOVERING any more (by the ordered announcements it delivers, or a view without them).
The recovery fails when no state came within ``timeout_s``, or when a view without the
donor comes first (it crashed or left: no other member can give the state at the point the
joiner's deliveries start): deliveries resume after a StateTransferFailed event, the member
announces ERROR and leaves, its Left naming the reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from .events import CollectExchange, Leave, MemberStatuses, StatusAnnounced
from .layer import Layer
from .message import INTERNAL, Message
from .primary import DONOR, ERROR, ONLINE, RECOVERING, SetStatus
from .view import MergeView, ViewChange

STATE_RSP = 0


@dataclass
class StateTransferConfig:
    timeout_s: float = 30.0
    """How long a joiner waits for the state before its recovery fails (ERROR, it leaves)."""
    max_held: int = 100_000
    """Deliveries a joiner holds while waiting; beyond it they are dropped and counted."""


@dataclass
class StateTransferFailed:
    """Delivered to the application when the joining state never came (the member then
    leaves)."""
    reason: str


class StateTransfer(Layer):
    name = "state_transfer"
    header_id = 13

    def __init__(self, config: StateTransferConfig):
        super().__init__(config)
        self.get_state: Optional[Callable[[], bytes]] = None
        self.set_state: Optional[Callable[[bytes], None]] = None
        self.waiting: Optional[list] = None  # held deliveries while we wait for state
        self.held = 0                         # messages among them
        self.timer = None
        self.serving: set = set()             # donor: joiners sent the state, still recovering
        self.statuses: tuple = (None, {})     # the last exchange's (view id, statuses)

    def handlers(self, get_state: Callable[[], bytes], set_state: Callable[[bytes], None]) -> None:
        self.get_state, self.set_state = get_state, set_state

    def up_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is CollectExchange:  # a query, answered now (even while we wait)
            if ev.change is not None:
                ev.status = self._status_in(ev.change)
            return self.above.up_event(ev)
        if t is MemberStatuses:
            self.statuses = (ev.view_id, ev.statuses)
        elif t is StatusAnnounced and ev.member in self.serving and ev.status != RECOVERING:
            self.serving.discard(ev.member)
            if not self.serving:
                self.below.down_event(SetStatus(ONLINE))  # our last joiner is done
        if t is not ViewChange:
            return self._pass_event(ev)
        view = ev.view
        if self.waiting is not None:
            self.waiting.append(ev)
            donor = self.waiting[0].view.coordinator
            if donor not in view:
                self._fail(f"the donor {donor} left before the state came")
            return None
        if self._waits(ev):
            self.waiting = [ev]  # we joined an existing group: wait for its state
            self.timer = self.ctx.schedule(self.config.timeout_s, self._timeout)
            return None
        self.above.up_event(ev)
        joiners = self._joiners(ev)
        if joiners:
            state = self.get_state()
            for j in joiners:
                self.below.down(Message(j, state, INTERNAL, {13: [STATE_RSP]}))
            self.stats["states_sent"] += len(joiners)
        self.serving = {j for j in (*self.serving, *joiners) if j in view}
        vid, statuses = self.statuses
        if vid == [view.view_id.coord.uid, view.view_id.id]:  # this view's exchange
            self.serving = {j for j in self.serving if statuses.get(j) == RECOVERING}
        self.below.down_event(SetStatus(DONOR if self.serving else ONLINE))
        return None

    def _waits(self, change: ViewChange) -> bool:
        """We joined an existing group and take its state."""
        return change.previous is None and len(change.view) > 1 and self.set_state is not None

    def _joiners(self, change: ViewChange) -> list:
        """The members we send the state to at this view: we coordinate it and they are new."""
        view, prev, local = change.view, change.previous, self.ctx.local
        if view.coordinator != local or prev is None or self.get_state is None or \
                isinstance(view, MergeView):
            return []
        return [m for m in view.members if m not in prev and m != local]

    def _status_in(self, change: ViewChange) -> str:
        """Our recovery status in the view being agreed on (as ``up_event`` will act on it)."""
        view = change.view
        if self.waiting is not None:
            return RECOVERING if self.waiting[0].view.coordinator in view else ERROR
        if self._waits(change):
            return RECOVERING
        if self._joiners(change) or any(j in view for j in self.serving):
            return DONOR
        return ONLINE

    def _pass_event(self, ev: Any) -> Any:
        if self.waiting is not None:
            self.waiting.append(ev)
            return None
        return self.above.up_event(ev)

    def up(self, batch: list) -> None:
        out = []
        for m in batch:
            h = m.headers.get(13)
            if h is None:
                out.append(m)
            elif type(h) is not list or h[:1] != [STATE_RSP]:
                self.malformed()
            elif self.waiting is None or m.sender != self.waiting[0].view.coordinator:
                self.stats["unexpected_states"] += 1  # only our coordinator's, only once
            else:
                self.stats["states_received"] += 1
                self.set_state(m.payload)
                self._release()
                self.below.down_event(SetStatus(ONLINE))
        if not out:
            return
        if self.waiting is None:
            self.above.up(out)
        elif self.held + len(out) <= self.config.max_held:
            self.held += len(out)
            self.waiting.append(out)
        else:
            self.stats["dropped_held"] += len(out)

    def _release(self) -> None:
        held, self.waiting, self.held = self.waiting or [], None, 0
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for item in held:
            if type(item) is list:
                self.above.up(item)
            else:
                self.above.up_event(item)

    def _timeout(self) -> None:
        self.timer = None
        if self.waiting is not None:
            self.stats["state_timeouts"] += 1
            self._fail(f"no state from the donor {self.waiting[0].view.coordinator} within "
                       f"{self.config.timeout_s:g} s")

    def _fail(self, reason: str) -> None:
        """The recovery failed: what was held goes up after StateTransferFailed, and the
        member announces ERROR and leaves."""
        self.stats["recoveries_failed"] += 1
        self.waiting.insert(1, StateTransferFailed(reason))
        self._release()
        self.below.down_event(SetStatus(ERROR))
        self.below.down_event(Leave(f"recovery failed: {reason}"))
