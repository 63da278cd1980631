"""Records what a simulated group sent and delivered, and checks the stack's guarantees:
view agreement, per-sender FIFO without duplicates, and no loss among members that stay."""
from __future__ import annotations

from collections import defaultdict

from raygroups.stack.events import MemberStatuses, StatusAnnounced
from raygroups.stack.message import Message
from raygroups.stack.primary import DONOR, ERROR, OFFLINE, RECOVERING
from raygroups.stack.state_transfer import StateTransferFailed
from raygroups.stack.view import MergeView, ViewChange


def _vid(view) -> tuple:
    return (view.view_id.coord.uid, view.view_id.id)


def _parse(payload: bytes) -> tuple:
    """(stream, k): stream is the sender's uid, + b"O" for its ordered messages."""
    return payload[:16] + payload[20:], int.from_bytes(payload[16:20], "big")


def _vname(vid) -> str:
    return vid and f"{_short(vid[0])}:{vid[1]}"


def _short(stream: bytes) -> str:
    """A sender's stream for messages: its uid's significant hex digits (+ O if ordered)."""
    return stream[:16].hex().lstrip("0")[:8] + stream[16:].decode()


def _statuses(anns: list) -> list:
    return [f"{_short(u)}:{s}" for u, s in anns]


def _first_views(m) -> list:
    """The first view of each of m's incarnations."""
    return [ev.view for ev in m.events if type(ev) is ViewChange and ev.previous is None]


def _member_of(change: ViewChange, member) -> bool:
    """Whether the member that got ``change`` belongs to the new view (an excluded member
    sees the view that drops it, but does not move into it)."""
    uids = {a.uid for a in change.view.members}
    return any(msg_uid in uids for msg_uid in member.uids)


