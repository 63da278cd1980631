"""Wire encoding of the work queue's messages: a 3-byte magic, then msgpack.

Ordered (total order) messages: ``[BATCH, epoch, [[cseq, op, *args], ...]]`` (many queue
commands in one multicast); a member's position for reconciliation travels in the primary
component's state exchange instead (``Replica.exchange_data``). Unordered: ``[APPLIED, epoch, applied]`` (what a
member applied, for majority completion), ``[SNAP, view_key, state]`` (the whole state for
a stale member of an older build) and the streamed update's ``UPDATE`` and ``UPDATE_ACK``
(stack/workqueue/update.py). Decoding is bounded and validated by the caller: anything malformed is
counted and dropped, identically at every member for ordered messages.
"""
from __future__ import annotations

from typing import Any

import msgpack

MAGIC = b"\xa7WQ"
BATCH, APPLIED, SNAP = 0, 2, 3  # 1 was a reconciliation round's HELLO
UPDATE, UPDATE_ACK = 4, 5  # a streamed update's chunk, and a stale member's ask/ack (update.py)
PROMISED = 6  # [PROMISED, view key, epoch]: a durable member's disk promised the epoch number

# commands (the Qpid design's names): create a queue, enqueue a published message, acquire,
# release, dequeue (accept), reject (to the alternate: "rejected"), and queue ownership
# (consume: interested, cancel: not interested, owner_release: pass ownership on)
CREATE, ENQUEUE, ACQUIRE, RELEASE, DEQUEUE, REJECT, CONSUME, CANCEL, OWNER_RELEASE = range(9)
# the lifecycle (queue level 2, gated: see state.LIFECYCLE_LEVEL): purge a queue's available
# messages, delete a queue, declare one with an overflow policy or a TTL, expire messages
# older than a queue's TTL (the epoch's first member sends it with its clock), and a
# member's announcement of the queue level it knows (once per epoch)
PURGE, DELETE, DECLARE, EXPIRE, LEVEL = range(9, 14)
OP_NAMES = ("create", "enqueue", "acquire", "release", "dequeue", "reject", "consume",
            "cancel", "owner_release", "purge", "delete", "declare", "expire", "level")

_packer_opts = dict(use_bin_type=True)
_unpack_opts = dict(raw=False, use_list=True, strict_map_key=False)


def encode(obj: Any) -> bytes:
    return MAGIC + msgpack.packb(obj, **_packer_opts)


def is_queue_payload(payload: Any) -> bool:
    return isinstance(payload, (bytes, bytearray, memoryview)) and \
        bytes(payload[:3]) == MAGIC


def decode(payload: Any) -> list:
    """Raises ValueError (or msgpack's errors, all ValueError subclasses) when malformed."""
    data = payload[3:] if isinstance(payload, bytes) else bytes(payload[3:])
    obj = msgpack.unpackb(data, **_unpack_opts)
    if type(obj) is not list or not obj or type(obj[0]) is not int:
        raise ValueError("not a work queue message")
    return obj


def packed_size(cmd: list) -> int:
    """Approximate wire size of one command (for batching): its bodies and names plus
    room for the numbers."""
    n = 8 * len(cmd)
    for a in cmd:
        t = type(a)
        if t is bytes or t is str:
            n += len(a)
    return n
