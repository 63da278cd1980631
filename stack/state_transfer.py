"""STATE_TRANSFER: a joiner receives the application state from the coordinator as part
of joining (JGroups STATE_TRANSFER), so a service built on total order can bring a new
member up to date.

The application registers ``get_state() -> bytes`` and ``set_state(bytes)``. When the
coordinator delivers a view with joiners, it calls ``get_state()`` at that point of the
delivery order (after every message of the previous view: FLUSH guarantees the joiner's
digest starts exactly there) and unicasts the state to each joiner; large states go through
FRAG below. A joiner holds back every delivery until the state arrived and ``set_state``
ran, so it never applies a message twice or misses one. No state within ``timeout_s``
(the coordinator crashed): deliveries resume and a StateTransferFailed event goes up.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from .events import CollectExchange
from .layer import Layer
from .message import INTERNAL, Message
from .view import MergeView, ViewChange

STATE_RSP = 0


@dataclass
class StateTransferConfig:
    timeout_s: float = 30.0
    """How long a joiner waits for the state before going on without it."""
    max_held: int = 100_000
    """Deliveries a joiner holds while waiting; beyond it they are dropped and counted."""


@dataclass
class StateTransferFailed:
    """Delivered to the application when the joining state never came."""
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

    def handlers(self, get_state: Callable[[], bytes], set_state: Callable[[bytes], None]) -> None:
        self.get_state, self.set_state = get_state, set_state

    def up_event(self, ev: Any) -> Any:
        if type(ev) is not ViewChange:
            return self._pass_event(ev)
        view, prev, local = ev.view, ev.previous, self.ctx.local
        if self.waiting is not None:
            self.waiting.append(ev)
            return None
        if prev is None and len(view) > 1 and self.set_state is not None:
            self.waiting = [ev]  # we joined an existing group: wait for its state
            self.timer = self.ctx.schedule(self.config.timeout_s, self._timeout)
            return None
        self.above.up_event(ev)
        if (view.coordinator == local and prev is not None and self.get_state is not None
                and not isinstance(view, MergeView)):
            joiners = [m for m in view.members if m not in prev and m != local]
            if joiners:
                state = self.get_state()
                for j in joiners:
                    self.below.down(Message(j, state, INTERNAL, {13: [STATE_RSP]}))
                self.stats["states_sent"] += len(joiners)
        return None

    def _pass_event(self, ev: Any) -> Any:
        if self.waiting is not None and type(ev) is not CollectExchange:  # a query: answered now
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
            self.waiting.insert(1, StateTransferFailed("no state from the coordinator"))
            self._release()
