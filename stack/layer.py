"""The sans-IO layer contract.

A layer never touches a socket, thread, clock or the global ``random``: it gets a
``Context`` (``now``, ``schedule``, a seeded ``rng``, the local address) and its neighbours.
Messages going down come from the application, messages going up come from the network in
batches. A layer consumes only messages that carry its own header and passes the rest.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, ClassVar, Optional, Protocol

from .address import Address, AddressBook
from .events import CollectExchange, ExchangeResult
from .message import INTERNAL
from .rng import Rng

MCAST = "mcast"  # physical destination meaning "the multicast group"
# What parsing a header from the wire may raise; layers catch these, count, and drop.
MALFORMED = (TypeError, ValueError, IndexError, KeyError, OverflowError, AttributeError)


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Host(Protocol):
    """What a runtime (real sockets) or the simulator provides to a stack.

    ``now``: a monotonic clock for timers and ages; ``wall``: the wall clock (seconds since
    the epoch), the only clock whose readings mean the same on other hosts (SWIM stamps
    rumors with it).

    Optional: ``store``, the ``StoreClient`` (stack/discovery/store.py) that store discovery
    calls; the asyncio Runtime and SimMember have one, other hosts may leave it out."""

    local_phys: Any

    def now(self) -> float: ...
    def wall(self) -> float: ...
    def call_later(self, delay: float, fn: Callable[[], None]) -> Cancellable: ...
    def emit(self, dest: Any, data: bytes) -> None: ...
    def deliver(self, item: Any) -> None: ...
    def deliver_messages(self, batch: list) -> None: ...


class Context:
    __slots__ = ("host", "local", "cluster", "rng", "book", "running", "log")

    def __init__(self, host: Host, local: Address, cluster: str, rng: Rng,
                 log: Callable[[str], None]):
        self.host = host
        self.local = local
        self.cluster = cluster
        self.rng = rng
        self.book = AddressBook()
        self.book.add(local)
        self.running = True
        self.log = log

    def now(self) -> float:
        return self.host.now()

    def wall(self) -> float:
        return self.host.wall()

    def schedule(self, delay: float, fn: Callable[[], None]) -> Cancellable:
        def fire() -> None:
            if self.running:
                fn()
        return self.host.call_later(delay, fire)

    def every(self, interval: float, fn: Callable[[], None], jitter: float = 0.1) -> None:
        """Run ``fn`` every ``interval`` seconds (+- jitter share) while the stack runs."""
        def tick() -> None:
            fn()
            self.schedule(interval * (1 + self.rng.uniform(-jitter, jitter)), tick)
        self.schedule(interval * self.rng.uniform(0.5, 1.0), tick)


class Layer:
    name: ClassVar[str] = "layer"
    header_id: ClassVar[int] = 0  # 0: this layer adds no header

    above: "Layer"
    below: "Layer"
    ctx: Context

    def __init__(self, config: Any = None):
        self.config = config
        self.stats: Counter = Counter()

    def init(self, ctx: Context) -> None:
        self.ctx = ctx

    def start(self) -> None:
        """Called bottom-first once the stack is wired."""

    def stop(self) -> None:
        """Called top-first when the stack closes."""

    def down(self, msg) -> None:
        self.below.down(msg)

    def up(self, batch: list) -> None:
        self.above.up(batch)

    def down_event(self, ev: Any) -> Any:
        return self.below.down_event(ev)

    def up_event(self, ev: Any) -> Any:
        return self.above.up_event(ev)

    def malformed(self, what: str = "malformed_header") -> None:
        self.stats[what] += 1

    def up_control(self, batch: list, handle: Callable[[Any, Any], None]) -> None:
        """For control layers: hand each message carrying this layer's header to
        ``handle(msg, header)`` (a malformed one is counted and dropped) and pass the others
        up as one batch."""
        hid, out = self.header_id, []
        for m in batch:
            if hid in m.headers:
                break
        else:  # nothing for this layer (the common case under load): pass the batch as is
            if batch:
                self.above.up(batch)
            return
        for m in batch:
            h = m.headers.get(hid)
            if h is None:
                out.append(m)
                continue
            try:
                handle(m, h)
            except MALFORMED:
                self.malformed()
        if out:
            self.above.up(out)


class Bottom(Layer):
    """Below the transport: events nobody handled end here."""
    name = "bottom"

    def down_event(self, ev: Any) -> Any:
        return None

    def down(self, msg) -> None:  # pragma: no cover - the transport never passes down
        raise RuntimeError("message fell off the bottom of the stack")


class Top(Layer):
    """Above the highest layer: hands messages and events to the host (the application)."""
    name = "top"

    def up(self, batch: list) -> None:
        batch = [m for m in batch if not m.flags & INTERNAL]  # stack traffic nobody claimed
        if batch:
            self.ctx.host.deliver_messages(batch)

    note: Callable[[Any], None] = staticmethod(lambda ev: None)
    exchange: Optional[tuple] = None  # Stack.exchange_handlers: (collect, result)

    def up_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is CollectExchange:  # a query, answered now: the application's part
            if self.exchange is not None:
                ev.data["app"] = self.exchange[0]()
            return ev.data
        if t is ExchangeResult:
            if self.exchange is not None:
                self.exchange[1](ev.view_id, {a: d.get("app") for a, d in ev.data.items()})
            return None
        self.note(ev)
        self.ctx.host.deliver(ev)
        return None
