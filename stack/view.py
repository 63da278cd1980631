"""Views and the events a channel delivers to its application."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import total_ordering
from typing import Any, Optional

from .address import Address


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

    @property
    def coordinator(self) -> Address:
        return self.members[0]

    def __contains__(self, addr: object) -> bool:
        return addr in self.members

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
        old = set(self.previous.members) if self.previous else set()
        return [m for m in self.view.members if m not in old]

    @property
    def left(self) -> list[Address]:
        if self.previous is None:
            return []
        new = set(self.view.members)
        return [m for m in self.previous.members if m not in new]


@dataclass(frozen=True)
class Left:
    """Delivered once when this member has left the group (gracefully or excluded)."""

    reason: str = "left"


def view_to_wire(view: View) -> list:
    return [view.view_id.coord.uid, view.view_id.id, [[m.uid, m.name] for m in view.members]]


def view_from_wire(obj: Any, book) -> View:
    """Parse a view; raises ValueError/TypeError on malformed input (callers count and drop)."""
    coord_uid, counter, members = obj
    if type(counter) is not int or type(members) is not list or not members:
        raise ValueError("malformed view")
    mem = tuple(book.get(uid, str(name)) for uid, name in members)
    if len(set(mem)) != len(mem):
        raise ValueError("duplicate members in view")
    return View(ViewId(book.get(coord_uid), counter), mem)
