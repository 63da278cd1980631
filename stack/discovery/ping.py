"""PING discovery: who is out there? (JGroups PING/MPING and TCPPING.)

A joiner sends GET_MBRS_REQ to the multicast group (``mode="multicast"``) or to every
address of a static host list (``mode="static"``), a few times over ``timeout_s``; every
member that is joined or joining answers with its address, whether it is coordinator and
where the coordinator lives. The round ends at the timeout, or at the first coordinator
answer with ``break_on_coord_rsp``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..events import (AddPhysical, DiscoveryTargets, EmitTo, FindMembers, GetPhysical,
                      MembershipStatus, PingData, ViewInstalled)
from ..layer import MCAST, Layer
from ..message import CONTROL, Message

REQ, RSP = 0, 1


@dataclass
class DiscoveryConfig:
    mode: str = "multicast"
    """"multicast": ping the IP multicast group; "static": ping every ``initial_hosts``."""
    initial_hosts: tuple = ()
    """Static mode: ((host, port), ...) of members that may be running (TCPPING)."""
    timeout_s: float = 0.5
    """How long one discovery round waits for answers. Longer rides out loss; shorter
    founds a lone group sooner."""
    num_pings: int = 3
    """Requests sent per round, spread over the timeout, so one lost packet does not hide
    the coordinator."""
    break_on_coord_rsp: bool = True
    """End the round at the first coordinator's answer (fast joins)."""


class Ping(Layer):
    name = "discovery"
    header_id = 1

    def __init__(self, config: DiscoveryConfig):
        super().__init__(config)
        self.status: Optional[MembershipStatus] = None
        self.round: Optional[dict] = None
        self.callback = None
        self.round_id = 0

    # -- a discovery round --------------------------------------------------------------
    def _find(self, callback) -> None:
        self.round_id += 1
        rid = self.round_id
        self.round, self.callback = {}, callback
        cfg = self.config
        for i in range(cfg.num_pings):
            self.ctx.schedule(i * cfg.timeout_s / cfg.num_pings, lambda: self._ping(rid))
        self.ctx.schedule(cfg.timeout_s, lambda: self._finish(rid))

    def _ping(self, rid: int) -> None:
        if rid != self.round_id or self.round is None:
            return
        phys = self.below.down_event(GetPhysical())
        hdr = [REQ, self.ctx.local.name, list(phys) if phys else None]
        for target in self._targets():
            self.below.down_event(EmitTo(target, Message(None, b"", CONTROL, {1: list(hdr)})))
        self.stats["pings_sent"] += 1

    def _targets(self) -> list:
        if self.config.mode != "static":
            return [MCAST]
        me = self.below.down_event(GetPhysical())
        return [tuple(p) for p in self.config.initial_hosts if tuple(p) != tuple(me or ())]

    def _finish(self, rid: int) -> None:
        if rid != self.round_id or self.round is None:
            return
        found, cb = list(self.round.values()), self.callback
        self.round, self.callback = None, None
        cb(found)

    # -- traffic ------------------------------------------------------------------------
    def up(self, batch: list) -> None:
        self.up_control(batch, self._handle)

    def _handle(self, m, h: list) -> None:
        if h[0] == REQ:
            self._on_request(m.sender, h[1], h[2])
        elif h[0] == RSP:
            self._on_response(m.sender, *h[1:7])
        else:
            self.malformed()

    def _on_request(self, sender, name: str, phys) -> None:
        self.stats["pings_received"] += 1
        st = self.status
        if st is None:
            return  # not connecting: we are nobody to answer for
        self.ctx.book.get(sender.uid, str(name))
        if phys is not None:
            self.below.down_event(AddPhysical(sender, (str(phys[0]), int(phys[1]))))
        me = self.below.down_event(GetPhysical())
        coord_uid = coord_phys = None
        if st.view is not None:
            coord = st.view.coordinator
            coord_uid = coord.uid
            coord_phys = me if coord == self.ctx.local else self.below.down_event(GetPhysical(coord))
        hdr = [RSP, self.ctx.local.name, list(me) if me else None, st.is_coord, st.joined,
               coord_uid, list(coord_phys) if coord_phys else None]
        self.below.down(Message(sender, b"", CONTROL, {1: hdr}))

    def _on_response(self, sender, name, phys, is_coord, joined, coord_uid, coord_phys) -> None:
        if self.round is None:
            return
        addr = self.ctx.book.get(sender.uid, str(name))
        if phys is not None:
            self.below.down_event(AddPhysical(addr, (str(phys[0]), int(phys[1]))))
        coord = None
        if coord_uid is not None:
            coord = self.ctx.book.get(coord_uid)
            if coord_phys is not None:
                self.below.down_event(AddPhysical(coord, (str(coord_phys[0]), int(coord_phys[1]))))
        self.round[addr] = PingData(addr, phys, bool(is_coord), bool(joined), coord)
        if is_coord and joined and self.config.break_on_coord_rsp:
            self._finish(self.round_id)

    # -- events -------------------------------------------------------------------------
    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is FindMembers:
            self._find(ev.callback)
            return None
        if t is MembershipStatus:
            self.status = ev
            return None
        if t is DiscoveryTargets:
            return self._targets()
        if t is ViewInstalled:
            local = self.ctx.local
            self.status = MembershipStatus(local in ev.view, ev.view.coordinator == local, ev.view)
        return self.below.down_event(ev)
