"""PRIMARY: primary component through state exchange after every view (MySQL
Group Replication WL#7332).

After each installed view every member multicasts a STATE message with its last primary
view-id, the members of that primary view, and its attributes (address, port, recovery
status). The view is held back from the application until the STATE of every member of the
view was delivered; then every member computes the same result: joiners are those whose
primary view-id is behind the maximum; the view is quorate when it holds a majority of the
last primary view's members (or, before any primary existed, a majority of
``expected_size``); the primary view-id becomes the maximum + 1 when quorate and 0
otherwise. A view change that interrupts the round restarts it (the awaited vector of the
seed). Application sends are refused outside a primary component: the stack stops being
writable, so channel sends wait (or fail at once with ``block_sends=False``). Every member
answers ``attributes()`` from the same STATE messages, so the answer is the same everywhere
(seed FR-1).

Large views (more than ``relay_above`` members) relay the exchange through the view's first
member: every member unicasts its state to it (REPORT), and once it has them all it
multicasts them in one STATES message, which every member (itself too) applies as if each
STATE had come on its own; the same states, the same result. That is O(N) messages per view
change instead of N multicasts to N members, and each distinct last-primary member list
travels once, as a difference from the view (usually a few joiners), not once per member.
REPORTs that arrive before the relay installed the view wait (a few views' worth, bounded).

Recovery status (MySQL Group Replication's node_status): each member announces its own in
its STATE; STATE_TRANSFER decides it for the view being agreed (``CollectExchange.status``):
a joiner that waits for the state is RECOVERING, its donor DONOR, anyone else ONLINE. A
change between views (the joiner got its state, the donor's joiners are done, a recovery
failed: ERROR, the member leaves: OFFLINE; the last two are final) is announced in total
order, as MySQL recomputes it from its ordered stream: the member unicasts it (ANNOUNCE) to
the view's first member, which multicasts it (STATUS) once its round is done; every member
applies the STATUSes of its last completed exchange's view in that one sender's FIFO order,
after the view. So every member of a view answers ``attributes()`` the same at the view
(the exchange's) and goes through the same sequence of answers after it, one per STATUS
(each member a prefix: one that leaves the view early applies fewer). A change made during
a round is sent once the round is done; an announcement a view change overtakes is lost,
and the next exchange carries the status instead (the member's next STATE is sent after it).

The even-split tie-breaker (``tie_breaker="store"``, Corosync qdevice's idea): a view that
holds exactly half of the last primary component (and a majority of every ambiguous attempt)
is primary only with that component's lease. Once the states are in, every member computes
the same tie; the view's first member creates the lease object in the discovery store if it
is absent (its name derived from the last primary id and members, its content this view's
half of them; one already holding the same half is a win too, read back: a re-run of the
exchange, joiners or not), through the host's ``StoreClient`` as store discovery does, and
multicasts the outcome (LEASE); every member waits for it as for a state and applies it
alike. Both halves of a split race for the same object and at most one create succeeds, so
at most one half is primary; a store that fails or does not answer within
``tie_breaker_timeout_s`` loses. No expiry: a lease is never taken over (see
docs/architecture.md).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, is_not, itemgetter, methodcaller
from typing import Any, Optional

from .discovery.store import StoreConflict
from .errors import NotPrimary
from .events import (CollectExchange, ExchangeResult, GetPhysical, Leave, MemberStatuses,
                     StatusAnnounced, Writable)
from .layer import Layer
from .message import INTERNAL, Message
from .view import ViewChange

STATE, REPORT, STATES, ANNOUNCE, STATUS, LEASE = 0, 2, 3, 4, 5, 6
_BYTES = {bytes}
_INTS = {int}
# a member's state (pid, members, attrs, extra, attempts), read in C
_pid, _attrs, _extra = itemgetter(0), itemgetter(2), itemgetter(3)
_bootstrap, _status_of = methodcaller("get", "bootstrap", True), methodcaller("get", "status")
_uid = attrgetter("uid")
EARLY_ROUNDS = 4  # views whose early REPORTs a relay keeps
ONLINE, RECOVERING, DONOR, OFFLINE, ERROR = "ONLINE", "RECOVERING", "DONOR", "OFFLINE", "ERROR"
STATUSES = (ONLINE, RECOVERING, DONOR, OFFLINE, ERROR)
FINAL = (OFFLINE, ERROR)  # a member that leaves, or whose recovery failed, stays so
TIE_BREAKERS = ("none", "store")


@dataclass
class PrimaryConfig:
    expected_size: int = 1
    """Members expected at the first formation: the first primary component needs a
    majority of them. 1 lets a lone founder be primary; set it to the cluster size to
    avoid a minority forming the first primary."""
    block_sends: bool = True
    """Outside a primary component a send waits (up to ``send_timeout_s``) for it to come
    back; False: it raises NotPrimary at once."""
    send_timeout_s: float = 30.0
    """How long a waiting send waits before raising NotPrimary."""
    max_held: int = 100_000
    """Deliveries held while a state exchange is in progress; beyond that they are dropped
    and counted (they arrive only from members that finished the round early)."""
    attributes: dict = field(default_factory=dict)
    """Extra attributes this member announces (merged with address, port, status)."""
    bootstrap: bool = True
    """This member may take part in a first start: a view whose members know of no primary
    component (every state says primary id 0) is primary when the members of it that may
    bootstrap are a majority of ``expected_size`` (each says so in its state, so every
    member decides alike). MySQL Group Replication bootstraps a group once:
    member actors run a process Ray restarted, or one launched into a group that is already
    running, with False, so fresh incarnations never start a new primary lineage beside the
    group's state (the campaign across Ray hosts lost acknowledged publishes that way)."""
    max_attempts: int = 16
    """Ambiguous attempts (views whose round was interrupted here but may have become
    primary at members that finished it) kept until this member is in a primary again;
    the oldest beyond this are forgotten."""
    relay_above: int = field(default=32, metadata={"agreed": True})
    """Views with more members than this relay the state exchange through their first
    member (O(N) messages per view change, one hop more); smaller ones exchange as MySQL
    Group Replication does, every member multicasting its state (N^2 deliveries, no
    relay). 0: always relay. Must be the same on every member: a joiner with another value
    is refused (``JoinRejected``, see ``GmsConfig.agreed``)."""
    tie_breaker: str = field(default="none", metadata={"agreed": "unless_default"})
    """What an even split decides (Corosync qdevice's idea, through the discovery store).
    "none": a view with exactly half of the last primary component is not primary (MySQL
    Group Replication's rule), so a 2+2 split, or a group of two that lost one, has no
    primary until the heal. "store": such a view is primary when it wins that component's
    lease: its first member creates ``<cluster>/primary-<id>-<digest>.lease`` in the
    discovery store if absent (the first creator wins; a later view with the same half of
    that component wins again) and multicasts the outcome in the exchange. Needs store discovery
    (``ConfigError`` otherwise). Must be the same on every member: a joiner with another
    value is refused (agreed; left out of the agreed settings at "none", so builds before
    this setting still join)."""
    tie_breaker_timeout_s: float = 10.0
    """How long a view's first member tries to take a lease (a failed store call is
    retried every ``tie_breaker_retry_s``) before the view is given up as not primary; the
    view's members wait for the outcome as for a state."""
    tie_breaker_retry_s: float = 0.5
    """Delay between tries of a lease whose store call failed."""