class History:
    def __init__(self, sim, tie_breaker: bool = False):
        self.sim = sim
        self.tie_breaker = tie_breaker
        """The group runs ``primary.tie_breaker="store"``: a primary component may hold
        exactly half of the one before it (it won that one's lease)."""
        self.sent = []          # (sender_uid, k, frozenset(view member uids at send time))
        self.sent_in = []       # the sender's view id at send time, for each of ``sent``
        self.counters = defaultdict(int)
        self.primary_at_send = []
        self.asked_to_leave = set()  # member names
        self.before: set = set()
        """Incarnation uids of an earlier era: every member crashed after them, and the
        primary components begin a lineage again (``new_era``)."""

    def new_era(self) -> None:
        """Every member is down (a power cut): the primary checks leave out the views of
        every incarnation so far (the primary ids of the next era begin again)."""
        for m in self.sim.members:
            self.before.update(m.uids)

    def _views(self, m) -> list:
        """m's views in this era."""
        if not self.before:
            return m.views
        return [v for v in m.views if not any(a.uid in self.before for a in v.members)]

    def leave(self, m) -> None:
        """The application of m leaves the group."""
        self.asked_to_leave.add(m.name)
        m.leave()

    def send(self, m, ordered: bool = False) -> None:
        """Multicast the next numbered message from member m (if it can send now). Ordered
        (total order) messages are numbered in a stream of their own, keyed uid + b"O"."""
        if not m.alive or m.view is None or m.address not in m.view or not m.writable:
            return
        if m.stack.layer("gms").state.value != "member":
            return
        stream = m.address.uid + (b"O" if ordered else b"")
        self.counters[stream] += 1
        k = self.counters[stream]
        self.sent.append((stream, k, frozenset(a.uid for a in m.view.members)))
        self.sent_in.append(_vid(m.view))
        self.primary_at_send.append(m.view.primary)
        m.send(m.address.uid + k.to_bytes(4, "big") + stream[16:], ordered=ordered)

    def fail(self, text: str) -> None:
        bug = f" ({self.sim.buggify.describe()})" if self.sim.buggify is not None else ""
        raise AssertionError(f"{text}; reproduce with --sim-seed={self.sim.seed}{bug}")

    def check_views(self) -> None:
        """View agreement: one view id, one member list; each incarnation of a member
        installs growing view ids (a fresh incarnation starts its own, from its first view)."""
        seen = {}
        for m in self.sim.members:
            last = None
            for ev in m.events:
                if type(ev) is not ViewChange:
                    continue
                v = ev.view
                if ev.previous is None:
                    last = None
                key = (v.view_id.coord.uid, v.view_id.id)
                members = tuple(a.uid for a in v.members)
                if seen.setdefault(key, members) != members:
                    self.fail(f"view {v.view_id} disagrees: {v.members} at {m.name}")
                if last is not None and not last < v.view_id:
                    self.fail(f"{m.name} installed {v.view_id} after {last}")
                last = v.view_id

    def delivered_by(self, m) -> dict:
        """sender uid -> list of k delivered by m's current incarnation, in order."""
        out = defaultdict(list)
        for msg in m.delivered:
            stream, k = _parse(msg.payload)
            out[stream].append(k)
        return out

    def ordered_by_view(self, m) -> dict:
        """view id -> the ordered messages m delivered while in that view, in order."""
        out, current = defaultdict(list), None
        for ev in m.events:
            if isinstance(ev, ViewChange):
                current = _vid(ev.view)
            elif isinstance(ev, Message) and ev.payload[20:] == b"O":
                out[current].append(_parse(ev.payload))
        return out

    def check_total_order(self) -> None:
        """Members deliver the ordered messages of a view in that view's one order (its
        sequencer's), and no member delivers one twice. (Across a partition, messages the
        minority's old sequencer ordered in its last view may be ordered again by the
        primary component: the minority cannot tell the others in time.)"""
        seen = {}
        for m in self.sim.members:
            every = [x for seq in self.ordered_by_view(m).values() for x in seq]
            if len(set(every)) != len(every):
                self.fail(f"{m.name} delivered an ordered message twice")
            for vid, seq in self.ordered_by_view(m).items():
                for name, other in seen.get(vid, ()):
                    common = set(seq) & set(other)
                    if [x for x in seq if x in common] != [x for x in other if x in common]:
                        self.fail(f"{m.name} and {name} delivered the ordered messages of view "
                                  f"{vid[1]} in different orders")
                seen.setdefault(vid, []).append((m.name, seq))

    def check_primary(self) -> None:
        """At most one primary component per primary view-id, each holding a majority of the
        one before it; view-id 0 outside one; no message was sent outside a primary
        component."""
        self.check_one_primary_per_id()
        self.check_primary_lineage()
        for m in self.sim.members:
            for v in self._views(m):
                if not v.primary and v.primary_id != 0:
                    self.fail(f"{m.name}: non-primary {v.view_id} has primary id {v.primary_id}")
        if not all(self.primary_at_send):
            self.fail("a message was sent outside a primary component")

    def check_one_primary_per_id(self) -> None:
        """MySQL Group Replication's rule: a primary id names one primary component. Every
        view any member installed as primary with id P has the same view id and the same
        members (merged views included), and each member incarnation's primary ids only
        grow, so no id is given again to a later component."""
        by_pid = {}
        for m in self.sim.members:
            last = {}  # incarnation uid -> its last primary id
            for v in self._views(m):
                if not v.primary:
                    continue
                members = frozenset(a.uid for a in v.members)
                other = by_pid.setdefault(v.primary_id, (m.name, _vid(v), members))
                if other[1:] != (_vid(v), members):
                    self.fail(f"primary id {v.primary_id} given to two components: view "
                              f"{other[1][1]} of {len(other[2])} at {other[0]} and view "
                              f"{v.view_id.id} of {len(members)} at {m.name}")
                me = next((u for u in m.uids if u in members), None)
                if me is not None:
                    if v.primary_id <= last.get(me, 0):
                        self.fail(f"{m.name}'s primary id went from {last[me]} to "
                                  f"{v.primary_id}")
                    last[me] = v.primary_id

    def check_primary_lineage(self) -> None:
        """Dynamic voting's rule, as MySQL Group Replication's primary component keeps it:
        the primary components form one lineage, each holding a majority of the one before
        it, counted by member incarnation (a fresh incarnation of a member is not that
        member), in primary-id order (the order the next state exchange goes by: the last
        primary is the highest id any member knows). Two components with one id follow
        each other by view id, so they must hold a majority of each other too. With the
        even-split tie-breaker, exactly half is enough (two halves of one component both
        primary still break the lineage: the later holds none of the earlier)."""
        comps = {}  # (primary id, view id) -> (a member that installed it, its member uids)
        for m in self.sim.members:
            for v in self._views(m):
                if v.primary:
                    comps.setdefault((v.primary_id, _vid(v)[::-1]),
                                     (m.name, frozenset(a.uid for a in v.members)))
        lineage = sorted(comps.items())
        for (before, (_, old)), (key, (name, new)) in zip(lineage, lineage[1:]):
            if 2 * len(old & new) < len(old) + (not self.tie_breaker):
                self.fail(f"primary id {key[0]} (view {key[1][0]} of {len(new)}, at {name}) "
                          f"holds {len(old & new)} of the {len(old)} members of primary id "
                          f"{before[0]} before it, no majority")

    def check_fifo(self, gaps: bool = False) -> None:
        """Per sender in order without duplicates; ``gaps`` allows the holes a partition
        leaves (messages sent to the other side are not delivered here)."""
        for m in self.sim.members:
            for sender, ks in self.delivered_by(m).items():
                for a, b in zip(ks, ks[1:]):
                    if b != a + 1 and not (gaps and b > a):
                        self.fail(f"{m.name} delivered {a} then {b} from {_short(sender)}")

    def check_no_loss(self, survivors, crashed=frozenset()) -> None:
        """Every survivor delivered every message sent in a view it was in; but those of the
        senders in ``crashed`` (uids), whose last messages may have reached nobody."""
        for m in survivors:
            got = self.delivered_by(m)
            me = m.address.uid
            for sender, k, members in self.sent:
                if me in members and sender[:16] not in crashed and \
                        k not in set(got.get(sender, ())):
                    self.fail(f"{m.name} never delivered message {k} of {_short(sender)}")

    def check_last_view(self, members) -> None:
        """``members`` are all in one view now, quiet for a while: each delivered the same
        messages in it, among them every message sent in it. No view change is left to
        excuse a member that stopped delivering."""
        final, sets = None, {}
        for m in members:
            got, vid = set(), None
            for ev in m.events:
                if isinstance(ev, ViewChange):
                    vid, got = _vid(ev.view), set()
                elif isinstance(ev, Message):
                    got.add(_parse(ev.payload))
            if final is not None and vid != final:
                self.fail(f"{m.name} is in view {_vname(vid)}, not {_vname(final)}")
            final, sets[m.name] = vid, got
        first = members[0].name
        for name, got in sets.items():
            if got != sets[first]:
                diff = [(_short(s), k) for s, k in sorted(got ^ sets[first])[:3]]
                self.fail(f"{name} and {first} delivered different messages in the last "
                          f"view {_vname(final)}: {len(got ^ sets[first])}, e.g. {diff}")
        missing = {(s, k) for (s, k, _), vid in zip(self.sent, self.sent_in)
                   if vid == final} - sets[first]
        if missing:
            self.fail(f"{len(missing)} messages sent in the last view {_vname(final)} were "
                      f"not delivered, e.g. {[(_short(s), k) for s, k in sorted(missing)[:3]]}")

    def check_virtual_synchrony(self) -> None:
        """Members that move together from view V to view V' (as members of V') delivered
        the same messages while in V."""
        seen = {}
        for m in self.sim.members:
            current, got = None, set()
            for ev in m.events:
                if isinstance(ev, ViewChange):
                    nxt = _vid(ev.view)
                    if current is not None and _member_of(ev, m):
                        key = (current, nxt)
                        other = seen.setdefault(key, (m.name, frozenset(got)))
                        if other[1] != got:
                            diff = sorted(other[1] ^ got)[:5]
                            self.fail(f"{m.name} and {other[0]} moved from {current} to {nxt} "
                                      f"having delivered different messages, e.g. {diff}")
                    current, got = nxt, set()
                elif isinstance(ev, Message):
                    got.add(_parse(ev.payload))

    def statuses_by_view(self, m) -> dict:
        """view id -> (the recovery statuses m answered at the view, {uid: status}; then
        [(uid, status)] per ordered announcement it applied in that view, in order)."""
        out, current = {}, None
        for ev in m.events:
            t = type(ev)
            if t is MemberStatuses:
                current = tuple(ev.view_id)
                out[current] = ({a.uid: s for a, s in ev.statuses.items()}, [])
            elif t is StatusAnnounced:
                key = tuple(ev.view_id)
                if key != current or ev.index != len(out[key][1]) + 1:
                    self.fail(f"{m.name} applied status announcement {ev.index} of view "
                              f"{key[1]} out of its place")
                out[key][1].append((ev.member.uid, ev.status))
        return out

    def check_statuses(self) -> None:
        """MySQL Group Replication's FR-1 for the recovery status: every member that
        completed a view's state exchange answers the same statuses at the view, then
        applies the same ordered announcements in the same order (each a prefix: one that
        leaves the view early applies fewer)."""
        seen = {}  # view id -> (name, at the view, the longest announcements seen)
        for m in self.sim.members:
            for vid, (first, anns) in self.statuses_by_view(m).items():
                name, other, longest = seen.setdefault(vid, (m.name, first, anns))
                if other != first:
                    diff = {_short(u): (other.get(u), first.get(u))
                            for u in other.keys() | first.keys() if other.get(u) != first.get(u)}
                    self.fail(f"{name} and {m.name} answered different recovery statuses at "
                              f"view {vid[1]}: {diff}")
                n = min(len(anns), len(longest))
                if anns[:n] != longest[:n]:
                    self.fail(f"{name} and {m.name} applied the status announcements of view "
                              f"{vid[1]} differently: {_statuses(longest[:n])} vs "
                              f"{_statuses(anns[:n])}")
                if len(anns) > len(longest):
                    seen[vid] = (m.name, first, anns)

    def check_recovery(self) -> None:
        """For a group whose members all register get_state and set_state: a member that
        joined an existing group is RECOVERING in the state exchange of its first view (if
        it completed it), its donor (that view's first member) DONOR unless it is not done
        recovering itself or is leaving (ERROR and OFFLINE are final); a member whose recovery failed left, saying why (or crashed, or
        its application had asked it to leave already: ``leave``).
        Members are not restarted (their events are read as one incarnation's)."""
        for m in self.sim.members:
            exchanges = self.statuses_by_view(m)
            for first in _first_views(m):
                if len(first) == 1 or isinstance(first, MergeView):
                    continue
                at = exchanges.get(_vid(first))
                if at is None:
                    continue  # its first round was interrupted
                me = next(u for u in m.uids if u in {a.uid for a in first.members})
                donor = first.members[0].uid
                if at[0].get(me) != RECOVERING:
                    self.fail(f"{m.name} joined in view {first.view_id.id} as "
                              f"{at[0].get(me)}, not {RECOVERING}")
                if at[0].get(donor) not in (DONOR, RECOVERING, ERROR, OFFLINE):
                    self.fail(f"the donor of {m.name} in view {first.view_id.id} was "
                              f"{at[0].get(donor)}, not {DONOR}")
            if any(type(ev) is StateTransferFailed for ev in m.events):
                if m.alive:
                    self.fail(f"{m.name}'s recovery failed, yet it stays")
                if m.left is not None and m.name not in self.asked_to_leave and \
                        not m.left.reason.startswith("recovery failed: "):
                    self.fail(f"{m.name}'s recovery failed, but it left saying "
                              f"{m.left.reason!r}")

    def check_group(self) -> None:
        """What a group that crashed, split and healed keeps: view agreement, virtual
        synchrony, total order, the primary component, FIFO (with the holes a partition
        leaves), no internal errors, the same recovery statuses everywhere."""
        self.check_views()
        self.check_virtual_synchrony()
        self.check_total_order()
        self.check_primary()
        self.check_fifo(gaps=True)
        self.check_errors()
        self.check_statuses()

    def check_errors(self) -> None:
        for m in self.sim.members:
            if m.stack.errors:
                self.fail(f"{m.name} had {m.stack.errors} internal errors")

    def check_all(self, survivors, crashed=frozenset()) -> None:
        self.check_views()
        self.check_virtual_synchrony()
        self.check_fifo()
        self.check_no_loss(survivors, crashed)
        self.check_errors()
