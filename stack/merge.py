"""MERGE detection (MERGE3 style): notice that another view exists.

Every member announces its view id in an INFO message every ``info_interval_s`` (jittered),
to the discovery targets (the multicast group, or every static host), so that members who
are not in each other's views, even ones SWIM declared dead, still hear of each other.
Without multicast, the announcement also goes to the members of earlier views that are no
longer in ours (for ``remember_s``): a member excluded while alive, or the coordinator of
the other side of a partition, need not be among the static hosts. The coordinator announces
to every one of them (its INFO is the one that starts a merge); another member announces to
a departed member only if it is one of the ``info_senders`` members that followed it in the
view it left and stayed (every member computes the same ones from the two views). Those
INFOs are how a member excluded while alive learns that it was dropped: four of a newer view
from one member of its own stale view, whether or not that member still coordinates. With
every member announcing to every departed one, N members apart cost N x min(N/2,
``max_remembered``) datagrams an interval (512,000 a second at 1,000); now about
``info_senders`` + 1 per departed member.
Received INFOs go up to GMS, which decides: a coordinator of another view is a merge
candidate; a member that believes it belongs to our view but is not in it is told so.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass
from itertools import filterfalse
from typing import Any, Optional

from .events import (DiscoveryTargets, EmitTo, GetPhysical, HoldMerges, MergeInfo,
                     ViewInstalled)
from .layer import MCAST, Layer
from .message import CONTROL, Message
from .view import View

INFO = 0


@dataclass
class MergeConfig:
    info_interval_s: float = 0.5
    """Period of INFO announcements. Shorter finds partitions to merge sooner."""
    remember_s: float = 300.0
    """Members of earlier views that are not in ours are announced to this long (without
    multicast): a partition that lasted longer merges only through the static hosts."""
    max_remembered: int = 256
    """At most this many such members are remembered (the most recent ones)."""
    info_senders: int = 3
    """Besides the coordinator, how many members announce to each departed member: those
    that followed it in the view it left (in view order, wrapping around) and stayed."""


class MergeDetector(Layer):
    name = "merge"
    header_id = 6

    def __init__(self, config: MergeConfig):
        super().__init__(config)
        self.view: Optional[View] = None
        self.gone: collections.OrderedDict = collections.OrderedDict()  # addr -> when it left
        self.mine: set = set()  # of ``gone``: those we announce to when not coordinating
        self.held = False  # HoldMerges: announce nothing

    def start(self) -> None:
        self.ctx.every(self.config.info_interval_s, self._announce, jitter=0.3)

    def _announce(self) -> None:
        v = self.view
        if v is None or self.ctx.local not in v or self.held:
            return
        hdr = [INFO, v.view_id.coord.uid, v.view_id.id, v.coordinator == self.ctx.local]
        targets = list(self.below.down_event(DiscoveryTargets()) or ())
        if MCAST not in targets:
            everyone = v.coordinator == self.ctx.local
            targets += [p for p in self._remembered(everyone) if p not in targets]
        for target in targets:
            self.below.down_event(EmitTo(target, Message(None, b"", CONTROL, {6: list(hdr)})))
        self.stats["info_sent"] += 1

    def _remembered(self, everyone: bool) -> list:
        """Physical addresses of the members that left our view within ``remember_s``: all
        of them, or only ours (``mine``)."""
        horizon = self.ctx.now() - self.config.remember_s
        while self.gone and next(iter(self.gone.values())) < horizon:
            self.mine.discard(self.gone.popitem(last=False)[0])
        out = []
        for addr in (self.gone if everyone else self.mine):  # (mine: a subset of gone)
            phys = self.below.down_event(GetPhysical(addr))
            if phys is not None:
                out.append(tuple(phys))
        return out

    def _ours(self, previous, members) -> list:
        """The members of ``previous`` not in ``members`` whose ``info_senders`` successors
        in ``previous`` (wrapping around) that are in ``members`` include us: one pass
        backwards over the view twice, O(N x info_senders)."""
        k, local, n = self.config.info_senders, self.ctx.local, len(previous)
        nxt: list = []  # the next k members that stayed, nearest first
        out = []
        for i in range(2 * n - 1, -1, -1):
            a = previous[i % n]
            if a in members:
                nxt.insert(0, a)
                del nxt[k:]
            elif i < n and local in nxt:
                out.append(a)
        return out

    def up(self, batch: list) -> None:
        self.up_control(batch, self._handle)

    def _handle(self, m, h: list) -> None:
        typ, coord_uid, counter, is_coord = h
        if typ != INFO or type(counter) is not int:
            raise ValueError("not an INFO")
        self.above.up_event(MergeInfo(m.sender, self.ctx.book.get(coord_uid), counter,
                                      bool(is_coord)))

    def down_event(self, ev: Any) -> Any:
        if type(ev) is HoldMerges:
            self.held = ev.held
            return True
        if type(ev) is ViewInstalled:
            now, members = self.ctx.now(), ev.view.member_set
            # (the departed found by a filter in C, and only the remembered checked for
            # members that came back: not a Python step per member and view)
            previous = ev.previous.members if ev.previous is not None else ()
            departed = [a for a in filterfalse(members.__contains__, previous)
                        if a != self.ctx.local]
            for addr in departed:
                self.gone[addr] = now
                self.gone.move_to_end(addr)
            if departed and self.ctx.local in members:
                self.mine.difference_update(departed)
                self.mine.update(self._ours(previous, members))
            for addr in [a for a in self.gone if a in members]:
                del self.gone[addr]
                self.mine.discard(addr)
            while len(self.gone) > self.config.max_remembered:
                self.mine.discard(self.gone.popitem(last=False)[0])
            self.view = ev.view
        return self.below.down_event(ev)
