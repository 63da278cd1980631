"""Logical member addresses: a 128-bit UUID plus a human-readable logical name.

Equality, ordering and hashing use the UUID only. The hash is derived from the UUID bytes
rather than Python's salted ``hash(bytes)``, so sets and dicts of addresses iterate in the
same order in every process: the simulator's replays depend on that.
"""
from __future__ import annotations

import random

UUID_LEN = 16


class Address:
    """A member incarnation. A restarted member gets a fresh UUID (UUIDs are never reused)."""

    __slots__ = ("uid", "name", "_hash")

    def __init__(self, uid: bytes, name: str = ""):
        if type(uid) is not bytes or len(uid) != UUID_LEN:
            raise ValueError(f"an address uid is {UUID_LEN} bytes, got {uid!r}")
        self.uid = uid
        self.name = name
        # the high half (random UUIDs), or the low half when it is zero: the seeded UUIDs
        # of a bootstrap file (1, 2, 3, ...) would otherwise all hash to 0
        self._hash = int.from_bytes(uid[:8], "big") or int.from_bytes(uid[8:], "big")

    @classmethod
    def random(cls, name: str, rng: random.Random) -> "Address":
        return cls(rng.getrandbits(128).to_bytes(UUID_LEN, "big"), name)

    @property
    def uuid_hex(self) -> str:
        h = self.uid.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Address) and other.uid == self.uid

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: "Address") -> bool:
        return self.uid < other.uid

    def __le__(self, other: "Address") -> bool:
        return self.uid <= other.uid

    def __gt__(self, other: "Address") -> bool:
        return self.uid > other.uid

    def __ge__(self, other: "Address") -> bool:
        return self.uid >= other.uid

    def __repr__(self) -> str:
        return self.name or self.uid.hex()[:8]

    def __reduce__(self):
        return (Address, (self.uid, self.name))


class AddressBook:
    """Interns addresses by UUID so one stack holds one object per member, names filled in
    as views and discovery reveal them."""

    __slots__ = ("_by_uid",)

    def __init__(self) -> None:
        self._by_uid: dict[bytes, Address] = {}

    def get(self, uid: bytes, name: str = "") -> Address:
        a = self._by_uid.get(uid)
        if a is None:
            a = Address(uid, name)
            self._by_uid[uid] = a
        elif name and not a.name:
            a.name = name
        return a

    def add(self, addr: Address) -> Address:
        return self.get(addr.uid, addr.name)

    def forget(self, keep: "set[Address]") -> None:
        """Drop interned addresses no longer referenced by membership (bounds the book)."""
        self._by_uid = {u: a for u, a in self._by_uid.items() if a in keep}

    def __len__(self) -> int:
        return len(self._by_uid)
