"""``ViewSnapshot``: one agreed view of a group as plain, picklable data: what the driver-side
``ViewFeed`` hands out and broadcasts to Spark stages, and what code inside a Spark task
compares with the group's current view (``check()``: ``SupersededView`` when the group moved on).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from raygroups.stack import RaygroupsError


class SupersededView(RaygroupsError):
    """A stage ran on a view the group has replaced. ``old`` and ``new``: view labels
    ("coord:counter")."""

    def __init__(self, old: str, new: str):
        super().__init__(f"view {old} is superseded by {new}")
        self.old, self.new = old, new


def _hex(uuid_hex: str) -> str:
    return uuid_hex.replace("-", "").lower()


@dataclass(frozen=True)
class ViewSnapshot:
    """A view of group ``cluster``: ``view_id`` (coordinator name, counter), members (names,
    in view order, the coordinator first) and their UUIDs, whether it is the primary component,
    ``installed_at`` (wall clock, at the member that reported it), ``seen_at`` (when the
    feed saw it), and how code elsewhere reaches the group (``gcs_address`` and ``namespace``
    for Ray, ``http_urls`` of the members' HTTP APIs)."""
    cluster: str
    view_id: tuple
    coord_uuid: str
    members: tuple
    uuids: tuple
    primary: bool = True
    primary_id: int = 0
    installed_at: float = 0.0
    seen_at: float = 0.0
    source: Optional[str] = None
    """The member that reported the view."""
    namespace: str = "raygroups"
    gcs_address: Optional[str] = None
    http_urls: tuple = field(default=(), compare=False)
    """((member name, URL), ...) of the members' HTTP APIs when the feed saw the view."""

    @classmethod
    def of(cls, view: Any, cluster: str, **kw: Any) -> "ViewSnapshot":
        """From a ``raygroups.stack.View``."""
        vid = view.view_id
        return cls(cluster=cluster, view_id=(vid.coord.name, vid.id),
                   coord_uuid=_hex(vid.coord.uuid_hex),
                   members=tuple(m.name for m in view.members),
                   uuids=tuple(_hex(m.uuid_hex) for m in view.members),
                   primary=bool(getattr(view, "primary", True)),
                   primary_id=int(getattr(view, "primary_id", 0)), **kw)

    @property
    def key(self) -> tuple:
        """The view's place in the total order of views: (counter, coordinator UUID)."""
        return (self.view_id[1], self.coord_uuid)

    @property
    def label(self) -> str:
        return f"{self.view_id[0]}:{self.view_id[1]}"

    def supersedes(self, other: "ViewSnapshot") -> bool:
        return self.key > other.key

    def member_uuid(self, name: str) -> str:
        return self.uuids[self.members.index(name)]

    # -- inside a Spark task --------------------------------------------------------------
    def latest(self, via: str = "ray") -> "ViewSnapshot":
        """The group's current view, asked from wherever this runs (a Spark task included):
        ``via="ray"`` connects this process to the Ray cluster (once; about 0.3 s) and asks a
        member actor; ``via="http"`` asks the members' HTTP APIs (about 2 ms, no Ray
        connection). "ray" falls back to HTTP when Ray cannot be reached."""
        from .task_view import latest_view
        return latest_view(self, via)

    def is_current(self, via: str = "ray") -> bool:
        return not self.latest(via).supersedes(self)

    def check(self, via: str = "ray") -> "ViewSnapshot":
        """Raise ``SupersededView`` when the group installed a newer view than this one;
        else return the latest view (the same view id)."""
        now = self.latest(via)
        if now.supersedes(self):
            raise SupersededView(self.label, now.label)
        return now
