"""Transport fragmentation: one packed message larger than a bundle, cut into datagrams.

FRAG (``frag.py``) sits above GMS and cuts application payloads; the stack's own messages
below it - a VIEW or JOIN_RSP of a thousand members, a flush digest, a merge's views, the
primary component's state - are not cut there, and at about 750 members (60 KB bundles) or
a few dozen (a 1,500-byte MTU) they no longer fit one datagram. The transport therefore cuts
any packed message longer than a bundle into fragments, each a message of its own::

    [dest_uid|nil, flags, {FRAG_HEADER: [frag_id, index, count]}, chunk]

sent back to back to the same destination(s), and the receiver joins the chunks back into
the packed message and decodes it as if it had come in one bundle. This is IP
fragmentation, not FRAG: fragments travel below NAKACK and UNICAST, so they are not
retransmitted one by one. A lost fragment loses the whole message, which the reliability
layer above retransmits whole (re-cut under a new ``frag_id``), the way a lost datagram
would be; the incomplete copy expires. The cost is paid only by messages that need it: the
transport packs every message once anyway and compares its length with the bundle room.

Receive-side memory is bounded: bytes under reassembly per sender (``max_message_size``)
and in total (``max_pending_total``, oldest incomplete message evicted first), a fragment
count per message, and incomplete messages expire after ``timeout_s`` (checked as fragments
arrive, so it costs no timer); the last ``DONE_KEPT`` finished messages are remembered so
late duplicates start nothing. Everything malformed is counted and dropped, never raised.
"""
from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any, Optional

import msgpack

from . import wire

FRAG_HEADER = 15
WRAPPER = 64  # bytes of a fragment besides its chunk: dest uid, flags, header, bin prefix
MAX_FRAGMENTS = 1 << 16  # a sanity bound on a fragment header's count
DONE_KEPT = 1024  # finished messages remembered, so late duplicate fragments start nothing


class _Partial:
    __slots__ = ("count", "parts", "size", "last")

    def __init__(self, count: int, now: float):
        self.count, self.parts, self.size, self.last = count, {}, 0, now


class Fragmenter:
    """Cuts packed messages (send side) and joins fragments (receive side) for one
    transport. ``stats`` is the transport's counter."""

    def __init__(self, stats, max_message_size: int, max_pending_total: int, timeout_s: float):
        self.stats = stats
        self.max_message_size = max_message_size
        self.max_pending_total = max_pending_total
        self.timeout_s = timeout_s
        self.next_id = 0
        self.pending: "OrderedDict[tuple, _Partial]" = OrderedDict()  # oldest first
        self.by_sender: Counter = Counter()  # sender uid -> bytes under reassembly
        self.total = 0
        self.done: "OrderedDict[tuple, bool]" = OrderedDict()  # recently finished, bounded

    # -- send -----------------------------------------------------------------------------
    def split(self, dest_uid: Optional[bytes], flags: int, packed: bytes, room: int) -> list:
        """The packed fragments of ``packed`` (a packed message longer than ``room``)."""
        chunk = room - WRAPPER
        n = len(packed)
        count = -(-n // chunk)
        fid = self.next_id
        self.next_id += 1
        st = self.stats
        st["frag_messages"] += 1
        st["frag_fragments_sent"] += count
        view = memoryview(packed)
        enc = wire.encode_message
        return [enc(dest_uid, flags, {FRAG_HEADER: [fid, i, count]}, view[i * chunk:(i + 1) * chunk])
                for i in range(count)]

    # -- receive --------------------------------------------------------------------------
    def add(self, sender_uid: bytes, header: Any, chunk: Any, now: float) -> Optional[list]:
        """One fragment; the decoded ``[dest_uid, flags, headers, payload]`` once its message
        is complete, else None. Raises ValueError/TypeError on a malformed fragment."""
        fid, idx, count = header
        if type(fid) is not int or type(idx) is not int or type(count) is not int \
                or type(chunk) is not bytes:
            raise TypeError("fragment")
        if not 0 <= idx < count or count > MAX_FRAGMENTS or count < 2:
            raise ValueError("fragment index")
        self._expire(now)
        key = (sender_uid, fid)
        p = self.pending.get(key)
        st = self.stats
        if p is None:
            if key in self.done:  # a late duplicate of a message already complete (or dropped)
                st["frag_duplicates"] += 1
                return None
            p = self.pending[key] = _Partial(count, now)
        elif p.count != count:
            self._drop(key, "frag_dropped_inconsistent")
            raise ValueError("fragment count changed")
        if idx in p.parts:
            st["frag_duplicates"] += 1
            return None
        size = len(chunk)
        mine = self.by_sender[sender_uid] + size
        if mine > self.max_message_size:
            self._drop(key, "frag_dropped_over_limit")
            return None
        while self.total + size > self.max_pending_total and self.pending:
            oldest = next(iter(self.pending))
            self._drop(oldest, "frag_dropped_evicted")
            if oldest == key:
                return None
        p.parts[idx] = chunk
        p.size += size
        p.last = now
        self.by_sender[sender_uid] += size  # (after evictions, which may be ours)
        self.total += size
        self.pending.move_to_end(key)
        if len(p.parts) < count:
            return None
        self._forget(key, p)
        data = b"".join([p.parts[i] for i in range(count)])
        st["frag_reassembled"] += 1
        return _decode_one(data)

    def _expire(self, now: float) -> None:
        limit = now - self.timeout_s
        while self.pending:
            key, p = next(iter(self.pending.items()))
            if p.last >= limit:
                return
            self._drop(key, "frag_dropped_expired")

    def _drop(self, key: tuple, why: str) -> None:
        p = self.pending.get(key)
        if p is not None:
            self._forget(key, p)
            self.stats[why] += 1

    def _forget(self, key: tuple, p: _Partial) -> None:
        del self.pending[key]
        self.done[key] = True
        if len(self.done) > DONE_KEPT:
            self.done.popitem(last=False)
        self.total -= p.size
        by = self.by_sender
        by[key[0]] -= p.size
        if by[key[0]] <= 0:
            del by[key[0]]


def _decode_one(data: bytes) -> list:
    """A reassembled packed message, validated like one message of a bundle
    (``wire.decode``); raises ValueError when it is not one."""
    try:
        m = msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)
    except Exception:  # msgpack raises several unrelated types on garbage
        raise ValueError("malformed reassembled message") from None
    if (type(m) is not list or len(m) != 4 or type(m[1]) is not int or type(m[2]) is not dict
            or (m[0] is not None and (type(m[0]) is not bytes or len(m[0]) != wire.UUID_LEN))
            or FRAG_HEADER in m[2]):
        raise ValueError("malformed reassembled message")
    return m
