"""Rendezvous (highest random weight) hashing of keys over a view's members, with Spark's own
hash function, so that Spark computes it as a native column expression (``partitioning.py``)
and Python gives the same answer everywhere. Pure Python here.

A (member, key) pair's weight is Spark's ``xxhash64(member, key)``: XXH64 with seed 42 over
the member name's UTF-8 bytes, chained (the result as the seed) over the key; the same on
every process, run and Python version, unlike ``hash()``. A key belongs to the member with the
highest weight (a signed 64-bit integer, as Spark returns it; ties, astronomically rare, go to
the greater member name). When one member leaves, only its keys move (each to the member with
its second-highest weight); when one joins, only the keys it now wins move to it: about 1/N
of the keys for one change among N members, and none between members that stayed.

How a key is hashed is how Spark hashes a column of its type: an ``int`` as a 64-bit long
(a Spark integral column is cast to long first), a ``str`` as its UTF-8 bytes, ``bytes`` as
they are (so "1" and b"1" are one key, as a string and a binary column holding them are), a
``bool`` as the 32-bit int 1 or 0, ``None`` not at all (Spark skips nulls: the weight is the
member's alone). A ``float`` is hashed as its IEEE 754 bits (-0.0 as 0.0); an ``int`` outside
the 64-bit range, and any other value, as the UTF-8 bytes of its ``repr``.

```python
owner(42, ["m-0", "m-1", "m-2"])           # "m-1", say: the same everywhere, always
owners(keys, members)                      # [owner per key]
moved(keys, before, after)                 # the keys whose owner changed
```
"""
from __future__ import annotations

import struct
from typing import Any, Iterable, Sequence

SEED = 42
"""Spark's seed for ``xxhash64``."""
_M = (1 << 64) - 1
_P1, _P2, _P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_P4, _P5 = 9650029242287828579, 2870177450012600261
_LONG = (-(1 << 63), (1 << 63) - 1)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def _merge(h: int, v: int) -> int:
    return ((h ^ _round(0, v)) * _P1 + _P4) & _M


def _avalanche(h: int) -> int:
    h = ((h ^ (h >> 33)) * _P2) & _M
    h = ((h ^ (h >> 29)) * _P3) & _M
    return h ^ (h >> 32)


def xxh64(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` with ``seed`` (both as Spark has them: the result unsigned)."""
    seed &= _M
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M]
        while i + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, i)
            v = [_round(a, b) for a, b in zip(v, lanes)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for x in v:
            h = _merge(h, x)
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        h = (_rotl(h, 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * _P1) & _M
        h = (_rotl(h, 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        i += 1
    return _avalanche(h)


def _signed(h: int) -> int:
    return h - (1 << 64) if h >> 63 else h


def hash_key(key: Any, seed: int) -> int:
    """Spark's ``xxhash64`` step for one value (unsigned; see the module doc for types)."""
    if key is None:
        return seed & _M
    if isinstance(key, bool):
        return xxh64(struct.pack("<i", int(key)), seed)
    if isinstance(key, int) and _LONG[0] <= key <= _LONG[1]:
        return xxh64(struct.pack("<q", key), seed)
    if isinstance(key, str):
        return xxh64(key.encode("utf-8", "surrogatepass"), seed)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return xxh64(bytes(key), seed)
    if isinstance(key, float):
        return xxh64(struct.pack("<d", 0.0 if key == 0.0 else key), seed)
    return xxh64(repr(key).encode("utf-8", "surrogatepass"), seed)


def member_seed(member: str) -> int:
    """The seed a member's weights chain from: ``xxhash64(member)`` (unsigned)."""
    return xxh64(member.encode("utf-8"), SEED)


def weight(member: str, key: Any) -> int:
    """The weight of ``key`` at ``member``: Spark's ``xxhash64(member, key)``, signed."""
    return _signed(hash_key(key, member_seed(member)))


def owner(key: Any, members: Sequence[str]) -> str:
    """The member of ``members`` that owns ``key``. Raises ValueError when ``members`` is
    empty."""
    if not members:
        raise ValueError("no members to own the key")
    return max((_signed(hash_key(key, member_seed(m))), m) for m in members)[1]


def owner_index(key: Any, members: Sequence[str]) -> int:
    """The position in ``members`` of the key's owner."""
    return list(members).index(owner(key, members))


def owners(keys: Iterable[Any], members: Sequence[str]) -> list:
    """The owner of each key, in order."""
    seeds = [(member_seed(m), m) for m in members]
    if not seeds:
        raise ValueError("no members to own the keys")
    return [max((_signed(hash_key(k, s)), m) for s, m in seeds)[1] for k in keys]


def moved(keys: Iterable[Any], before: Sequence[str], after: Sequence[str]) -> list:
    """The keys whose owner differs between the member lists ``before`` and ``after``."""
    keys = list(keys)
    return [k for k, a, b in zip(keys, owners(keys, before), owners(keys, after)) if a != b]