def _share(view, last: list) -> tuple:
    """(members of ``view`` among ``last``, the UUIDs of a primary view's members; how many
    ``last`` holds): what the majority rule and the tie-breaker count."""
    last_set = set(last)
    return sum(1 for m in view.members if m.uid in last_set), len(last_set)


class Primary(Layer):
    name = "primary"
    header_id = 9

    def __init__(self, config: PrimaryConfig):
        super().__init__(config)
        self.last_pid = 0
        self.last_members: list = []          # uids of the last primary view
        self.status = ONLINE
        self.round: Optional[dict] = None
        self.held: list = []
        self.primary: Optional[bool] = None
        # the last completed exchange: its view id (as on the wire), view, states and
        # highest pid; and the statuses its view's STATUSes announced since, in order
        self.attrs: tuple = (None, None, {}, 0)
        self.announced: dict = {}
        self.announcements = 0
        self.early: dict = {}                 # relay: vid -> {sender: REPORT} before its round
        # views whose round was interrupted here while they could have become primary at
        # members that finished it (ambiguous, as in dynamic voting): (coord uid, counter)
        # -> their members' uids; cleared once this member is in a primary view again
        self.attempts: dict = {}

    # -- the state exchange ------------------------------------------------------------------
    def up_event(self, ev: Any) -> Any:
        if type(ev) is ViewChange:
            self._start_round(ev)
            return None
        return self.above.up_event(ev)

    def _start_round(self, change: ViewChange) -> None:
        if self.round is not None:
            # interrupted (MySQL Group Replication: break the round, restart it for the new
            # view); the
            # application still sees the interrupted view, as not primary, with what was
            # delivered in it, so virtual synchrony holds
            old, self.round = self.round, None
            self.stats["rounds_interrupted"] += 1
            self._note_attempt(old)
            self._deliver(old["change"], False, 0)
        view = change.view
        self._set_primary(False)
        vid = [view.view_id.coord.uid, view.view_id.id]
        self.round = {"vid": vid, "change": change, "awaited": set(view.members), "states": {}}
        self.stats["rounds"] += 1
        if self.ctx.local not in view:
            self._finish()  # a view without us (we left or were excluded): nothing to agree
            return
        ask = CollectExchange({}, change)
        extra = self.above.up_event(ask)  # layers above add their state and our status
        if ask.status is not None and self.status not in FINAL:
            self.status = ask.status
        phys = self.below.down_event(GetPhysical())
        attrs = {"address": phys[0] if phys else None, "port": phys[1] if phys else None,
                 "status": self.status, "bootstrap": self.config.bootstrap,
                 **self.config.attributes}
        if len(view) > self.config.relay_above:
            relay = view.members[0]
            self.round["relay"] = relay
            hdr = [REPORT, vid, self.last_pid, self._delta(view), attrs, extra or {},
                   self._attempts_wire()]
            if relay == self.ctx.local:
                self.round["reports"] = self.early.pop(tuple(vid), {})
                self._on_report(relay, vid, hdr[2], hdr[3], attrs, hdr[5], hdr[6])
            else:
                self.below.down(Message(relay, b"", INTERNAL, {9: hdr}))
            return
        self.below.down(Message(None, b"", INTERNAL,
                                {9: [STATE, vid, self.last_pid, self.last_members, attrs,
                                     extra or {}, self._attempts_wire()]}))

    def up(self, batch: list) -> None:
        self._split(batch, self._pass, self._on_header)

    def _split(self, msgs: list, passing, handle) -> None:
        """The messages without our header go to ``passing`` in runs, each one with it to
        ``handle`` in its place between them (a malformed one is counted and dropped)."""
        out = []
        for m in msgs:
            h = m.headers.get(9)
            if h is None:
                out.append(m)
                continue
            if out:
                passing(out)
                out = []
            try:
                handle(m, h)
            except (TypeError, ValueError, IndexError, KeyError):
                self.malformed()
        if out:
            passing(out)

    def _on_header(self, m: Message, h) -> None:
        if h[0] == STATES:
            self._on_states(h[1], h[2], h[3])
            return
        if h[0] == LEASE:
            _, vid, won = h
            self._on_lease(m.sender, vid, won)
            return
        if h[0] == ANNOUNCE:
            _, vid, status = h
            self._on_announce(m.sender, vid, _status(status))
            return
        if h[0] == STATUS:
            if self.round is not None and h[1] == self.round["vid"]:
                self._pass([m])  # applied after the view, in its place among the held
            else:
                self._on_status(m, h)
            return
        typ, vid, pid, members, attrs, extra, *rest = h
        attempts = _attempts(rest[0] if rest else [])
        if typ == REPORT and type(pid) is int and type(attrs) is dict \
                and type(extra) is dict:
            self._on_report(m.sender, vid, pid, members, attrs, extra, attempts)
            return
        if typ != STATE or type(pid) is not int or type(attrs) is not dict \
                or type(extra) is not dict or type(members) is not list \
                or not set(map(type, members)) <= _BYTES:
            raise ValueError("not a STATE")
        self._on_state(m.sender, vid, pid, list(members), attrs, extra, attempts)

    def _pass(self, msgs: list) -> None:
        if self.round is None:
            self.above.up(msgs)
        elif len(self.held) + len(msgs) <= self.config.max_held:
            self.held.extend(msgs)
        else:
            self.stats["dropped_held"] += len(msgs)

    def _on_state(self, sender, vid, pid: int, members: list, attrs: dict, extra: dict,
                  attempts: list) -> None:
        r = self.round
        if r is None or vid != r["vid"] or sender not in r["awaited"]:
            self.stats["stale_states"] += 1
            return
        r["states"][sender] = (pid, members, attrs, extra, attempts)
        r["awaited"].discard(sender)
        if not r["awaited"]:
            self._finish()

    # -- the relayed exchange (views larger than relay_above) -------------------------------
    def _delta(self, view) -> Optional[list]:
        """Our last primary's members as a difference from ``view``: [indices of the view's
        members not in it, uids in it but not in the view]; None when there is none."""
        if not self.last_members:
            return None
        last = set(self.last_members)
        absent = [i for i, a in enumerate(view.members) if a.uid not in last]
        uids = {a.uid for a in view.members}
        return [absent, [u for u in self.last_members if u not in uids]]

    @staticmethod
    def _undelta(view, delta) -> list:
        """The uid list a ``_delta`` describes (raises TypeError/ValueError/IndexError when
        it is malformed)."""
        if delta is None:
            return []
        absent, extra = delta
        if type(absent) is not list or type(extra) is not list \
                or not set(map(type, absent)) <= _INTS or not set(map(type, extra)) <= _BYTES:
            raise ValueError("last-primary delta")
        n = len(view.members)
        if absent and not 0 <= min(absent) <= max(absent) < n:
            raise IndexError("last-primary delta")
        skip = set(absent)
        return [a.uid for i, a in enumerate(view.members) if i not in skip] + extra

    def _on_report(self, sender, vid, pid: int, delta, attrs: dict, extra: dict,
                   attempts: list) -> None:
        """The relay: one member's state. Once every member's is in, multicast them all."""
        r = self.round
        if r is None or vid != r["vid"]:
            if r is None or _newer(vid, r["vid"]):  # the relay has not installed it yet
                early = self.early.setdefault(tuple(vid), {})
                early[sender] = (pid, delta, attrs, extra, attempts)
                while len(self.early) > EARLY_ROUNDS:
                    del self.early[min(self.early, key=lambda v: v[1])]
            else:
                self.stats["stale_states"] += 1
            return
        if r.get("relay") != self.ctx.local or sender not in r["change"].view:
            self.stats["stale_states"] += 1
            return
        reports = r["reports"]
        reports[sender] = (pid, delta, attrs, extra, attempts)
        view = r["change"].view
        if len(reports) < len(view) or any(a not in reports for a in view.members):
            return
        deltas, entries = [], []
        for a in view.members:
            pid, delta, attrs, extra, attempts = reports[a]
            if delta in deltas:
                k = deltas.index(delta)
            else:
                k = len(deltas)
                deltas.append(delta)
            entries.append([pid, k, attrs, extra, attempts])
        r["reports"] = {}
        self.stats["states_relayed"] += 1
        self.below.down(Message(None, b"", INTERNAL, {9: [STATES, vid, entries, deltas]}))

    def _on_states(self, vid, entries, deltas) -> None:
        """Every member's state, relayed: applied as if each STATE had come on its own."""
        r = self.round
        if r is None or vid != r["vid"] or "relay" not in r:
            self.stats["stale_states"] += 1
            return
        view = r["change"].view
        if type(entries) is not list or type(deltas) is not list or len(entries) != len(view):
            raise ValueError("STATES")
        lists = [self._undelta(view, d) for d in deltas]  # each distinct list once
        n_lists = len(lists)
        states = {}
        for a, entry in zip(view.members, entries):
            # (O(N) per view at every member: the common case, no attempts, without a call)
            pid, k, attrs, extra, *rest = entry
            if type(pid) is not int or type(attrs) is not dict or type(extra) is not dict \
                    or type(k) is not int or not 0 <= k < n_lists:
                raise ValueError("STATES entry")
            raw = rest[0] if rest else []
            states[a] = (pid, lists[k], attrs, extra,
                         [] if type(raw) is list and not raw else _attempts(raw))
        r["states"] = states
        r["awaited"] = set()
        self._finish()

    def _finish(self) -> None:
        r = self.round
        view = r["change"].view
        states = r["states"]
        quorate, pid = False, 0
        if states:
            # (each O(N) per view at every member: read in C)
            top = max(states.values(), key=_pid)
            max_pid = top[0]
            may = sum(map(is_not, map(_bootstrap, map(_attrs, states.values())), repeat(False)))
            majority = self._quorate(view, max_pid, top[1], may)
            tie = not majority and self._tie(view, max_pid, top[1])
            if (majority or tie) and "past" not in r:
                r["past"] = self._past_attempts(view, states)
            quorate = (majority or tie) and r["past"]
            if quorate and tie:
                if "lease" not in r:  # the view's first member's lease decides; wait for it
                    self._await_lease(r, max_pid, top[1])
                    return
                quorate = r["lease"]
            # max + 1 (MySQL Group Replication), but never below the view's own counter: a
            # member whose
            # round for an earlier view was interrupted may not know that view became
            # primary elsewhere, and view counters only grow along a primary lineage
            pid = max(max_pid + 1, view.view_id.id) if quorate else 0
            # kept as received; ``attributes()`` builds its answer when asked (a dict per
            # member per member and view would be N^2 small objects in a large group)
            self.attrs = (r["vid"], view, states, max_pid)
            self.announced, self.announcements = {}, 0
        self.round = None
        if states:
            self.above.up_event(ExchangeResult(dict(zip(states, map(_extra, states.values()))),
                                               r["vid"]))
            self.above.up_event(MemberStatuses(
                dict(zip(states, map(_status_of, map(_attrs, states.values())))), r["vid"]))
        if quorate:
            self.last_pid, self.last_members = pid, list(map(_uid, view.members))
            self.attempts.clear()  # a primary with a majority of each: no longer ambiguous
            self.stats["primary_views"] += 1
        else:
            self.stats["non_primary_views"] += 1
            if states and max_pid > self.last_pid:
                # the last primary a member of this view knows is the one this member knows
                # from now on, as if it had been in it: else, once the members that told it
                # are gone, it and others who never saw a primary would count as a first
                # start and begin a second lineage beside the first one's survivors
                self.last_pid, self.last_members = max_pid, list(top[1])
                self.stats["last_primary_learned"] += 1
        self._deliver(r["change"], quorate, pid)
        for sender, status in r.get("forwards", ()):  # we order the view's announcements
            self._on_announce(sender, r["vid"], status)
        if r.get("announce"):
            self._forward_status()

    def _note_attempt(self, r: dict) -> None:
        """An interrupted round's view may have become primary at the members that finished
        it; this member cannot tell. Kept (bounded) when it could have, by what this member
        knows (its own and the states it got): later components need a majority of it too,
        else two components could each hold a majority of the last primary they know."""
        view = r["change"].view
        if self.ctx.local not in view:
            return
        known = list(r["states"].values()) + [(self.last_pid, self.last_members)]
        top = max(known, key=lambda s: s[0])
        if not self._quorate(view, top[0], top[1]) and not (
                self._tie(view, top[0], top[1]) and r.get("lease") is not False):
            return  # (a tie could have won its lease unless this member knows it lost)
        self.attempts[(view.view_id.coord.uid, view.view_id.id)] = \
            [a.uid for a in view.members]
        while len(self.attempts) > self.config.max_attempts:
            del self.attempts[min(self.attempts, key=lambda v: v[1])]

    def _attempts_wire(self) -> list:
        return [[list(v), uids] for v, uids in self.attempts.items()]

    def _past_attempts(self, view, states: dict) -> bool:
        """The view holds a majority of every ambiguous attempt its members report."""
        seen = {}
        for st in states.values():
            for vid, uids in st[4]:
                seen[vid] = uids
        have = {a.uid for a in view.members}
        for uids in seen.values():
            if 2 * sum(1 for u in uids if u in have) <= len(uids):
                self.stats["blocked_by_attempts"] += 1
                return False
        return True

    def _quorate(self, view, max_pid: int, last: list, may_bootstrap: Optional[int] = None
                 ) -> bool:
        """A majority of the last primary view's members (``last``, UUIDs) is in ``view``;
        before any primary existed (``max_pid`` 0), a majority of ``expected_size`` among
        the members that may bootstrap (``may_bootstrap`` of them; every member of an
        interrupted round's attempt, whose states are not all known here). Each planned
        member has at most one incarnation that may (the launch's), so two first starts
        share one, as two primary components share a member of the last one."""
        if max_pid == 0:
            n = len(view) if may_bootstrap is None else may_bootstrap
            if 2 * n > self.config.expected_size:
                return True
            if 2 * len(view) > self.config.expected_size:
                self.stats["first_start_refused"] += 1
            return False
        held, total = _share(view, last)
        return 2 * held > total

    # -- the even-split tie-breaker (primary.tie_breaker="store") ---------------------------
    def _tie(self, view, max_pid: int, last: list) -> bool:
        """The view holds exactly half of the last primary component (not a first start)
        and a lease may break the tie."""
        if self.config.tie_breaker != "store" or max_pid == 0:
            return False
        held, total = _share(view, last)
        return 2 * held == total

    def _await_lease(self, r: dict, max_pid: int, last: list) -> None:
        """Every member waits for the LEASE of the view's first member, which takes the lease
        of the primary component being split (``max_pid``, members ``last``)."""
        r["tie"] = True
        self.stats["ties"] += 1
        view = r["change"].view
        if view.members[0] != self.ctx.local:
            return
        digest = hashlib.sha256(b"".join(sorted(last))).hexdigest()[:16]
        name = f"primary-{max_pid}-{digest}.lease"
        # the holder: this view, and its half of the split component (what a re-run compares)
        last_set = set(last)
        half = sorted(a.uid.hex() for a in view.members if a.uid in last_set)
        data = json.dumps({"view": [r["vid"][0].hex(), r["vid"][1]], "half": half,
                           "members": sorted(a.uid.hex() for a in view.members)}).encode()
        store = getattr(self.ctx.host, "store", None)
        if store is None:
            self.stats["lease_no_store"] += 1
            self._lease_outcome(r, False)
            return
        deadline = self.ctx.now() + self.config.tie_breaker_timeout_s
        cluster = self.ctx.cluster

        def current() -> bool:
            return self.ctx.running and self.round is r and "sent" not in r

        def attempt() -> None:
            if current():
                self.stats["lease_puts"] += 1
                store.put(cluster, name, data, created, if_absent=True)

        def failed(error) -> None:
            self.stats["lease_errors"] += 1
            if self.ctx.now() + self.config.tie_breaker_retry_s < deadline:
                self.ctx.schedule(self.config.tie_breaker_retry_s, attempt)
            else:
                self._lease_outcome(r, False)

        def created(_, error) -> None:
            if not current():
                return
            if error is None:
                self._lease_outcome(r, True)
            elif isinstance(error, StoreConflict):  # taken: by a view with our members?
                store.get(cluster, name, read)
            else:
                failed(error)

        def read(result, error) -> None:
            if not current():
                return
            if error is not None or result is None:
                failed(error)
                return
            try:
                holder = json.loads(result[0])["half"]
            except (ValueError, TypeError, KeyError):
                self.stats["lease_malformed"] += 1
                holder = None
            self._lease_outcome(r, holder == half)

        def expire() -> None:
            if current():
                self.stats["lease_timeouts"] += 1
                self._lease_outcome(r, False)

        self.ctx.schedule(self.config.tie_breaker_timeout_s, expire)
        attempt()

    def _lease_outcome(self, r: dict, won: bool) -> None:
        """The first member tells the view (itself too) whether its lease was won."""
        r["sent"] = True
        self.stats["leases_won" if won else "leases_lost"] += 1
        self.below.down(Message(None, b"", INTERNAL, {9: [LEASE, r["vid"], won]}))

    def _on_lease(self, sender, vid, won) -> None:
        if type(won) is not bool:
            raise ValueError("LEASE")
        r = self.round
        if r is None or vid != r["vid"] or sender != r["change"].view.members[0] \
                or "lease" in r:
            self.stats["stale_leases"] += 1
            return
        r["lease"] = won  # may come before every state did: used once they are in
        if r.get("tie") and not r["awaited"]:
            self._finish()

    def _deliver(self, change: ViewChange, primary: bool, pid: int) -> None:
        """The view goes up with its verdict, then what arrived during its round."""
        view = dataclasses.replace(change.view, primary=primary, primary_id=pid)
        self._set_primary(primary)
        self.above.up_event(dataclasses.replace(change, view=view))
        held, self.held = self.held, []
        if held:
            self._split(held, self.above.up, self._on_status)

    # -- recovery status ----------------------------------------------------------------
    def _set_status(self, status: str) -> None:
        """This member's status changed: announce it (in total order, through the view's
        first member), or once the round in progress is done."""
        if self.status in FINAL or status == self.status:
            return
        self.status = status
        if self.round is not None:
            self.round["announce"] = True  # an interrupting view's STATE carries it instead
        else:
            self._forward_status()

    def _forward_status(self) -> None:
        vid, view = self.attrs[0], self.attrs[1]
        if vid is None or self.ctx.local not in view:
            return
        orderer = view.members[0]
        if orderer == self.ctx.local:
            self._on_announce(orderer, vid, self.status)
        else:
            self.below.down(Message(orderer, b"", INTERNAL, {9: [ANNOUNCE, vid, self.status]}))

    def _on_announce(self, sender, vid, status: str) -> None:
        """The view's first member: put a member's status change into the view's order
        (once its own round for the view is done; stale ones are dropped, the next exchange
        carries the status)."""
        r, local = self.round, self.ctx.local
        if r is not None:
            view = r["change"].view
            if vid == r["vid"] and view.members[0] == local and sender in view:
                forwards = r.setdefault("forwards", [])
                if len(forwards) < 4 * len(view):  # a few changes per member and view
                    forwards.append((sender, status))
                    return
        elif self.attrs[1] is not None and vid == self.attrs[0] and \
                self.attrs[1].members[0] == local and sender in self.attrs[1]:
            self.stats["statuses_ordered"] += 1
            self.below.down(Message(None, b"", INTERNAL, {9: [STATUS, vid, sender.uid, status]}))
            return
        self.stats["stale_announcements"] += 1

    def _on_status(self, m: Message, h: list) -> None:
        """A STATUS of the view of our last exchange, from its first member: applied."""
        _, vid, uid, status = h
        status = _status(status)
        view = self.attrs[1]
        if view is None or vid != self.attrs[0] or m.sender != view.members[0]:
            self.stats["stale_announcements"] += 1
            return
        member = next((a for a in view.members if a.uid == uid), None)
        if member is None:
            raise ValueError("STATUS of a non-member")
        self.announced[member] = status
        self.announcements += 1
        self.above.up_event(StatusAnnounced(vid, self.announcements, member, status))

    def _set_primary(self, primary: bool) -> None:
        if primary != self.primary:
            self.primary = primary
            self.above.up_event(Writable("primary", primary))

    def down(self, msg: Message) -> None:
        if not self.primary and not msg.flags & INTERNAL:
            raise NotPrimary("not in a primary component")  # never dropped silently
        self.below.down(msg)

    # -- queries ----------------------------------------------------------------------------
    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is MemberAttributes:
            _, _, states, max_pid = self.attrs
            ann = self.announced
            return {a: dict({k: v for k, v in s[2].items() if k != "bootstrap"},
                            primary_id=s[0], joiner=s[0] < max_pid,
                            **({"status": ann[a]} if a in ann else {}))
                    for a, s in states.items()}
        if t is SetStatus:
            self._set_status(_status(ev.status))
            return None
        if t is Leave:
            self._set_status(OFFLINE)
        return self.below.down_event(ev)


def _attempts(raw) -> list:
    """Attempts off the wire: [((coord uid, counter), [uids])]; ValueError when malformed."""
    if type(raw) is not list:
        raise ValueError("attempts")
    out = []
    for item in raw:
        vid, uids = item
        if type(uids) is not list or not set(map(type, uids)) <= _BYTES or len(vid) != 2 \
                or type(vid[0]) is not bytes or type(vid[1]) is not int:
            raise ValueError("attempts")
        out.append(((vid[0], vid[1]), uids))
    return out


def _status(status) -> str:
    if status not in STATUSES:
        raise ValueError(f"recovery status is one of {STATUSES}, not {status!r}")
    return status


def _newer(vid, than) -> bool:
    """View ids on the wire ([coord uid, counter]) compare by counter, then coordinator."""
    try:
        return (vid[1], vid[0]) > (than[1], than[0])
    except (TypeError, IndexError):
        return False


@dataclass
class MemberAttributes:
    """PRIMARY answers every member's attributes from the last state exchange."""


@dataclass
class SetStatus:
    """This member's recovery status changed (STATE_TRANSFER): announced to every member
    in total order, and in the next state exchange. OFFLINE and ERROR are final."""
    status: str
