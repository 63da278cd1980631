"""Logical member addresses: a 128-bit UUID plus a human-readable logical name.

A random UUID carries 96 random bits (its top 32 bits are zero): the chance that two of a
million members ever share one is about 10^-17, and the members file of store discovery
writes it in 16 base64url characters, which keeps a line with a short name and an IPv4
endpoint near the ~35 bytes of JGroups' cloud-store discovery design. The seeded UUIDs of a
bootstrap file are small
numbers (1, 2, 3, ...). UUIDs on the wire stay 16 bytes, so a member reads any 128-bit UUID
(one written by hand into a members file, say).

Equality, ordering and hashing use the UUID only. The hash is derived from the UUID bytes
rather than Python's salted ``hash(bytes)``, so sets and dicts of addresses iterate in the
same order in every process: the simulator's replays depend on that.
"""
from __future__ import annotations

from operator import attrgetter

from .rng import Rng

UUID_LEN = 16
RANDOM_BITS = 96
"""Random bits in a random UUID (the low 96 of its 128)."""


class Address:
    """A member incarnation. A restarted member gets a fresh UUID (UUIDs are never reused)."""

    __slots__ = ("uid", "name", "_hash")

    def __init__(self, uid: bytes, name: str = ""):
        if type(uid) is not bytes or len(uid) != UUID_LEN:
            raise ValueError(f"an address uid is {UUID_LEN} bytes, got {uid!r}")
        self.uid = uid
        self.name = name
        # the top 64 random bits, or the low half when the first 12 bytes are zero: the
        # seeded UUIDs of a bootstrap file (1, 2, 3, ...) would otherwise all hash to 0
        self._hash = int.from_bytes(uid[:12], "big") or int.from_bytes(uid[8:], "big")

    @classmethod
    def random(cls, name: str, rng: Rng) -> "Address":
        # 128 bits drawn, the top 96 kept: one seed gives the same sequence of draws, member
        # order and hashes as with full 128-bit UUIDs, so recorded simulator seeds replay
        uid = rng.getrandbits(128) >> (128 - RANDOM_BITS)
        return cls(uid.to_bytes(UUID_LEN, "big"), name)

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

    @property
    def short_hex(self) -> str:
        """The first 8 significant hex digits of the UUID (``"1"`` for the seeded UUID 1)."""
        return self.uid.hex().lstrip("0")[:8] or "0"

    def __repr__(self) -> str:
        return self.name or self.short_hex

    def __reduce__(self):
        return (Address, (self.uid, self.name))


_name = attrgetter("name")


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

    def get_all(self, uids, names=None) -> list:
        """``[self.get(uid, name) ...]`` of ``uids`` (and ``names``, strings): in C when
        every one is known and named already, as in every view after a member's first (a
        view's or a digest's N entries at each member, O(N) calls a view otherwise)."""
        found = list(map(self._by_uid.get, uids))
        if not all(found) or (names is not None and not all(map(_name, found))):
            get = self.get
            found = list(map(get, uids) if names is None else map(get, uids, names))
        return found

    def add(self, addr: Address) -> Address:
        return self.get(addr.uid, addr.name)

    def forget(self, keep: "set[Address]") -> None:
        """Drop interned addresses no longer referenced by membership (bounds the book)."""
        self._by_uid = {u: a for u, a in self._by_uid.items() if a in keep}

    def __len__(self) -> int:
        return len(self._by_uid)
