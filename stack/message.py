"""The unit that travels through the stack: destination, sender, flags, per-layer headers,
payload. Layers add their header on the way down and consume it on the way up."""
from __future__ import annotations

from typing import Any, Optional

from .address import Address

# Flags (a bit set carried on the wire).
NO_RELIABILITY = 1   # skip NAKACK/UNICAST: best effort (discovery, gossip, acks)
OOB = 2              # deliver without waiting for order (control traffic)
NO_LOOPBACK = 4      # a multicast that is not delivered to the sender itself
INTERNAL = 8         # stack traffic, never handed to the application
ORDERED = 16         # total order (SEQUENCER) requested by the application

CONTROL = NO_RELIABILITY | OOB | INTERNAL


class Message:
    __slots__ = ("dest", "sender", "flags", "headers", "payload")

    def __init__(self, dest: Optional[Address] = None, payload: Any = b"", flags: int = 0,
                 headers: Optional[dict] = None, sender: Optional[Address] = None):
        self.dest = dest
        self.sender = sender
        self.flags = flags
        self.headers = {} if headers is None else headers
        self.payload = payload

    def __repr__(self) -> str:
        return (f"Message(sender={self.sender!r}, dest={self.dest!r}, flags={self.flags}, "
                f"headers={self.headers!r}, payload={self.payload!r:.60})")
