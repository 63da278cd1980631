"""Rendezvous (highest random weight) hashing of keys over a view's members. Pure Python.

Each (member, key) pair gets a weight from a stable hash (BLAKE2b, 8 bytes: the same on every
process, every run and every Python version, unlike ``hash()``); a key belongs to the member
with the highest weight. When one member leaves, only its keys move (each to the member with
its second-highest weight); when one joins, only the keys it now wins move to it: about 1/N
of the keys for one change among N members, and none between members that stayed.

```python
owner(42, ["m-0", "m-1", "m-2"])           # "m-1", say: the same everywhere, always
owners(keys, members)                      # [owner per key]
moved(keys, before, after)                 # the keys whose owner changed
```
"""
from __future__ import annotations

import struct
from hashlib import blake2b
from typing import Any, Iterable, Sequence


def key_bytes(key: Any) -> bytes:
    """A key as bytes, tagged by type (so 1, "1" and b"1" are distinct keys). Spark column
    values: int, str, bytes, float, bool, None, and anything else by its ``repr``."""
    if isinstance(key, bool):
        return b"?1" if key else b"?0"
    if isinstance(key, int):
        return b"i" + str(key).encode()
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return b"b" + bytes(key)
    if isinstance(key, float):
        return b"f" + struct.pack(">d", key)
    if key is None:
        return b"n"
    return b"r" + repr(key).encode("utf-8", "surrogatepass")


def weight(member: str, key: Any) -> int:
    """The weight of ``key`` at ``member`` (a 64-bit integer)."""
    h = blake2b(member.encode("utf-8"), digest_size=8)
    h.update(b"\x00")
    h.update(key_bytes(key))
    return int.from_bytes(h.digest(), "big")


def owner(key: Any, members: Sequence[str]) -> str:
    """The member of ``members`` that owns ``key`` (ties, astronomically rare, go to the
    greater member name). Raises ValueError when ``members`` is empty."""
    if not members:
        raise ValueError("no members to own the key")
    kb = key_bytes(key)
    best, best_w = None, -1
    for m in members:
        h = blake2b(m.encode("utf-8"), digest_size=8)
        h.update(b"\x00")
        h.update(kb)
        w = int.from_bytes(h.digest(), "big")
        if w > best_w or (w == best_w and m > best):
            best, best_w = m, w
    return best


def owner_index(key: Any, members: Sequence[str]) -> int:
    """The position in ``members`` of the key's owner."""
    return list(members).index(owner(key, members))


def owners(keys: Iterable[Any], members: Sequence[str]) -> list:
    """The owner of each key, in order."""
    members = list(members)
    return [owner(k, members) for k in keys]


def moved(keys: Iterable[Any], before: Sequence[str], after: Sequence[str]) -> list:
    """The keys whose owner differs between the member lists ``before`` and ``after``."""
    before, after = list(before), list(after)
    return [k for k in keys if owner(k, before) != owner(k, after)]
