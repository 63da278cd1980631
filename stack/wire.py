"""Wire format: one msgpack array per datagram or TCP frame.

    [VERSION, cluster, sender_uid, [[dest_uid|nil, flags, {header_id: header}, payload], ...]]

Messages are packed once when they go down (``encode_message``) and concatenated into
bundles per destination (``Bundler``); a bundle is a valid msgpack array built from the
pre-packed messages, so receivers decode a whole bundle with one ``unpackb`` call.
``decode`` never raises: anything malformed becomes a ``DecodeError`` reason the transport
counts.
"""
from __future__ import annotations

from typing import Any, Optional

import msgpack

VERSION = 1
UUID_LEN = 16
# Receive-side bounds: a packet larger than this is dropped before unpacking.
MAX_PACKET = 16 * 1024 * 1024

_packer = msgpack.Packer(autoreset=True, use_bin_type=True)


def array_header(n: int) -> bytes:
    return _packer.pack_array_header(n)


def encode_message(dest_uid: Optional[bytes], flags: int, headers: dict, payload: Any) -> bytes:
    return _packer.pack([dest_uid, flags, headers, payload])


def bundle_prefix(cluster: str, sender_uid: bytes) -> bytes:
    """The part of every bundle that does not depend on its messages."""
    return array_header(4) + _packer.pack(VERSION) + _packer.pack(cluster) + _packer.pack(sender_uid)


class DecodeError(Exception):
    """Why a packet was dropped; ``reason`` is the stats key."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def decode(data: bytes, cluster: str) -> tuple[bytes, list]:
    """Return (sender_uid, [[dest_uid, flags, headers, payload], ...]) or raise DecodeError."""
    if len(data) > MAX_PACKET:
        raise DecodeError("oversized")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)
    except Exception:  # msgpack raises several unrelated types on garbage
        raise DecodeError("malformed") from None
    if type(obj) is not list or len(obj) != 4:
        raise DecodeError("malformed")
    version, clu, sender, msgs = obj
    if version != VERSION:
        raise DecodeError("wrong_version")
    if clu != cluster:
        raise DecodeError("foreign_cluster")
    if type(sender) is not bytes or len(sender) != UUID_LEN or type(msgs) is not list:
        raise DecodeError("malformed")
    for m in msgs:
        if (type(m) is not list or len(m) != 4 or type(m[1]) is not int or type(m[2]) is not dict
                or (m[0] is not None and (type(m[0]) is not bytes or len(m[0]) != UUID_LEN))):
            raise DecodeError("malformed")
    return sender, msgs


class Bundler:
    """Accumulates packed messages per destination and cuts them into bundles of at most
    ``max_size`` bytes."""

    __slots__ = ("prefix", "max_size", "queues")

    def __init__(self, cluster: str, sender_uid: bytes, max_size: int):
        self.prefix = bundle_prefix(cluster, sender_uid)
        self.max_size = max_size
        self.queues: dict[Any, list[bytes]] = {}

    @property
    def max_message(self) -> int:
        """Largest packed message that fits a bundle on its own."""
        return self.max_size - len(self.prefix) - 5

    def add(self, dest: Any, packed: bytes) -> None:
        q = self.queues.get(dest)
        if q is None:
            self.queues[dest] = [packed]
        else:
            q.append(packed)

    def add_many(self, dest: Any, packed: list) -> None:
        """Queue several packed messages (a fragmented message's fragments) in order."""
        q = self.queues.get(dest)
        if q is None:
            self.queues[dest] = list(packed)
        else:
            q.extend(packed)

    def drain(self):
        """Yield (dest, bundle_bytes) for everything queued, and empty the queues."""
        queues, self.queues = self.queues, {}
        limit = self.max_size - len(self.prefix) - 5
        for dest, msgs in queues.items():
            start, size = 0, 0
            for i, m in enumerate(msgs):
                if size + len(m) > limit and i > start:
                    yield dest, self._bundle(msgs[start:i])
                    start, size = i, 0
                size += len(m)
            yield dest, self._bundle(msgs[start:])

    def _bundle(self, msgs: list[bytes]) -> bytes:
        return b"".join((self.prefix, array_header(len(msgs)), *msgs))
