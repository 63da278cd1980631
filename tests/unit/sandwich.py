"""A layer sandwich: real layer(s) between a recording ``Below`` and a recording ``Above``, on
a manual clock. No sockets, no asyncio, no wall clock.

    s = Sandwich(NakAck(NakAckConfig()))
    s.down(Message(None, b"x"))          # what the layer passed down: s.below.sent
    s.up(Message(None, b"y", sender=b))  # what it delivered: s.above.messages
    s.advance(0.05)                      # fire the timers due by then

The context is the real ``layer.Context`` over ``ManualHost`` (a virtual clock with a heap of
timers; records what a transport emits) with a seeded rng.
"""
from __future__ import annotations

import heapq
import random
from typing import Any

from raygroups.stack.address import Address
from raygroups.stack.layer import Context, Layer


class Timer:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualHost:
    def __init__(self, local_phys: Any = ("10.0.0.1", 7800)):
        self.local_phys, self.clock, self.heap, self.seq = local_phys, 0.0, [], 0
        self.wall_offset = 1_700_000_000.0
        self.emitted: list = []    # (dest, bytes) from a transport
        self.delivered: list = []  # what a Top would hand to the application

    def now(self) -> float:
        return self.clock

    def wall(self) -> float:
        """The wall clock: far from ``now`` (a layer that mixes the two clocks shows)."""
        return self.clock + self.wall_offset

    def call_later(self, delay: float, fn) -> Timer:
        t, self.seq = Timer(), self.seq + 1
        heapq.heappush(self.heap, (self.clock + max(delay, 0.0), self.seq, fn, t))
        return t

    def advance(self, seconds: float = 0.0) -> None:
        """Fire, in time order, every timer due within ``seconds`` (also new ones)."""
        end = self.clock + seconds
        while self.heap and self.heap[0][0] <= end:
            when, _, fn, t = heapq.heappop(self.heap)
            if not t.cancelled:
                self.clock = max(self.clock, when)
                fn()
        self.clock = max(self.clock, end)

    def emit(self, dest: Any, data: bytes) -> None:
        self.emitted.append((dest, data))

    def deliver(self, item: Any) -> None:
        self.delivered.append(item)

    def deliver_messages(self, batch: list) -> None:
        self.delivered.append(list(batch))


class Below(Layer):
    """Records what goes down; answers events from ``answers`` (type -> value or fn(ev))."""
    name = "below"

    def __init__(self, answers: dict | None = None):
        super().__init__()
        self.sent, self.events, self.answers = [], [], dict(answers or {})

    def down(self, msg) -> None:
        self.sent.append(msg)

    def down_event(self, ev: Any) -> Any:
        self.events.append(ev)
        a = self.answers.get(type(ev))
        return a(ev) if callable(a) else a

    def take(self) -> list:
        out, self.sent = self.sent, []
        return out

    def events_of(self, t: type) -> list:
        return [e for e in self.events if type(e) is t]


class Above(Layer):
    """Records the batches and events that come up; answers events from ``answers`` (type ->
    value or fn(ev)), like ``Below``."""
    name = "above"

    def __init__(self, answers: dict | None = None) -> None:
        super().__init__()
        self.batches, self.events, self.answers = [], [], dict(answers or {})

    def up(self, batch: list) -> None:
        self.batches.append(list(batch))

    def up_event(self, ev: Any) -> Any:
        self.events.append(ev)
        a = self.answers.get(type(ev))
        return a(ev) if callable(a) else a

    def take(self) -> list:
        """The messages delivered so far (and forget them)."""
        out, self.batches = self.messages, []
        return out

    @property
    def messages(self) -> list:
        return [m for b in self.batches for m in b]

    def events_of(self, t: type) -> list:
        return [e for e in self.events if type(e) is t]


class Sandwich:
    """``layers`` bottom-first (usually one), wired Below -> layers -> Above, and started."""

    def __init__(self, *layers: Layer, name: str = "me", seed: int = 0, cluster: str = "test",
                 answers: dict | None = None, start: bool = True):
        self.rng = random.Random(seed)
        self.host = ManualHost()
        self.local = Address.random(name, self.rng)
        self.log: list[str] = []
        self.ctx = Context(self.host, self.local, cluster, self.rng, self.log.append)
        self.below, self.above = Below(answers), Above()
        self.layers, self.layer = layers, layers[-1]
        chain = [self.below, *layers, self.above]
        for lower, upper in zip(chain, chain[1:]):
            lower.above, upper.below = upper, lower
        for layer in chain:
            layer.init(self.ctx)
        for layer in layers if start else ():
            layer.start()

    def addr(self, name: str) -> Address:
        """A new member address (seeded), interned in the context's address book."""
        return self.ctx.book.add(Address.random(name, self.rng))

    def down(self, msg) -> None:
        self.layer.down(msg)

    def up(self, *msgs) -> None:
        self.layers[0].up(list(msgs))

    def up_event(self, ev: Any) -> Any:
        """An event from below (e.g. GMS's ViewChange) into the lowest layer."""
        return self.layers[0].up_event(ev)

    def down_event(self, ev: Any) -> Any:
        return self.layer.down_event(ev)

    def advance(self, seconds: float = 0.0) -> None:
        self.host.advance(seconds)
