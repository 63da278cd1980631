"""Views and the events a channel delivers to its application."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, total_ordering
from itertools import compress, repeat
from operator import is_
from typing import Any, Callable, Optional

from .address import Address

BASE_RANGE = (1, 1)
"""The wire versions of a member that says nothing about them: version 1, the handshake
format (every build reads and writes it)."""


@total_ordering
@dataclass(frozen=True)
class ViewId:
    """Totally ordered: by counter, then by coordinator address."""

    coord: Address
    id: int

    def __lt__(self, other: "ViewId") -> bool:
        return (self.id, self.coord.uid) < (other.id, other.coord.uid)

    def __repr__(self) -> str:
        return f"ViewId(coord={self.coord!r}, id={self.id})"


@dataclass(frozen=True)
class View:
    view_id: ViewId
    members: tuple[Address, ...]
    # Filled by later layers (primary component); a plain agreed view is primary.
    primary: bool = True
    primary_id: int = 0
    versions: tuple = field(default=(), compare=False)
    """Each member's wire versions, ``(lowest, highest)``, in ``members`` order; empty:
    every member at ``BASE_RANGE``."""

    @property
    def wire_version(self) -> int:
        """The version the view speaks, computed alike by every member from the view: the
        highest one every member has (the lowest of their highest), or 1, which every build
        speaks, when their ranges have none in common (the coordinator refuses such joiners
        and merges; only a race between coordinators could build such a view)."""
        lo, hi = common_range(self.versions)
        return hi if lo <= hi else 1

    def ranges(self) -> dict:
        """{member: (lowest, highest)}."""
        return dict(zip(self.members, self.versions or (BASE_RANGE,) * len(self.members)))

    @property
    def coordinator(self) -> Address:
        return self.members[0]

    @cached_property
    def member_set(self) -> frozenset:
        """The members as a frozenset, built once per view: every layer tests membership
        against it (and ``in`` uses it) rather than each building its own set or scanning
        the tuple - O(N) per view instead of O(N) per test (not pickled: rebuilt on use)."""
        return frozenset(self.members)

    def with_member_set(self, member_set: Optional[frozenset]) -> "View":
        """This view, its ``member_set`` given (None: built when first used): a caller
        that holds the members' hashes already (a dict's keys) builds the set without a
        call of ``Address.__hash__`` per member. Only membership and equality are defined
        on it: it need not iterate in the order of a set built from ``members``."""
        if member_set is not None:
            self.__dict__["member_set"] = member_set
        return self

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("member_set", None)
        return state

    def __contains__(self, addr: object) -> bool:
        return addr in self.member_set

    def __len__(self) -> int:
        return len(self.members)

    def __repr__(self) -> str:
        return f"View(view_id={self.view_id!r}, members={list(self.members)!r})"


@dataclass(frozen=True)
class MergeView(View):
    """A view that joins subgroups after a partition; ``subgroups`` lists the views merged."""

    subgroups: tuple[View, ...] = field(default=())


@dataclass(frozen=True)
class ViewChange:
    """Delivered to the application when a view is installed."""

    view: View
    previous: Optional[View] = None

    @property
    def joined(self) -> list[Address]:
        old = self.previous.member_set if self.previous else frozenset()
        return [m for m in self.view.members if m not in old]

    @property
    def left(self) -> list[Address]:
        if self.previous is None:
            return []
        new = self.view.member_set
        return [m for m in self.previous.members if m not in new]


@dataclass(frozen=True)
class Left:
    """Delivered once when this member has left the group (gracefully or excluded)."""

    reason: str = "left"


def common_range(ranges) -> tuple:
    """``(max lowest, min highest)`` of wire version ranges: the versions all of them speak
    (none when lowest > highest); ``BASE_RANGE`` for none."""
    ranges = list(ranges)
    if not ranges:
        return BASE_RANGE
    return max(lo for lo, _ in ranges), min(hi for _, hi in ranges)


def version_differences(ours: tuple, theirs: tuple) -> list:
    """``[["transport.wire_versions", ours, theirs]]`` when two wire version ranges (a
    group's common range and a joiner's, or two subgroups') have no version in common, else
    [] (the format of ``Gms.differences``)."""
    if theirs[0] <= ours[1] and ours[0] <= theirs[1]:
        return []
    return [["transport.wire_versions", list(ours), list(theirs)]]


def carried(table: dict, members, new: Callable[[Any], Any]) -> dict:
    """``{m: table.get(m) or new(m) for m in members}`` (``new`` called in ``members``
    order), built in C but for the members new to ``table``: each layer rebuilds its
    per-member table at every view, O(N) Python calls a view each otherwise."""
    out = dict(zip(members, map(table.get, members)))
    if not all(out.values()):
        for m in list(compress(out, map(is_, out.values(), repeat(None)))):
            out[m] = new(m)
    return out


def range_from_wire(obj: Any) -> tuple:
    """``[lowest, highest]`` from the wire; ValueError/TypeError when it is not one."""
    lo, hi = obj
    if type(lo) is not int or type(hi) is not int or not 1 <= lo <= hi:
        raise ValueError(f"not a wire version range: {obj!r}")
    return lo, hi


def view_to_wire(view: View) -> list:
    """``[coord uid, counter, [[uid, name], ...]]``, plus the members' wire version ranges
    when any is not ``BASE_RANGE`` (so that builds from before versions read the views of a
    group still at version 1)."""
    out = [view.view_id.coord.uid, view.view_id.id, [[m.uid, m.name] for m in view.members]]
    if any(r != BASE_RANGE for r in view.versions):
        out.append([list(r) for r in view.versions])
    return out


def view_from_wire(obj: Any, book) -> View:
    """Parse a view; raises ValueError/TypeError on malformed input (callers count and drop)."""
    coord_uid, counter, members, *rest = obj
    if type(counter) is not int or type(members) is not list or not members or len(rest) > 1:
        raise ValueError("malformed view")
    uids, names = columns(members, 2)
    mem = tuple(book.get_all(uids, map(str, names)))
    member_set = frozenset(mem)  # (the view's own: built once)
    if len(member_set) != len(mem):
        raise ValueError("duplicate members in view")
    versions = ()
    if rest:
        if type(rest[0]) is not list or len(rest[0]) != len(mem):
            raise ValueError("wire versions not in view order")
        versions = tuple(range_from_wire(r) for r in rest[0])
    return View(ViewId(book.get(coord_uid), counter), mem,
                versions=versions).with_member_set(member_set)


def columns(entries: Any, width: int) -> list:
    """The columns of a wire list of ``width``-long entries (``[[a, b], ...]``: ``[(a, ...),
    (b, ...)]``), transposed in C; ValueError/TypeError when it is not one."""
    if type(entries) is not list or (entries and set(map(len, entries)) != {width}):
        raise ValueError(f"not a list of {width}-long entries")
    return list(zip(*entries)) if entries else [()] * width


def digest_from_wire(entries: Any, book) -> dict:
    """``{member: seqno}`` from ``[[uid, seqno], ...]``."""
    uids, seqnos = columns(entries, 2)
    return dict(zip(book.get_all(uids), map(int, seqnos)))


def cut_from_wire(entries: Any, book) -> dict:
    """``{member: (seqno, holder)}`` from ``[[uid, seqno, holder's uid], ...]``."""
    uids, seqnos, holders = columns(entries, 3)
    return dict(zip(book.get_all(uids), zip(map(int, seqnos), book.get_all(holders))))
