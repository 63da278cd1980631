"""FAULTS: fault injection directly above the transport (JGroups DISCARD, DELAY, DUPL and
SHUFFLE in one layer, both directions).

Drops messages by probability or by peer (``drop_from``/``drop_to``/``isolate``, undone by
``heal``), delays them by a uniform random time (delayed messages may overtake others),
duplicates them, shuffles incoming batches and holds single messages back. Every random
choice comes from ``ctx.rng``, drawn only for faults that are configured, so a run replays
from its seed and the default config (no faults) changes nothing.

Multicasts: a multicast leaves as one message, so ``drop_to`` cannot remove single
receivers; it applies to unicasts only. Partition multicasts at the receivers with
``drop_from``: when both sides call ``drop_from`` for each other the cut is symmetric.

Loopback (a member's messages to itself) is never dropped: it does not cross a network, and
NAKACK never asks the sender itself to retransmit. Unicasts to self pass untouched, own
messages coming up pass untouched, and a multicast dropped on the way down is still
delivered locally (as JGroups DISCARD does). ``drop_from``, ``drop_to``, ``isolate`` and
``heal`` act at once, also on messages already delayed; the config's probabilities and
ranges are read per message, so changing them at runtime acts at once too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .events import EmitTo
from .layer import Layer
from .message import NO_LOOPBACK, Message


@dataclass
class FaultConfig:
    drop_up: float = 0.0
    """Probability (0..1) that a received message is dropped. Default 0. Each dropped
    message costs the reliability layers a retransmission round (``xmit_interval_s``)."""
    drop_down: float = 0.0
    """Probability (0..1) that a message (or discovery ping) going down is dropped; the local
    copy of a dropped multicast still arrives. Default 0."""
    delay_up_s: tuple = (0.0, 0.0)
    """(lo, hi) seconds: each received message is delivered after uniform(lo, hi). Default
    (0, 0): no delay. A wide range reorders as well as delays."""
    delay_down_s: tuple = (0.0, 0.0)
    """(lo, hi) seconds: each message going down is sent after uniform(lo, hi). Default
    (0, 0). Delays down also delay the sender's own loopback copy."""
    duplicate: float = 0.0
    """Probability (0..1) that a message is passed twice, in each direction. Default 0."""
    shuffle: float = 0.0
    """Probability (0..1) that a received batch is handed up in random order. Default 0.
    Only reorders within a batch, so it is cheap but mild."""
    hold_back: float = 0.0
    """Probability (0..1) that a message, in either direction, is held back by an extra
    uniform(0, hold_back_s), letting later ones overtake it. Default 0."""
    hold_back_s: float = 0.01
    """Largest extra delay (seconds) of a held-back message. Default 0.01: longer than one
    NAKACK tick at ``local`` timers turns reordering into spurious NAKs."""


class Faults(Layer):
    name = "faults"
    header_id = 0

    def __init__(self, config: FaultConfig):
        super().__init__(config)
        self.cut_from: set = set()
        self.cut_to: set = set()
        self.isolated = False

    # -- runtime control ----------------------------------------------------------------
    def drop_from(self, *addrs) -> None:
        """Drop every message received from these members (never loopback)."""
        self.cut_from.update(addrs)

    def drop_to(self, *addrs) -> None:
        """Drop every unicast sent to these members (multicasts: see the module doc)."""
        self.cut_to.update(addrs)

    def isolate(self) -> None:
        """Drop all traffic in and out, discovery included, except loopback to self."""
        self.isolated = True

    def heal(self) -> None:
        """Undo drop_from, drop_to and isolate (the probabilistic faults stay)."""
        self.cut_from.clear()
        self.cut_to.clear()
        self.isolated = False

    # -- down ---------------------------------------------------------------------------
    def down(self, msg: Message) -> None:
        if msg.dest == self.ctx.local:
            self.below.down(msg)
        else:
            self._down(msg, self.below.down, True)

    def down_event(self, ev: Any) -> Any:
        if type(ev) is EmitTo:
            phys = ev.phys
            self._down(ev.msg, lambda m: self.below.down_event(EmitTo(phys, m)), False)
            return None
        return self.below.down_event(ev)

    def _down(self, msg: Message, send: Callable, loop: bool) -> None:
        cfg = self.config
        if self._chance(cfg.drop_down):
            self._lost(msg, loop)
            return
        for m in self._copies(msg):
            delay = self._delay(cfg.delay_down_s)
            if delay:
                self.ctx.schedule(delay, lambda m=m: self._out(m, send, loop))
            else:
                self._out(m, send, loop)

    def _out(self, msg: Message, send: Callable, loop: bool) -> None:
        if self.isolated or msg.dest in self.cut_to:
            self._lost(msg, loop)
        else:
            send(msg)

    def _lost(self, msg: Message, loop: bool) -> None:
        self.stats["dropped_down"] += 1
        if loop and msg.dest is None and not msg.flags & NO_LOOPBACK:
            msg.sender = self.ctx.local  # what the transport's loopback would have delivered
            self.ctx.schedule(0, lambda: self.above.up([msg]))

    # -- up -----------------------------------------------------------------------------
    def up(self, batch: list) -> None:
        cfg, local = self.config, self.ctx.local
        own, out = [], []
        for msg in batch:
            if msg.sender == local:
                own.append(msg)
                continue
            if self._chance(cfg.drop_up):
                self.stats["dropped_up"] += 1
                continue
            for m in self._copies(msg):
                delay = self._delay(cfg.delay_up_s)
                if delay:
                    self.ctx.schedule(delay, lambda m=m: self._in([m]))
                else:
                    out.append(m)
        if len(out) > 1 and self._chance(cfg.shuffle):
            self.ctx.rng.shuffle(out)
            self.stats["reordered"] += 1
        if own:
            self.above.up(own)
        self._in(out)

    def _in(self, batch: list) -> None:
        if self.isolated or self.cut_from:
            cut = self.cut_from
            keep = [m for m in batch if not self.isolated and m.sender not in cut]
            self.stats["dropped_up"] += len(batch) - len(keep)
            batch = keep
        if batch:
            self.above.up(batch)

    # -- random choices -----------------------------------------------------------------
    def _chance(self, p: float) -> bool:
        return p > 0 and self.ctx.rng.random() < p

    def _copies(self, msg: Message) -> list:
        if not self._chance(self.config.duplicate):
            return [msg]
        self.stats["duplicated"] += 1
        return [msg, Message(msg.dest, msg.payload, msg.flags, dict(msg.headers), msg.sender)]

    def _delay(self, span: tuple) -> float:
        lo, hi = span
        delay = self.ctx.rng.uniform(lo, hi) if hi > 0 else 0.0
        if delay:
            self.stats["delayed"] += 1
        if self._chance(self.config.hold_back):
            self.stats["reordered"] += 1
            delay += self.ctx.rng.uniform(0, self.config.hold_back_s)
        return delay
