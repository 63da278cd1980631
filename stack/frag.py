"""FRAG: payloads larger than a datagram (JGroups FRAG2). The top layer of the stack.

A bytes-like payload larger than ``frag_size`` is cut into fragments, each a message of its
own with the header ``[frag_id, index, count]`` (``frag_id`` counts this member's fragmented
messages), sent down back to back. The fragments travel through NAKACK (multicast) or UNICAST
like any message, so they arrive in FIFO order per sender, exactly once, interleaved with
nothing else of that sender's stream. Receivers reassemble per (sender, frag_id) and deliver
one message, in the position of its last fragment.

Memory is bounded: the bytes under reassembly are capped per sender and in total; a fragment
that would pass a cap drops (and counts) the incomplete message it belongs to, and the rest
of that message's fragments are dropped as they come. An incomplete message that saw no
fragment for ``reassembly_timeout_s`` (lost best-effort fragments, or a sender that vanished)
is dropped too. A sender that left the view is not enough: its streams may go on (UNICAST
continues across views, NAKACK resumes a member's stream after a merge), so its incomplete
messages are kept until they complete or expire. ``max_message_size`` bounds what a send
accepts (``Stack.send`` raises MessageTooLarge above it).

Only bytes, bytearray and memoryview payloads are fragmented (others must fit one bundle).
Fragments share the payload's memory (memoryview slices of it) until the transport packs them.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional

from .errors import MessageTooLarge
from .events import AppBlocked, GetBundleRoom
from .layer import Layer, MALFORMED
from .message import Message

HEADER = 11
HEADER_ROOM = 1024  # bytes of a bundle left to the headers of every layer below FRAG
DEFAULT_ROOM = 60_000 - 64  # without a transport to ask (unit tests)
MIN_FRAG_SIZE = 256


@dataclass
class FragConfig:
    frag_size: Optional[int] = None
    """Payload bytes per fragment. None (default): what one bundle holds for a payload less
    1 KiB for headers (about 59 KB with the default 60,000-byte bundles), so a fragment
    travels alone in one datagram or frame. Smaller fragments interleave sooner with other
    senders' traffic; larger ones (TCP with a larger ``transport__max_bundle_size``) cost
    fewer per-message overheads. Capped at the bundle room."""
    max_message_size: int = 256 * 1024 * 1024
    """Largest payload a send accepts, in bytes; larger raises MessageTooLarge. Receivers
    need ``max_pending_per_sender`` at least this large to reassemble the largest message."""
    max_pending_per_sender: Optional[int] = None
    """Bytes of incomplete messages kept per sender (None: ``max_message_size``). A fragment
    that would exceed it drops the incomplete message it belongs to (counted as
    ``dropped_over_limit``)."""
    max_pending_total: int = 512 * 1024 * 1024
    """Bytes of incomplete messages kept for all senders together; beyond, as above. Bounds
    reassembly memory when many members send large messages at once."""
    reassembly_timeout_s: float = 60.0
    """An incomplete message that received no fragment for this long is dropped (counted as
    ``dropped_expired``). Reliable fragments arrive back to back, so this only clears lost
    best-effort fragments (gossip mode) and the messages of a sender that crashed or left
    for good; the clock stops while the application is blocked (flow control holds the
    fragments then). Longer than a merge takes: a stream may resume after one."""
    max_fragments: int = 1 << 20
    """Most fragments one message may claim (a sanity bound on the header)."""


class _Entry:
    __slots__ = ("count", "parts", "size", "last", "sender")

    def __init__(self, count: int, now: float, sender):
        self.count = count
        self.parts: dict[int, Any] = {}
        self.size = 0
        self.last = now
        self.sender = sender


class Frag(Layer):
    name = "frag"
    header_id = HEADER

    def __init__(self, config: Optional[FragConfig] = None):
        super().__init__(config or FragConfig())
        c = self.config
        self.frag_size = c.frag_size or DEFAULT_ROOM - HEADER_ROOM
        self.per_sender_cap = c.max_pending_per_sender or c.max_message_size
        self.next_id = 0
        self.pending: dict[tuple, _Entry] = {}
        self.by_sender: dict[Any, int] = {}       # sender -> bytes under reassembly
        self.total = 0
        self.discarded: OrderedDict = OrderedDict()  # (sender, frag_id) dropped, bounded
        self.app_blocked = False

    @property
    def max_message_size(self) -> int:
        """What ``Stack.send`` accepts with this layer on top."""
        return self.config.max_message_size

    def start(self) -> None:
        room = self.below.down_event(GetBundleRoom())
        cap = (room if isinstance(room, int) else DEFAULT_ROOM) - HEADER_ROOM
        size = self.config.frag_size or cap
        self.frag_size = max(MIN_FRAG_SIZE, min(size, cap))
        t = self.config.reassembly_timeout_s
        if t and t > 0:
            self.ctx.every(max(t / 4, 0.01), self._expire, jitter=0.0)

    # -- down ---------------------------------------------------------------------------
    def down(self, msg: Message) -> None:
        p = msg.payload
        t = type(p)
        if (t is bytes or t is bytearray or t is memoryview) and len(p) > self.frag_size:
            self._fragment(msg, p)
        else:
            self.below.down(msg)

    def _fragment(self, msg: Message, p) -> None:
        if type(p) is not bytes:
            p = bytes(p)  # a snapshot: the application may reuse its buffer
        n = len(p)
        if n > self.config.max_message_size:
            raise MessageTooLarge(f"payload of {n} bytes; at most "
                                  f"{self.config.max_message_size} (frag max_message_size)")
        fs = self.frag_size
        count = -(-n // fs)
        fid = self.next_id
        self.next_id += 1
        view = memoryview(p)
        dest, flags, headers, below = msg.dest, msg.flags, msg.headers, self.below
        self.stats["fragmented"] += 1
        self.stats["fragments_sent"] += count
        for i in range(count):
            h = dict(headers)
            h[HEADER] = [fid, i, count]
            below.down(Message(dest, view[i * fs:(i + 1) * fs], flags, h))

    # -- up -----------------------------------------------------------------------------
    def up(self, batch: list) -> None:
        for m in batch:
            if HEADER in m.headers:
                break
        else:
            self.above.up(batch)  # no fragment in it (the common case): pass it as it is
            return
        out = []
        for m in batch:
            h = m.headers.get(HEADER)
            if h is None:
                out.append(m)
                continue
            try:
                whole = self._add(m, h)
            except MALFORMED:
                self.malformed()
                continue
            if whole is not None:
                out.append(whole)
        if out:
            self.above.up(out)

    def _add(self, m: Message, h) -> Optional[Message]:
        fid, idx, count = h
        if type(fid) is not int or type(idx) is not int or type(count) is not int:
            raise TypeError("fragment header")
        if not 0 <= idx < count <= self.config.max_fragments:
            raise ValueError("fragment index")
        p = m.payload
        t = type(p)
        if t is not bytes and t is not memoryview and t is not bytearray:
            raise TypeError("fragment payload")
        st = self.stats
        sender = m.sender
        key = (sender, fid)
        e = self.pending.get(key)
        if e is None:
            if key in self.discarded:
                st["dropped_fragments"] += 1
                return None
            if count == 1:  # never produced by a sender, but harmless
                return Message(m.dest, bytes(p), m.flags, _strip(m.headers), sender)
            e = self.pending[key] = _Entry(count, self.ctx.now(), sender)
        elif e.count != count:
            self._discard(key, e, "dropped_inconsistent")
            raise ValueError("fragment count changed")
        if idx in e.parts:
            st["duplicate_fragments"] += 1
            return None
        size = len(p)
        mine = self.by_sender.get(sender, 0) + size
        if mine > self.per_sender_cap or self.total + size > self.config.max_pending_total:
            self._discard(key, e, "dropped_over_limit")
            return None
        e.parts[idx] = p
        e.size += size
        e.last = self.ctx.now()
        self.by_sender[sender] = mine
        self.total += size
        if len(e.parts) < count:
            return None
        self._forget(key, e)
        parts = e.parts
        payload = b"".join([parts[i] for i in range(count)])
        st["reassembled"] += 1
        return Message(m.dest, payload, m.flags, _strip(m.headers), sender)

    def _forget(self, key: tuple, e: _Entry) -> None:
        del self.pending[key]
        self.total -= e.size
        left = self.by_sender.get(e.sender, 0) - e.size
        if left > 0:
            self.by_sender[e.sender] = left
        else:
            self.by_sender.pop(e.sender, None)

    def _discard(self, key: tuple, e: _Entry, why: str) -> None:
        """Drop an incomplete message (and the fragments of it still to come)."""
        self._forget(key, e)
        self.stats[why] += 1
        self.discarded[key] = True
        while len(self.discarded) > 4096:
            self.discarded.popitem(last=False)

    def _expire(self) -> None:
        if self.app_blocked or not self.pending:
            return
        limit = self.ctx.now() - self.config.reassembly_timeout_s
        for key, e in list(self.pending.items()):
            if e.last < limit:
                self._discard(key, e, "dropped_expired")

    # -- events -------------------------------------------------------------------------
    def down_event(self, ev: Any) -> Any:
        if type(ev) is AppBlocked:
            if self.app_blocked and not ev.blocked:
                now = self.ctx.now()  # the clock of incomplete messages restarts
                for e in self.pending.values():
                    e.last = now
            self.app_blocked = ev.blocked
        return self.below.down_event(ev)

    @property
    def pending_bytes(self) -> int:
        return self.total


def _strip(headers: dict) -> dict:
    return {k: v for k, v in headers.items() if k != HEADER}
