"""Wire format: one msgpack array per datagram or TCP frame, in one of two versions.

    version 1: [1, cluster, sender_uid, [message, ...]]
    version 2: [2, cluster, sender_uid, {extensions}, [message, ...]]
    message:   [dest_uid|nil, flags, {header_id: header}, payload]

Version 1 is the handshake format: every build reads and writes it, and everything sent to a
member outside the sender's view goes in it (discovery, JOIN_REQ and its answers, merge
traffic, INFO). Version 2 adds an extensions map ahead of the messages, where later formats add
bundle-level fields without a version of their own (a reader ignores keys it does not know);
a version-1-only reader cannot decode it. A group speaks the highest version every member of
its view has (``View.wire_version``; see docs/architecture.md, "Versions and rolling
upgrades"), and a reader accepts version 1 and the versions it speaks itself.

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
"""The handshake format, which every build reads and writes."""
VERSIONS = (1, 2)
"""The formats this build can speak; ``TransportConfig.wire_versions`` picks a range of them."""
UUID_LEN = 16
# Receive-side bounds: a packet larger than this is dropped before unpacking.
MAX_PACKET = 16 * 1024 * 1024

_packer = msgpack.Packer(autoreset=True, use_bin_type=True)


def array_header(n: int) -> bytes:
    return _packer.pack_array_header(n)


def encode_message(dest_uid: Optional[bytes], flags: int, headers: dict, payload: Any) -> bytes:
    return _packer.pack([dest_uid, flags, headers, payload])


def bundle_prefix(cluster: str, sender_uid: bytes, version: int = VERSION) -> bytes:
    """The part of every bundle that does not depend on its messages."""
    head = _packer.pack(cluster) + _packer.pack(sender_uid)
    if version == 1:
        return array_header(4) + _packer.pack(1) + head
    return array_header(5) + _packer.pack(version) + head + _packer.pack({})


class DecodeError(Exception):
    """Why a packet was dropped; ``reason`` is the stats key."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def decode(data: bytes, cluster: str, accept: frozenset = frozenset((VERSION,))
           ) -> tuple[bytes, list]:
    """Return (sender_uid, [[dest_uid, flags, headers, payload], ...]) or raise DecodeError.
    ``accept``: the versions this reader speaks (1 and its own range); a bundle of another
    version is ``wrong_version``."""
    if len(data) > MAX_PACKET:
        raise DecodeError("oversized")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)
    except Exception:  # msgpack raises several unrelated types on garbage
        raise DecodeError("malformed") from None
    if type(obj) is not list or not obj:
        raise DecodeError("malformed")
    version = obj[0]
    if type(version) is not int or version not in accept:
        raise DecodeError("wrong_version")
    if version == 1 and len(obj) == 4:
        _, clu, sender, msgs = obj
    elif version == 2 and len(obj) == 5 and type(obj[3]) is dict:
        _, clu, sender, _, msgs = obj  # extensions: none known yet
    else:
        raise DecodeError("malformed")
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
    ``max_size`` bytes, in wire format ``version``."""

    __slots__ = ("prefix", "max_size", "queues")

    def __init__(self, cluster: str, sender_uid: bytes, max_size: int, version: int = VERSION):
        self.prefix = bundle_prefix(cluster, sender_uid, version)
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
