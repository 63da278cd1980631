"""MERGE detection (MERGE3 style): notice that another view exists.

Every member announces its view id in an INFO message every ``info_interval_s`` (jittered),
to the discovery targets (the multicast group, or every static host), so that members who
are not in each other's views, even ones SWIM declared dead, still hear of each other.
Received INFOs go up to GMS, which decides: a coordinator of another view is a merge
candidate; a member that believes it belongs to our view but is not in it is told so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .events import DiscoveryTargets, EmitTo, MergeInfo, ViewInstalled
from .layer import Layer
from .message import CONTROL, Message
from .view import View

INFO = 0


@dataclass
class MergeConfig:
    info_interval_s: float = 0.5
    """Period of INFO announcements. Shorter finds partitions to merge sooner."""


class MergeDetector(Layer):
    name = "merge"
    header_id = 6

    def __init__(self, config: MergeConfig):
        super().__init__(config)
        self.view: Optional[View] = None

    def start(self) -> None:
        self.ctx.every(self.config.info_interval_s, self._announce, jitter=0.3)

    def _announce(self) -> None:
        v = self.view
        if v is None or self.ctx.local not in v:
            return
        hdr = [INFO, v.view_id.coord.uid, v.view_id.id, v.coordinator == self.ctx.local]
        for target in self.below.down_event(DiscoveryTargets()) or ():
            self.below.down_event(EmitTo(target, Message(None, b"", CONTROL, {6: list(hdr)})))
        self.stats["info_sent"] += 1

    def up(self, batch: list) -> None:
        self.up_control(batch, self._handle)

    def _handle(self, m, h: list) -> None:
        typ, coord_uid, counter, is_coord = h
        if typ != INFO or type(counter) is not int:
            raise ValueError("not an INFO")
        self.above.up_event(MergeInfo(m.sender, self.ctx.book.get(coord_uid), counter,
                                      bool(is_coord)))

    def down_event(self, ev: Any) -> Any:
        if type(ev) is ViewInstalled:
            self.view = ev.view
        return self.below.down_event(ev)
