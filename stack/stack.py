"""A Stack: protocol layers composed bottom-first between a transport and the application.

The host (``runtime.Runtime`` over real sockets, or ``sim.Simulation``) feeds it packets with
``receive`` and timers through the context; the stack hands packets back with
``host.emit`` and deliveries with ``host.deliver``/``host.deliver_messages``.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from .address import Address
from .errors import MessageTooLarge
from .events import AppBlocked, Connect, Leave, Writable
from .layer import Bottom, Context, Host, Layer, Top
from .message import Message
from .rng import Rng
from .view import ViewChange

log = logging.getLogger("raygroups.stack")
HEADER_ROOM = 512  # bytes kept free in a bundle for the headers of every layer


class Stack:
    def __init__(self, cluster: str, name: str, layers: list[Layer], host: Host,
                 rng: Rng, uid: Optional[bytes] = None):
        self.local = Address(uid, name) if uid is not None else Address.random(name, rng)
        self.cluster = cluster
        self.layers = layers
        self.transport = layers[0]
        self.ctx = Context(host, self.local, cluster, rng, self._log)
        self.bottom, self.top = Bottom(), Top()
        chain = [self.bottom, *layers, self.top]
        for lower, upper in zip(chain, chain[1:]):
            lower.above, upper.below = upper, lower
        for layer in chain:
            layer.init(self.ctx)
        # pass-through shortcuts: a layer that does not override down() (up()) hands each
        # message straight to the next layer below (above) that does - one Python call less
        # per message and layer, same order and semantics
        for layer in layers:
            if type(layer).down is Layer.down:
                layer.down = layer.below.down
        for layer in reversed(layers):
            if type(layer).up is Layer.up:
                layer.up = layer.above.up
        self.top.note = self.note
        # a layer that sets its own payload limit (FRAG, the top layer) replaces the bundle's
        self.limit_layer = next((la for la in reversed(layers)
                                 if hasattr(la, "max_message_size")), None)
        self.blocked: set[str] = set()
        self.blocked_to: set = set()  # members unicasts to whom wait (flow control)
        self.view = None
        self.errors = 0

    def _log(self, text: str) -> None:
        view = self.view.view_id.id if self.view else 0
        log.info("[%s %s view=%s] %s", self.cluster, self.local, view, text)

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        for layer in self.layers:
            layer.start()

    def connect(self) -> None:
        self.top.below.down_event(Connect())

    def leave(self) -> None:
        self.top.below.down_event(Leave())

    def stop(self) -> None:
        """Stop all timers and layers at once (a crash, or the end of a graceful leave)."""
        if self.ctx.running:
            self.ctx.running = False
            for layer in reversed(self.layers):
                layer.stop()

    @property
    def running(self) -> bool:
        return self.ctx.running

    # -- traffic ------------------------------------------------------------------------
    def send(self, msg: Message) -> None:
        """Raises MessageTooLarge before any layer keeps the message for retransmission."""
        p = msg.payload
        if isinstance(p, (bytes, bytearray, memoryview)) and len(p) > self.max_payload:
            raise MessageTooLarge(f"payload of {len(p)} bytes; at most {self.max_payload} "
                                  f"fit one message")
        self.top.below.down(msg)

    @property
    def max_payload(self) -> int:
        """Largest payload one message can carry: the FRAG layer's ``max_message_size`` when
        the stack has one, else a bundle less room for headers."""
        if self.limit_layer is not None:
            return self.limit_layer.max_message_size
        return self.transport.max_message - HEADER_ROOM

    def set_app_blocked(self, blocked: bool) -> bool:
        """The application fell behind (True) or caught up (False) consuming deliveries.
        Flow control then holds deliveries and grants no credit, so senders block while
        control traffic goes on. Returns False when no layer handles it (no flow control)."""
        return bool(self.top.below.down_event(AppBlocked(blocked)))

    def receive(self, data: bytes, src: Any = None) -> None:
        """One packet from the network. Never raises: a layer bug is logged and counted."""
        if not self.ctx.running:
            return
        try:
            self.transport.receive(data, src)
        except Exception:
            self.errors += 1
            log.exception("[%s %s] error processing a packet (dropped)", self.cluster, self.local)

    @property
    def writable(self) -> bool:
        return not self.blocked

    def writable_to(self, dest: Any) -> bool:
        """Whether a send to ``dest`` (None: a multicast) goes without waiting."""
        return not self.blocked and (dest is None or dest not in self.blocked_to)

    def note(self, ev: Any) -> None:
        """Track what the stack tells the application (views, back-pressure)."""
        t = type(ev)
        if t is ViewChange:
            self.view = ev.view
        elif t is Writable:
            if ev.dest is not None:
                if ev.writable:
                    self.blocked_to.discard(ev.dest)
                else:
                    self.blocked_to.add(ev.dest)
            elif ev.writable:
                self.blocked.discard(ev.layer)
            else:
                self.blocked.add(ev.layer)

    def exchange_handlers(self, collect: Callable[[], Any],
                          result: Callable[[list, dict], None]) -> None:
        """The application's part of the primary component's state exchange, run after
        every view (stack/primary.py): ``collect()`` answers what this member announces (at
        the start of the round, once every delivery of the previous view went up);
        ``result(view_id, {member: announced})`` gets every member's announcement when the
        round completed, just before the view is delivered. The work queue decides its
        epochs this way, in the same round as the primary component."""
        self.top.exchange = (collect, result)

    def member_attributes(self) -> dict:
        """{member: attributes} from the primary layer's last state exchange."""
        from .primary import MemberAttributes
        return self.top.below.down_event(MemberAttributes()) or {}

    @property
    def wire_version(self) -> int:
        """The wire format this member sends its view's traffic in (``View.wire_version`` of
        the last view installed; 1 before the first, and always in gossip mode)."""
        return self.transport.version

    def stats(self) -> dict:
        out = {layer.name: dict(layer.stats) for layer in self.layers}
        out["stack"] = {"errors": self.errors, "wire_version": self.wire_version}
        return out
