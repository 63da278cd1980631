"""Control events that layers pass to each other through the stack (JGroups' Event).

A ``down_event`` travels from a layer towards the transport, an ``up_event`` towards the
application; the first layer that handles an event answers it and stops it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .address import Address
from .view import View


@dataclass
class ViewInstalled:
    """GMS installed ``view`` (sent down to every layer, then up to the application)."""
    view: View
    previous: Optional[View] = None


@dataclass
class GetDigest:
    """NAKACK answers {address: highest seqno delivered}; with ``sent`` the own entry is the
    highest seqno sent, the exact starting point for a joiner (no +1 kludge)."""
    sent: bool = False


@dataclass
class SetDigest:
    """A joiner's starting point: expect messages above these seqnos."""
    digest: dict


@dataclass
class Catchup:
    """Before installing a view that removes crashed members: deliver each member's
    messages up to ``targets[addr] = (seqno, holder)``, fetching from ``holder``; then
    NAKACK calls ``callback()``."""
    targets: dict
    callback: Callable[[], None]
    until_view: bool = False  # abandoned (without callback) once a view is installed


@dataclass
class Freeze:
    """FLUSH of view ``view_id``: deliver nothing more from ``members`` (they are being
    removed) beyond the cut, until a view newer than ``view_id`` is installed."""
    members: list
    view_id: Any = None


@dataclass
class Thaw:
    """The flush of view ``view_id`` ended without a view (FLUSH_RESUME): deliver again from
    the members its Freeze stopped. A freeze of another flush stays."""
    view_id: Any = None


@dataclass
class MergeDigest:
    """Windows for the members of other subgroups, before a MergeView is installed; the
    members in ``others`` (not of our subgroup) start at their digest even if we had a
    window for them (what they sent in their component is not ours to deliver)."""
    digest: dict
    others: list = field(default_factory=list)


@dataclass
class Stability:
    """STABLE agreed: every member has delivered these seqnos; purge below them."""
    digest: dict


@dataclass
class AddPhysical:
    """Teach the transport where a member listens."""
    addr: Address
    phys: Any


@dataclass
class GetPhysical:
    """Transport answers the physical address of ``addr`` (None for self: its own)."""
    addr: Optional[Address] = None


@dataclass
class EmitTo:
    """Send ``msg`` to a physical address (or MCAST) directly, bypassing address lookup."""
    phys: Any
    msg: Any


@dataclass
class FindMembers:
    """Discovery runs a round and calls ``callback(list[PingData])``."""
    callback: Callable[[list], None]


@dataclass
class MembershipStatus:
    """GMS tells discovery what to answer pings with."""
    joined: bool
    is_coord: bool
    view: Optional[View] = None


@dataclass
class PingData:
    addr: Address
    phys: Any
    is_coord: bool
    joined: bool
    coord: Optional[Address] = None


@dataclass
class Writable:
    """Sent up when a layer's send window filled (False) or drained (True): for every send,
    or (``dest``) only for unicasts to that member (flow control's queue per destination)."""
    layer: str
    writable: bool
    dest: Any = None


@dataclass
class Leave:
    """The application asked to leave (or a layer did: ``reason`` then says why, and the
    ``Left`` delivered at the end carries it)."""
    reason: str = "left"


@dataclass
class Connect:
    """The application asked to join (or found) the group."""


@dataclass
class Suspect:
    """SWIM suspects ``addr`` (sent up; informational for GMS)."""
    addr: Address


@dataclass
class Unsuspect:
    """A suspicion of ``addr`` was refuted (sent up)."""
    addr: Address


@dataclass
class MemberDead:
    """SWIM's verdict: ``addr`` is dead (suspicion timed out or confirmed). Sent up; GMS
    excludes it. Sent down by the application layer to feed an external signal (Ray)."""
    addr: Address
    reason: str = "swim"


@dataclass
class ConnectionLost:
    """FD_SOCK (stack/fd_sock.py) -> SWIM: the watch connection to ``addr`` closed (EOF or
    reset, ``reason``) without a goodbye from it. SWIM suspects it at once and verifies:
    it is excluded only if neither it nor the members asked to probe it answer. SWIM
    answers True when it started a verification."""
    addr: Address
    reason: str = "reset"


@dataclass
class MembersChanged:
    """Gossip mode: SWIM's own member list changed (sent up, in address order)."""
    members: tuple
    member_set: Optional[frozenset] = None
    """The same members as a set, when the sender built one (``View.member_set``)."""


@dataclass
class Subscribe:
    """Gossip mode: join through ``contact`` (sent down to SWIM), or leave (``contact`` None)."""
    contact: Optional[Address]


@dataclass
class DiscoveryTargets:
    """Discovery answers where announcements go: [MCAST] or the static hosts."""


@dataclass
class MergeInfo:
    """An INFO heard from ``sender``: its view id is (coord, counter)."""
    sender: Address
    coord: Address
    counter: int
    is_coord: bool


@dataclass
class AppBlocked:
    """The application stopped (``blocked`` True) or resumed (False) consuming deliveries
    (``Stack.set_app_blocked``, sent down from the top). FLOW_CONTROL holds what arrives
    meanwhile and stops granting credits, so senders block instead of this member's memory
    growing; control traffic keeps flowing. The layer that handles it answers True."""
    blocked: bool


@dataclass
class GetBundleRoom:
    """Transport answers the largest packed message one bundle holds (FRAG sizes its
    fragments from it)."""


@dataclass
class WireVersions:
    """Transport answers this member's wire versions, ``(lowest, highest)``
    (``TransportConfig.wire_versions``)."""


@dataclass
class CollectExchange:
    """Sent up by PRIMARY at the start of a state exchange: layers above, and the
    application (``Stack.exchange_handlers``), add what they need agreed (the sequencer's
    delivered counters, the work queue's position) to ``data`` and answer it. Old-view
    deliveries have all gone up before it. ``change``: the ViewChange being agreed on;
    STATE_TRANSFER sets ``status``, this member's recovery status in that view (RECOVERING,
    DONOR, ONLINE or ERROR, see stack/primary.py)."""
    data: dict
    change: Any = None
    status: Optional[str] = None


@dataclass
class ExchangeResult:
    """Sent up by PRIMARY when a state exchange completed, just before the view it was for
    (``view_id``, as on the wire: [coordinator uid, counter]): every member's ``data`` by
    member, the same at every member of the view."""
    data: dict
    view_id: list = field(default_factory=list)


@dataclass
class MemberStatuses:
    """Sent up by PRIMARY when a state exchange completed, after ExchangeResult and just
    before the view (``view_id``, as on the wire): every member's recovery status as the
    exchange carried it (``statuses``: {member: status}); the same at every member of the
    view."""
    statuses: dict
    view_id: list


@dataclass
class StatusAnnounced:
    """Sent up by PRIMARY when it applied an ordered status announcement of the view
    ``view_id``: ``member`` is now ``status``; ``index`` numbers the view's announcements
    from 1. Every member that completed the view's exchange applies the same announcements
    in the same order (each one a prefix of them)."""
    view_id: list
    index: int
    member: Address
    status: str


@dataclass
class HoldMerges:
    """GMS -> MERGE (``Gms.hold_merges``): while ``held``, this member announces no INFO, so
    that no other view's coordinator tries to merge with it."""
    held: bool
