"""SWIM: failure detection and gossip dissemination (SWIM and the gossip design, then Lifeguard).

Every probe interval a member pings the next member of a shuffled round-robin order. No ack
within the probe timeout: it asks ``indirect_probes`` others to ping the target for it
(PING_REQ); they forward the target's ack or answer NACK. Still nothing: a SUSPECT rumor.
The suspect refutes with KEEP-ALIVE (ALIVE with a higher incarnation), multicast at once and
gossiped; otherwise, when the suspicion timeout expires, REMOVE. Lifeguard: the suspicion
timeout starts long and shrinks as independent confirmations arrive (scaled by log N), and a
local-health score slows a member's own probing when it is the one missing acks.

Rumors (ADD, SUSPECT, ALIVE, REMOVE) carry the rounds they still have to travel, starting at
log2(2N)+1 (the gossip design), and their creation time; every round each holder piggybacks
them on its pings, acks and ``gossip_fanout`` extra messages. Received rumors are kept in a
bounded log ordered by creation time, and each ping offers a summary of one time frame to
sync (the gossip design's anti-entropy: swim_sync.py).

Modes: ``views`` probes the members of the installed view and sends MemberDead verdicts up
to GMS; ``gossip`` keeps SWIM's own member list (ADD on subscribe, REMOVE on unsubscribe or
death) and sends MembersChanged up. A joiner is a member once its contact answered with the
list. The dead are buried (a tombstone drops older news of them) and, unless they left,
reconnected: told of their death, they refute it and come back (swim_reconnect.py).
"""
from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import OrderedDict
from operator import attrgetter, itemgetter
from dataclasses import dataclass
from typing import Any, Optional

from .events import (AddPhysical, ConnectionLost, DiscoveryTargets, EmitTo, GetPhysical,
                     Leave, MemberDead, MembersChanged, Subscribe, Suspect, Unsuspect,
                     ViewInstalled)
from .layer import Layer
from .message import CONTROL, NO_LOOPBACK, Message
from .swim_reconnect import DeadMembers, Throttle
from .swim_sync import FRAME_ROUNDS, RumorLog, frame
from .view import carried

PING, ACK, PING_REQ, NACK, RUMORS, SUBSCRIBE, UNSUBSCRIBE, UNSUB_ACK, PUSH_PULL = range(9)
STATE_CHUNK = 400  # member entries per state message (one bundle holds ~1,000 short ones)
ADD, SUSPECT, ALIVE, REMOVE = range(4)
ALIVE_S, SUSPECT_S, DEAD_S = range(3)
LEFT = 1  # a REMOVE's extra when its member left (UNSUBSCRIPTION): not reconnected
VERIFIED = 2  # a REMOVE's extra after a lost watch connection that nobody could refute
# A rumor on the wire: [kind, uid, incarnation, extra, rounds left, creation time]; extra is
# the suspecter's uid (SUSPECT), [name, host, port] or None (ADD, ALIVE), None, LEFT or
# VERIFIED (REMOVE)


@dataclass
class SwimConfig:
    mode: str = "views"
    """"views": probe the view's members, verdicts go to GMS; "gossip": SWIM's own list is
    the membership (eventually consistent, for very large groups)."""
    probe_interval_s: float = 0.2
    """One probe per member per interval. Shorter detects sooner, costs more packets."""
    probe_timeout_s: float = 0.08
    """Wait for a direct ack this long (times 1 + local health) before probing indirectly."""
    indirect_probes: int = 3
    """Members asked to probe an unresponsive target for us (k)."""
    helpers_heard_within_rounds: int = 5
    """Indirect probes ask members we heard from within this many probe intervals, when
    there are at least k of them (else any live member): a member behind a partition
    answers nothing, and Lifeguard counts a helper's missing NACK against our own health.
    Chosen among all, helpers on the far side of a split raised the health of every member
    there, which slowed its probes up to ``max_health`` + 1 times: 300 gossip members split
    in halves buried the last of the far side 29.9 s after the split (the median pair at
    4.4 s); with this, 18.5 s (3.0 s), and 15.9 s (2.4 s) with a health that never rises.
    At rest a member hears from a few others each interval, so five give k to choose from.
    0: any live member."""
    gossip_fanout: int = 3
    """Extra rumor messages to random members per interval while rumors are in flight."""
    suspicion_min_s: float = 0.5
    """Suspicion timeout once enough members confirmed, times max(1, log10 N)."""
    suspicion_max_factor: float = 3.0
    """A fresh, unconfirmed suspicion lasts this many times the minimum."""
    suspicion_confirmations: int = 3
    """Independent confirmations that shrink the timeout to its minimum (k). Beyond k a
    member neither originates nor spreads another confirmation (memberlist)."""
    suspicion_verifiers: int = 8
    """Gossip mode: members that probe a suspect as soon as they hear of the suspicion (each
    with probability verifiers / N beyond that many members; 0: none), so that its
    confirmations come within a round or two. Every member of a large group doing so
    confirmed each suspicion 15 times where k = 3 count: a 300-member group split in halves
    originated 4,900 SUSPECT rumors for 300 suspects, 12 per member and suspect it had to
    hear. Views mode: every member that hears a suspicion verifies it. Each also pings every
    suspect every round until a view drops it (VERIFY_SUSPECT), so a later confirmation
    costs more pings than the rumors it saves: 500 members split for 60 s took 95 s of CPU
    with 8 verifiers against 79 s with all."""
    max_piggyback: int = 16
    """Rumors carried per message."""
    rumor_cache: int = 10_000
    """Received rumors kept for anti-entropy (the gossip design's default; the log holds
    up to twice this before it drops the oldest half)."""
    sync_page: int = 200
    """Rumors per page of an anti-entropy answer, which sends every rumor of the frame in as
    many pages as it takes. A rumor packs to about 50 bytes, 120 with a 64-character name:
    a page stays well within one 60 KB datagram."""
    max_health: int = 8
    """Ceiling of the local-health score (probe interval and timeout scale by 1 + score)."""
    announce_interval_s: float = 1.0
    """Gossip mode: a member announces itself to the discovery targets about this often,
    times N/8 beyond 8 members, so groups started apart (or split for long) find each
    other."""
    verify_window_s: float = 0.5
    """Views mode (JGroups VERIFY_SUSPECT): while a member is suspected we ping it directly
    every probe timeout, and we do not report it dead while we heard from it within this
    window, whoever declared it dead. Larger windows trade slower detection of a member
    that flaps for fewer false exclusions."""
    push_pull_interval_s: float = 10.0
    """Gossip mode: about this often a member exchanges its whole member list with one
    random member (memberlist's push-pull; scaled up by log2(N/32) beyond 32 members), which
    repairs what the rumors missed, e.g. a member that heard of no ADD in a join storm and
    whose anti-entropy window has passed. 0 disables it."""
    reconnect_interval_s: float = 1.0
    """Gossip mode: about this often a member tells one remembered dead member that it was
    declared dead (with probability min(1, dead / live): the group tries each about once
    per interval), so that after a partition heals it refutes and comes back. 0 disables
    it (messages from members held dead are still answered so)."""
    reconnect_for_s: float = 86_400.0
    """Gossip mode: how long a dead member is remembered for reconnection (Serf's
    reconnect timeout)."""
    reconnect_max: int = 256
    """Gossip mode: dead members remembered for reconnection at most (the longest dead
    forgotten first)."""
    report_interval_s: float = 0.05
    """Gossip mode: the member list goes up (a new view) at most this often. A change after
    a quiet spell goes up at once; the changes of a burst (a join storm, a partition's
    burials and its heal: O(N) changes each) are gathered into one view per interval, as
    each view costs O(N). 0: a view at the end of every turn that changed the list."""


class _Node:
    __slots__ = ("addr", "inc", "state", "timer", "since", "confirm", "heard")

    def __init__(self, addr, inc: int = 0):
        self.addr, self.inc, self.state = addr, inc, ALIVE_S
        self.timer, self.since, self.confirm = None, 0.0, _NO_CONFIRM
        self.heard = -1e9  # when we last received anything from it


class _Probe:
    __slots__ = ("target", "acked", "nacks", "asked", "verify", "due")

    def __init__(self, target):
        self.target, self.acked, self.nacks, self.asked = target, False, 0, 0
        self.verify = None  # a verification after a lost connection: the target's incarnation
        self.due = False    # (verification) the direct ping had its probe timeout


_uid = attrgetter("uid")  # Address order, compared in C
_state = attrgetter("state")
_NO_CONFIRM = frozenset()  # shared by every unsuspected node (an empty set each: 216 B)
_sent, _left = itemgetter(2), itemgetter(1)  # of a queue entry


def _later(floor: Optional[tuple], inc: int, ctime: float) -> tuple:
    """(incarnation, creation time): the higher of each, of ``floor`` and the one given."""
    return (inc, ctime) if floor is None else (max(floor[0], inc), max(floor[1], ctime))


class Swim(Layer):
    name = "swim"
    header_id = 7

    def __init__(self, config: SwimConfig):
        super().__init__(config)
        self.nodes: dict = {}
        self.listed: list = []  # gossip mode: the addresses of ``nodes`` in address order
        self.inc = 0
        self.active = False
        self.order: list = []
        self.health = 0
        self.seq = 0
        self.probes: dict[int, _Probe] = {}
        self.relays: dict[int, tuple] = {}
        self.queue: dict = {}  # rumor key -> [rumor, rounds left, sent this round, rounds unsent]
        self.seen: OrderedDict = OrderedDict()  # rumor key -> its creation time
        self.doubted: set = set()  # uids with a SUSPECT or REMOVE in ``seen`` (or once had)
        # views mode: uid -> (incarnation, creation time): the suspicions and removals of a
        # member a view took back were forgotten then (``_fresh``); any made no later, at no
        # higher incarnation, is stale, not news (``_apply``)
        self.stale: OrderedDict = OrderedDict()
        self.log = RumorLog(config.rumor_cache)
        self.tombstones: OrderedDict = OrderedDict()  # addr -> (incarnation, left)
        self.dead = DeadMembers(config.reconnect_max, config.reconnect_for_s)
        self.strangers = Throttle(config.reconnect_max)  # gossip mode: when each was synced
        self.contact = None  # gossip mode: the member we subscribe through, until it answers
        self.leaving = None
        self.changed = False  # a MembersChanged report is scheduled
        # views mode: the members made SUSPECT since the round last looked (some may be
        # no longer: the round drops those), so that a round is not a pass over every member
        self.suspected: set = set()
        self.reported = -1e9  # when the last one went up

    def start(self) -> None:
        self.ctx.schedule(self.config.probe_interval_s * self.ctx.rng.random(), self._round)
        if self.config.mode == "gossip":
            self.ctx.schedule(self.config.announce_interval_s * self.ctx.rng.random(),
                              self._announce)
            if self.config.push_pull_interval_s > 0:
                self.ctx.schedule(self.config.push_pull_interval_s * self.ctx.rng.random(),
                                  self._push_pull)
            if self.config.reconnect_interval_s > 0:
                self.ctx.schedule(self.config.reconnect_interval_s * self.ctx.rng.random(),
                                  self._reconnect)

    # -- rounds -------------------------------------------------------------------------
    def _round(self) -> None:
        cfg = self.config
        if self.active and self.nodes:
            self._probe()
            if self.config.mode == "views" and self.suspected:
                self._ping_suspects()
            if self.queue:
                # more rumors in flight than a message carries (a storm): more messages,
                # up to four times the fanout, so that each still goes out every round
                fanout = cfg.gossip_fanout * min(4, -(-len(self.queue) // cfg.max_piggyback))
                nodes = self.nodes
                addrs = list(nodes)  # (a list of keys is cheap; sample, then skip the dead)
                for dest in self.ctx.rng.sample(addrs, min(fanout, len(addrs))):
                    if nodes[dest].state != DEAD_S:
                        self._send(dest, [RUMORS, 0])
            for key in list(self.queue):
                entry = self.queue[key]
                if entry[2]:  # it went out this round: one round of its life is spent
                    entry[1] -= 1
                    entry[2] = 0
                else:  # no room for it this round (a storm of rumors): it waits, a while
                    entry[3] += 1
                if entry[1] <= 0 or entry[3] > entry[0][4]:
                    del self.queue[key]
        self.ctx.schedule(cfg.probe_interval_s * (1 + self.health), self._round)

    def _ping_suspects(self) -> None:
        """Views mode: a ping a round to each member we suspect (its ack refutes)."""
        nodes = self.nodes
        for addr in list(self.suspected):
            n = nodes.get(addr)
            if n is None or n.state != SUSPECT_S:
                self.suspected.discard(addr)  # refuted, dead or gone since
            else:
                self._send(addr, [PING, 0, None])

    def _note_suspect(self, addr) -> None:
        """Views mode: ``addr`` became SUSPECT, for the round to ping (gossip mode pings
        no suspects, and would only fill the set)."""
        if self.config.mode == "views":
            self.suspected.add(addr)

    def _verifies(self) -> bool:
        """Whether this member, hearing a fresh suspicion, probes the suspect next. Gossip
        mode: always in a group of up to ``suspicion_verifiers``, else with probability
        verifiers / N, so that about that many members verify each suspicion however large
        the group. Views mode: always (``SwimConfig.suspicion_verifiers``)."""
        m, size = self.config.suspicion_verifiers, len(self.nodes)
        return (self.config.mode == "views" or size <= m
                or self.ctx.rng.random() * size < m)

    def _next_target(self):
        while True:
            if not self.order:
                self.order = [a for a, n in self.nodes.items() if n.state != DEAD_S]
                if not self.order:
                    return None
                self.ctx.rng.shuffle(self.order)
            a = self.order.pop()
            n = self.nodes.get(a)
            if n is not None and n.state != DEAD_S:
                return a

    def _probe(self) -> None:
        target = self._next_target()
        if target is None:
            return
        self.seq += 1
        seq = self.seq
        self.probes[seq] = _Probe(target)
        self.stats["probes"] += 1
        self._send(target, [PING, seq, self._sync_summary()])
        timeout = self.config.probe_timeout_s * (1 + self.health)
        self.ctx.schedule(timeout, lambda: self._direct_timeout(seq))

    def _direct_timeout(self, seq: int) -> None:
        p = self.probes.get(seq)
        if p is None or p.acked:
            self.probes.pop(seq, None)
            return
        # (UUIDs compared: ``a != target`` is a Python call per member, and a partition
        # times out O(N) probes per round)
        tuid = p.target.uid
        live = [(a, n.heard) for a, n in self.nodes.items()
                if a.uid != tuid and n.state == ALIVE_S]
        k, window = self.config.indirect_probes, self.config.helpers_heard_within_rounds
        since = self.ctx.now() - window * self.config.probe_interval_s
        others = [a for a, heard in live if heard >= since] if window > 0 else []
        if len(others) < k:
            others = [a for a, _ in live]
        helpers = self.ctx.rng.sample(others, min(k, len(others)))
        p.asked = len(helpers)
        for h in helpers:
            self._send(h, [PING_REQ, seq, p.target.uid])
        self.stats["indirect_probes"] += len(helpers)
        wait = max(self.config.probe_interval_s * (1 + self.health) - self.config.probe_timeout_s,
                   2 * self.config.probe_timeout_s)
        self.ctx.schedule(wait, lambda: self._final_timeout(seq))

    def _final_timeout(self, seq: int) -> None:
        p = self.probes.pop(seq, None)
        if p is None or p.acked:
            return
        if p.asked and p.nacks < p.asked:
            self._health(+1)  # helpers did not even answer: we may be the slow one
        n = self.nodes.get(p.target)
        me = self.ctx.local.uid
        if n is not None and (n.state == ALIVE_S or
                              (n.state == SUSPECT_S and me not in n.confirm
                               and len(n.confirm) <= self.config.suspicion_confirmations)):
            # a fresh suspicion, or (Lifeguard) our own independent confirmation of one
            # already going round, which shortens its timeout everywhere; none once it has
            # all the confirmations that shorten it (memberlist: O(k) rumors per suspicion,
            # not one per member)
            self.stats["suspicions" if n.state == ALIVE_S else "confirmations"] += 1
            rumor = self._rumor(SUSPECT, n.addr.uid, n.inc, me)
            self._originate(rumor)
            self._send(n.addr, [RUMORS, 0], [rumor])  # tell the suspect directly

    def _health(self, delta: int) -> None:
        self.health = min(self.config.max_health, max(0, self.health + delta))

    # -- sending ------------------------------------------------------------------------
    def _send(self, dest, hdr: list, extra: Optional[list] = None) -> None:
        rumors = self._piggyback()
        if extra:
            rumors = extra + rumors
        hdr.append(rumors)
        self.below.down(Message(dest, b"", CONTROL, {7: hdr}))

    def _piggyback(self) -> list:
        if not self.queue:
            return []
        entries = self.queue.values()
        if len(self.queue) > self.config.max_piggyback:
            # the least sent this round first, then the freshest: when more rumors are in
            # flight than one message carries, successive messages carry different ones
            # (two stable sorts with keys read in C: the order of key (sent, -left))
            entries = sorted(sorted(entries, key=_left, reverse=True),
                             key=_sent)[:self.config.max_piggyback]
        out = []
        for e in entries:
            e[2] += 1
            r = list(e[0])
            r[4] = e[1]
            out.append(r)
        return out

    def _rounds(self) -> int:
        return int(math.log2(2 * (len(self.nodes) + 1))) + 1

    def _rumor(self, kind: int, uid: bytes, inc: int, extra) -> list:
        """A new rumor of ours: every round it has to travel, created now (wall clock)."""
        return [kind, uid, inc, extra, self._rounds(), self.ctx.wall()]

    def _self_rumor(self) -> list:
        return self._rumor(ALIVE, self.ctx.local.uid, self.inc, self._self_info())

    def _sync_summary(self) -> list:
        start, end = frame(self.ctx.wall(), self._rounds(), self.config.probe_interval_s)
        return [start, end, self.log.count(start, end)]

    # -- receiving ----------------------------------------------------------------------
    def up(self, batch: list) -> None:
        self.up_control(batch, self._handle)

    def _handle(self, m, h: list) -> None:
        sender = m.sender
        typ, seq = h[0], h[1]
        n = self.nodes.get(sender)
        if n is not None:
            n.heard = self.ctx.now()
        for rumor in h[-1]:
            self._apply(rumor, sender=sender)
        if n is None and sender in self.tombstones:  # (gossip mode: only it buries)
            self._held_dead(sender)
        elif n is None and typ in (PING, PING_REQ) and self.config.mode == "gossip":
            self._stranger(sender)
        if typ == PING:
            self._send(sender, [ACK, seq])
            if h[2] is not None:
                self._answer_sync(sender, *h[2])
        elif typ == ACK:
            p = self.probes.get(seq)
            if p is not None:
                p.acked = True
                if p.target == sender:
                    self._health(-1)
                else:
                    t = self.nodes.get(p.target)
                    if t is not None:
                        t.heard = self.ctx.now()
            relay = self.relays.pop(seq, None)
            if relay is not None:
                self._send(relay[0], [ACK, relay[1]])
            elif p is not None and p.target != sender:
                self.stats["indirect_acks"] += 1
        elif typ == PING_REQ:
            target = self.ctx.book.get(h[2])
            self.seq += 1
            self.relays[self.seq] = (sender, seq)
            self._send(target, [PING, self.seq, None])
            mine = self.seq
            self.ctx.schedule(self.config.probe_timeout_s, lambda: self._relay_timeout(mine))
        elif typ == NACK:
            p = self.probes.get(seq)
            if p is not None:
                p.nacks += 1
                if p.verify is not None:
                    self._verdict(seq)
        elif typ == SUBSCRIBE:
            self._on_subscribe(sender, h[2], h[3])
        elif typ == UNSUBSCRIBE:
            n = self.nodes.get(sender)
            self._originate(self._rumor(REMOVE, sender.uid, n.inc if n else 0, LEFT))
            self._send(sender, [UNSUB_ACK, 0])
        elif typ == UNSUB_ACK:
            if self.leaving is not None:
                self.leaving.cancel()
                self.leaving = None
                self.active = False
                self.above.up_event(MembersChanged(()))
        elif typ == PUSH_PULL:
            if sender == self.contact and not self.active:
                self._activate()  # our contact's answer to SUBSCRIBE: its member list
            self._merge_state(h[2])
            if h[1] and self.active and self.leaving is None:
                self._send_state(sender, PUSH_PULL, 0)
        elif typ != RUMORS:
            self.malformed()

    def _relay_timeout(self, mine: int) -> None:
        relay = self.relays.pop(mine, None)
        if relay is not None:
            self._send(relay[0], [NACK, relay[1]])

    def _answer_sync(self, sender, start: float, end: float, count: int) -> None:
        """A PING's frame summary: if we hold more rumors created in [start, end] than its
        sender, send it every one of them, a page per message. A frame longer than twice
        ours is cut to that (the answer stays bounded whatever a peer asks)."""
        start, end, count = float(start), float(end), int(count)
        if not (math.isfinite(start) and math.isfinite(end)):
            raise ValueError("sync frame")
        longest = 2 * FRAME_ROUNDS * self.config.probe_interval_s
        if end - start > longest:
            self.stats["sync_frames_cut"] += 1
            start = end - longest
        lo, hi = self.log.span(start, end)
        if hi - lo > count:
            pages = self.log.pages(lo, hi, self.config.sync_page)
            self.stats["sync_answers"] += 1
            self.stats["sync_pages"] += len(pages)
            for page in pages:
                self.below.down(Message(sender, b"", CONTROL, {7: [RUMORS, 0, page]}))

    # -- rumors -------------------------------------------------------------------------
    def _originate(self, rumor: list) -> None:
        """A rumor of our own making: applied even if an equal one was seen before."""
        self._apply(rumor, own=True)

    def _apply(self, rumor: list, own: bool = False, sender=None) -> None:
        kind, uid, inc, extra, left, ctime = rumor
        if type(inc) is not int or type(left) is not int or type(ctime) is not float:
            raise TypeError("rumor")
        if not math.isfinite(ctime):
            raise ValueError("rumor creation time")
        addr = self.ctx.book.get(uid)
        uid = addr.uid  # the interned bytes: cached keys keep no copy from each packet
        doubt = kind == SUSPECT or kind == REMOVE
        if doubt and not own and uid in self.stale:
            floor_inc, floor_ctime = self.stale[uid]
            if inc <= floor_inc and ctime <= floor_ctime:
                self.stats["stale_doubts_dropped"] += 1
                return
        key = (kind, uid, inc, extra if doubt else None)
        first = self.seen.get(key)
        if first is not None:
            if ctime < first:  # the same rumor, also made earlier (by another member)
                self.seen[key] = ctime
                self.log.restamp(key, first, ctime)
            if not own:
                if kind in (SUSPECT, REMOVE) and uid == self.ctx.local.uid:
                    self._deny(inc, sender)  # the sender still holds it: it needs our answer
                elif kind == ALIVE and self._refutes(addr, inc):
                    # seen while its member was not in our list yet (a joiner hears the
                    # group's rumors before its first view lists their members): the
                    # member's answer to a suspicion we took up since, the only one it
                    # will send (seed 15100480)
                    self.stats["late_refutations"] += 1
                    self._effect(kind, addr, inc, extra, sender)
                return
        else:
            self.seen[key] = ctime
            if doubt:
                self.doubted.add(uid)
            if len(self.seen) > self.config.rumor_cache:
                self.seen.popitem(last=False)
                if len(self.doubted) > self.config.rumor_cache:  # bounded like ``seen``
                    self.doubted = {k[1] for k in self.seen if k[0] == SUSPECT or k[0] == REMOVE}
            self.log.add(key, ctime, None if doubt else extra)
        if self._effect(kind, addr, inc, extra, sender) and left > 1:
            self.queue[key] = [[kind, uid, inc, extra, left, ctime], left - 1, 0, 0]

    def _effect(self, kind: int, addr, inc: int, extra, sender=None) -> bool:
        """Apply one rumor to the member list; True if it was news worth spreading."""
        local = self.ctx.local
        if addr == local:
            if kind in (SUSPECT, REMOVE):
                self._deny(inc, sender)
            return False
        n = self.nodes.get(addr)
        gossip = self.config.mode == "gossip"
        if kind in (ADD, ALIVE):
            if extra and (n is None or inc > n.inc):  # (a known incarnation: known address)
                self.ctx.book.get(addr.uid, str(extra[0]))
                self.below.down_event(AddPhysical(addr, (str(extra[1]), int(extra[2]))))
            if n is None:
                tomb = self.tombstones.get(addr)
                if not gossip or (tomb is not None and tomb[0] >= inc):
                    return False
                if tomb is not None:  # buried at an older incarnation: it refuted its death
                    del self.tombstones[addr]
                    self.dead.forget(addr)
                    self.stats["reconnected"] += 1
                self.nodes[addr] = _Node(addr, inc)
                insort(self.listed, addr, key=_uid)
                self._members_changed()
                return True
            if inc > n.inc:
                was = n.state
                n.inc, n.state = inc, ALIVE_S
                self._clear(n)
                if was != ALIVE_S:
                    self.above.up_event(Unsuspect(addr))
                return True
            return False
        if n is None and kind == REMOVE and extra == LEFT and addr in self.tombstones:
            self.tombstones[addr] = (self.tombstones[addr][0], True)  # it left after all
            self.dead.forget(addr)
            return False
        if n is None or inc < n.inc or n.state == DEAD_S:
            return False
        if kind == SUSPECT:
            if n.state == ALIVE_S or inc > n.inc:
                n.inc, n.state = inc, SUSPECT_S
                n.since, n.confirm = self.ctx.now(), {extra}
                self._note_suspect(addr)
                if self._verifies():
                    self.order.append(addr)  # probe it next: our verdict confirms or refutes
                self.above.up_event(Suspect(addr))
            elif extra in n.confirm:
                return False
            elif len(n.confirm) > self.config.suspicion_confirmations:
                # (the suspecter and k confirmations: its timeout is at the minimum)
                self.stats["confirmations_beyond_cap"] += 1
                return False  # neither spread nor re-armed
            else:
                n.confirm.add(extra)
            self._arm(n)
            return True
        if kind == REMOVE:
            if self._recently_heard(n, extra):
                self.stats["remove_overruled"] += 1
                if n.state == ALIVE_S:
                    n.state, n.since, n.confirm = SUSPECT_S, self.ctx.now(), {extra}
                    self._note_suspect(addr)
                    self._arm(n)
                return True  # still spread it: the member itself will refute
            self._declare_dead(n, "left" if extra == LEFT else
                               "connection lost" if extra == VERIFIED else "swim")
            return True
        return False

    def _refutes(self, addr, inc: int) -> bool:
        n = self.nodes.get(addr)
        return n is not None and inc > n.inc

    def _recently_heard(self, n: _Node, extra=None) -> bool:
        """Views mode: we heard from ``n`` too recently to take a REMOVE of it. For a
        VERIFIED one (its sender pinged it, with k others, for a probe timeout before it
        made it), anything heard within a probe timeout was sent while that went on."""
        window = self.config.probe_timeout_s if extra == VERIFIED else self.config.verify_window_s
        return self.config.mode == "views" and self.ctx.now() - n.heard < window

    def _deny(self, inc: int, sender) -> None:
        """A suspicion or a death of ours reached us. At our incarnation or above: refute
        with a higher one. Below it, the sender holds an incarnation of ours older than the
        one we refuted with: a member that left its view and came back starts there again
        at 0, and anti-entropy hands out old rumors, so a stale suspicion can look current
        to it and, unanswered, expire into a false exclusion. Answer the sender our current
        incarnation, alone: piggybacked rumors could carry its stale suspicion of us back
        and forth between two members that each hold one of the other. Gossip mode: a
        member that is no member (joining, or gone) has nothing to refute."""
        gossip = self.config.mode == "gossip"
        if self.leaving is not None or (gossip and not self.active):
            return
        if inc >= self.inc:
            self._refute(inc, sender if gossip else None)
        elif sender is not None and sender != self.ctx.local:
            self.stats["stale_suspicions_answered"] += 1
            alive = self._self_rumor()
            self.below.down(Message(sender, b"", CONTROL, {7: [RUMORS, 0, [alive]]}))

    def _refute(self, inc: int, teller=None) -> None:
        """Refute with a higher incarnation, multicast at once (the whole group learns in
        one hop) and, gossip mode, sent to the teller as well: one that held us dead after
        a partition is in no list of ours, and our multicast may not reach it."""
        self.inc = inc + 1
        self.stats["refutations"] += 1
        self._health(+1)
        rumor = self._self_rumor()
        self._originate(rumor)
        self.below.down(Message(None, b"", CONTROL | NO_LOOPBACK, {7: [RUMORS, 0, [rumor]]}))
        if teller is not None and teller != self.ctx.local:
            self.below.down(Message(teller, b"", CONTROL, {7: [RUMORS, 0, [rumor]]}))

    def _self_info(self) -> list:
        phys = self.below.down_event(GetPhysical())
        return [self.ctx.local.name, phys[0], phys[1]] if phys else None

    def _arm(self, n: _Node) -> None:
        cfg = self.config
        size = len(self.nodes) + 1
        lo = cfg.suspicion_min_s * max(1.0, math.log10(size))
        hi = lo * cfg.suspicion_max_factor
        c = len(n.confirm) - 1
        k = cfg.suspicion_confirmations
        timeout = max(lo, hi - (hi - lo) * math.log(c + 1) / math.log(k + 1))
        if n.timer is not None:
            n.timer.cancel()
        inc = n.inc
        n.timer = self.ctx.schedule(max(0.0, n.since + timeout - self.ctx.now()),
                                    lambda: self._suspicion_expired(n, inc))

    def _suspicion_expired(self, n: _Node, inc: int) -> None:
        n.timer = None
        if n.state == SUSPECT_S and n.inc == inc and self.nodes.get(n.addr) is n:
            if self._recently_heard(n):
                self.stats["suspicion_extended"] += 1
                n.timer = self.ctx.schedule(self.config.verify_window_s,
                                            lambda: self._suspicion_expired(n, inc))
                return
            self._originate(self._rumor(REMOVE, n.addr.uid, inc, None))

    def _clear(self, n: _Node) -> None:
        if n.timer is not None:
            n.timer.cancel()
            n.timer = None
        n.confirm = _NO_CONFIRM

    def _declare_dead(self, n: _Node, reason: str) -> None:
        self._clear(n)
        n.state = DEAD_S
        self.stats["dead"] += 1
        if self.config.mode == "gossip":
            addr, left = n.addr, reason == "left"
            del self.nodes[addr]
            del self.listed[bisect_left(self.listed, addr.uid, key=_uid)]
            self.tombstones.pop(addr, None)
            self.tombstones[addr] = (n.inc, left)
            if len(self.tombstones) > self.config.rumor_cache:
                self.tombstones.popitem(last=False)
            if not left:
                self.dead.remember(addr, self.below.down_event(GetPhysical(addr)),
                                   self.ctx.now())
            self._members_changed()
        else:
            self.above.up_event(MemberDead(n.addr, reason))

    def _members_changed(self) -> None:
        """Gossip mode: report the list once at the end of this turn, however many members
        one packet added or removed (a state answer or 16 piggybacked ADDs is one view,
        not one view per member: O(N) per view, so O(N) views would cost O(N^2)), and at
        most once per ``report_interval_s`` (a burst of changes: one view per interval)."""
        if self.active and not self.changed:
            self.changed = True
            wait = self.reported + self.config.report_interval_s - self.ctx.now()
            self.ctx.schedule(max(0.0, wait), self._report_members)

    def _report_members(self) -> None:
        self.changed = False
        self.reported = self.ctx.now()
        if self.active:
            # (kept in order as members come and go, and the set built from the hashes
            # ``nodes`` holds: each a C loop, where sorting and hashing N addresses took
            # most of a 1,000-member formation's CPU, O(N) views of N at each member)
            local, listed = self.ctx.local, self.listed
            i = bisect_left(listed, local.uid, key=_uid)
            members = (*listed[:i], local, *listed[i:])
            self.above.up_event(MembersChanged(members, frozenset(self.nodes).union((local,))))

    # -- FD_SOCK: a lost watch connection (stack/fd_sock.py) -----------------------------
    def _connection_lost(self, addr) -> bool:
        """Suspect ``addr`` at once (a SUSPECT multicast now, not piggybacked), then verify
        as a missed probe is verified, but all at once: ping it and ask ``indirect_probes``
        others to ping it. It is dead (a VERIFIED REMOVE, multicast) only when, a probe
        timeout on, it has not answered us and every helper answered NACK. An answer, to us
        or to a helper, leaves it to refute the suspicion as any; a helper that does not
        answer either (we may be the one cut off) leaves the suspicion to its timeout."""
        n = self.nodes.get(addr)
        if n is None or n.state == DEAD_S or not self.active or self.leaving is not None:
            return False
        cfg, me = self.config, self.ctx.local.uid
        self.stats["connection_lost"] += 1
        if n.state == ALIVE_S or me not in n.confirm:
            self.stats["suspicions" if n.state == ALIVE_S else "confirmations"] += 1
            rumor = self._rumor(SUSPECT, addr.uid, n.inc, me)
            self._originate(rumor)
            self.below.down(Message(None, b"", CONTROL | NO_LOOPBACK, {7: [RUMORS, 0, [rumor]]}))
        self.seq += 1
        seq = self.seq
        p = self.probes[seq] = _Probe(addr)
        p.verify = n.inc
        auid = addr.uid
        others = [a for a, o in self.nodes.items() if a.uid != auid and o.state == ALIVE_S]
        helpers = self.ctx.rng.sample(others, min(cfg.indirect_probes, len(others)))
        p.asked = len(helpers)
        self._send(addr, [PING, seq, None])
        for h in helpers:
            self._send(h, [PING_REQ, seq, addr.uid])
        self.stats["indirect_probes"] += len(helpers)
        self.ctx.schedule(cfg.probe_timeout_s, lambda: self._verify_due(seq))
        self.ctx.schedule(3 * cfg.probe_timeout_s, lambda: self._verify_end(seq))
        return True

    def _verify_due(self, seq: int) -> None:
        p = self.probes.get(seq)
        if p is not None:
            p.due = True
            self._verdict(seq)

    def _verdict(self, seq: int) -> None:
        p = self.probes[seq]
        if p.acked or not p.due or not p.asked or p.nacks < p.asked:
            return
        del self.probes[seq]
        n = self.nodes.get(p.target)
        if n is None or n.state == DEAD_S or n.inc != p.verify:
            return
        if self._recently_heard(n, VERIFIED):  # it spoke to us meanwhile (no ack of this)
            self.stats["verify_heard"] += 1
        else:
            self.stats["verified_dead"] += 1
            rumor = self._rumor(REMOVE, n.addr.uid, n.inc, VERIFIED)
            self.below.down(Message(None, b"", CONTROL | NO_LOOPBACK, {7: [RUMORS, 0, [rumor]]}))
            self._originate(rumor)

    def _verify_end(self, seq: int) -> None:
        p = self.probes.pop(seq, None)
        if p is not None:
            self.stats["verify_answered" if p.acked else "verify_inconclusive"] += 1

    # -- gossip-mode membership -----------------------------------------------------------
    def _subscribe(self, contact) -> None:
        """Join through ``contact`` (None: start alone): SUBSCRIBE again each probe interval
        until its answer, its member list, comes (``_activate``). Until then we are no
        member, listed nowhere and discovered as joining, so nobody joins through us: a
        joiner that listed itself at once, and stopped asking when another joined through
        it, founded a group of its own each time its SUBSCRIBE or the answer was lost."""
        if contact is None:
            self.contact = None
            self._activate()
        elif contact != self.contact:
            self.contact = contact
            self._ask(contact)

    def _ask(self, contact) -> None:
        if self.contact == contact and not self.active:
            self.below.down(Message(contact, b"", CONTROL, {7: [SUBSCRIBE, 0, self._self_info(),
                                                                 self.inc, []]}))
            self.ctx.schedule(self.config.probe_interval_s, lambda: self._ask(contact))

    def _activate(self) -> None:
        self.contact = None
        if not self.active:
            self.active = True
            self._members_changed()

    def _announce(self) -> None:
        """Gossip mode: now and then tell the discovery targets (the multicast group or the
        static hosts) that we are alive, so separately started groups find each other.
        Members announce less often as the group grows: constant load in total."""
        if self.active and self.leaving is None:
            rumor = self._self_rumor()
            for target in self.below.down_event(DiscoveryTargets()) or ():
                self.below.down_event(EmitTo(target, Message(None, b"", CONTROL,
                                                             {7: [RUMORS, 0, [rumor]]})))
        scale = max(1.0, len(self.nodes) / 8)
        self.ctx.schedule(self.config.announce_interval_s * scale * (0.5 + self.ctx.rng.random()),
                          self._announce)

    def _on_subscribe(self, sender, info, inc) -> None:
        """A newcomer: spread ADD, and hand it the whole list (seed: /membership/subscribe)
        as a push-pull state that wants no reply: its answer, a member from then on. Only a
        member answers (one still joining or leaving would make the newcomer a member of
        nothing); the newcomer asks again, or another member."""
        if not self.active or self.leaving is not None:
            self.stats["subscribe_ignored"] += 1
            return
        self._originate(self._rumor(ADD, sender.uid, int(inc), info))
        self._send_state(sender, PUSH_PULL, 0)

    # -- gossip mode: reconnecting the dead (swim_reconnect.py) ---------------------------
    def _reconnect(self) -> None:
        if self.active and self.leaving is None:
            addr = self.dead.pick(self.ctx.rng, len(self.nodes) + 1, self.ctx.now())
            if addr is not None and addr in self.tombstones:
                self.stats["reconnect_probes"] += 1
                self._tell_dead(addr, self.tombstones[addr][0])
        self.ctx.schedule(self.config.reconnect_interval_s * (0.5 + self.ctx.rng.random()),
                          self._reconnect)

    def _held_dead(self, addr) -> None:
        """A message from a member we buried: unless it left, tell it (at most once per
        probe interval); it refutes and comes back."""
        inc, left = self.tombstones[addr]
        if not left and self.active and self.leaving is None and \
                self.dead.may_tell(addr, self.ctx.now(), self.config.probe_interval_s):
            self.stats["told_dead"] += 1
            self._tell_dead(addr, inc)

    def _tell_dead(self, addr, inc: int) -> None:
        """Send ``addr`` its REMOVE at the incarnation we buried it with, after our own
        ALIVE (which teaches its transport our address before it answers us)."""
        rumors = [self._self_rumor(), self._rumor(REMOVE, addr.uid, inc, None)]
        msg = Message(addr, b"", CONTROL, {7: [RUMORS, 0, rumors]})
        phys = self.dead.phys(addr)
        if phys is None:
            self.below.down(msg)
        else:
            self.below.down_event(EmitTo(phys, msg))

    def _state(self) -> list:
        """[uid, incarnation, [name, host, port] or None] of us and every live member."""
        out = [[self.ctx.local.uid, self.inc, self._self_info()]]
        for a, n in self.nodes.items():
            if n.state != DEAD_S:
                p = self.below.down_event(GetPhysical(a))
                out.append([a.uid, n.inc, [a.name, p[0], p[1]] if p else None])
        return out

    def _push_pull(self) -> None:
        """Gossip mode: send our whole list to one random member, which merges it and
        answers with its own."""
        cfg = self.config
        if self.active and self.leaving is None:
            live = [a for a, n in self.nodes.items() if n.state != DEAD_S]
            if live:
                self.stats["push_pulls"] += 1
                self._send_state(self.ctx.rng.choice(live), PUSH_PULL, 1)
        size = len(self.nodes) + 1
        scale = 1 + max(0, math.ceil(math.log2(size) - 5)) if size > 32 else 1
        self.ctx.schedule(cfg.push_pull_interval_s * scale * (0.5 + self.ctx.rng.random()),
                          self._push_pull)

    def _stranger(self, addr) -> None:
        """Gossip mode: a probe from a member we do not list. It lists us, so it belongs to
        a group we do not know: two groups formed apart (a joiner founded its own while its
        contact's answer was lost, then others joined through it), or a join whose news
        missed us. Exchange whole lists with it at once (push-pull, at most once per probe
        interval per member) instead of waiting for a random push-pull to bridge the groups:
        each side's members then probe the other side's, which do the same, so the groups
        merge within a few probe rounds."""
        if self.active and self.leaving is None and addr != self.ctx.local and \
                self.strangers.may(addr, self.ctx.now(), self.config.probe_interval_s):
            self.stats["stranger_syncs"] += 1
            self._send_state(addr, PUSH_PULL, 1)

    def _send_state(self, dest, typ: int, want_reply: int) -> None:
        state = self._state()
        for k in range(0, len(state), STATE_CHUNK):
            self.below.down(Message(dest, b"", CONTROL,
                                    {7: [typ, want_reply if k == 0 else 0,
                                         state[k:k + STATE_CHUNK], []]}))

    def _merge_state(self, entries: list) -> None:
        """Members another member lists: unknown ones are added (unless we buried them at
        that incarnation), newer incarnations taken. A repair, not news: nothing is
        gossiped or cached as a rumor, and nobody is removed (failure detection does
        that)."""
        local = self.ctx.local
        for uid, inc, info in entries:
            if type(uid) is not bytes or type(inc) is not int:
                raise TypeError("state entry")
            addr = self.ctx.book.get(uid)
            if addr != local:
                self._effect(ALIVE, addr, inc, info)

    def _unsubscribe(self) -> None:
        """Tell one member at a time until one confirms (seed: UNSUBSCRIPTION)."""
        live = [a for a, n in self.nodes.items() if n.state != DEAD_S]
        if not live:
            self.active = False
            self.above.up_event(MembersChanged(()))
            return
        self.below.down(Message(self.ctx.rng.choice(live), b"", CONTROL, {7: [UNSUBSCRIBE, 0, []]}))
        self.leaving = self.ctx.schedule(self.config.probe_interval_s, self._unsubscribe)

    def _fresh(self, n: Optional[_Node], addr) -> _Node:
        """A view that (still or again) lists a member we had declared dead is the verdict
        of GMS or a merge: probe it again from scratch, and forget the rumors about it so
        that new suspicions at the same incarnation count again. So for a member a view
        lists that was not ours (excluded earlier, back by a merge at the same incarnation):
        its suspicions and removals are forgotten, or the confirmations of its next hang
        would be taken for the old ones and never shorten the suspicion (its refutations
        stay: one heard before the view listed it still answers a suspicion). Copies of the
        forgotten ones still travel (other members' queues, in packets): those, and any
        other made before it was taken back, are stale from then on, not news that would
        suspect or exclude the member again (``stale``; seeds 100911 and 202585 of the
        stall campaign: forgotten, re-learnt from a peer and spread again, a removal
        bounced between members for seconds after the merge until it excluded the member
        again)."""
        if n is None:
            if addr.uid in self.doubted:
                self._forget(addr.uid, (SUSPECT, REMOVE))
            return _Node(addr)
        if n.state == DEAD_S:
            self._forget(addr.uid, (ADD, SUSPECT, ALIVE, REMOVE))
            return _Node(addr, n.inc)
        return n

    def _forget(self, uid: bytes, kinds: tuple) -> None:
        """Forget the rumors of ``kinds`` about ``uid``: seen, and queued to spread. When
        suspicions or removals were among them, any made before now (ours, or the newest
        forgotten, whichever is later: one copy may carry a later creation time than the
        one seen first, or come from a clock ahead of ours) is stale from now on."""
        newest = None  # (incarnation, creation time) of the newest doubt forgotten
        for key in [k for k in self.seen if k[1] == uid and k[0] in kinds]:
            ctime = self.seen.pop(key)
            if key[0] == SUSPECT or key[0] == REMOVE:
                newest = _later(newest, key[2], ctime)
        for key in [k for k in self.queue if k[1] == uid and k[0] in kinds]:
            rumor = self.queue.pop(key)[0]
            if key[0] == SUSPECT or key[0] == REMOVE:
                newest = _later(newest, key[2], rumor[5])
        self.doubted.discard(uid)
        if newest is not None and uid != self.ctx.local.uid:  # (ours we answer: ``_deny``)
            self.stale[uid] = _later(self.stale.pop(uid, None), newest[0],
                                     max(newest[1], self.ctx.wall()))
            if len(self.stale) > self.config.rumor_cache:
                self.stale.popitem(last=False)

    # -- events -------------------------------------------------------------------------
    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is ViewInstalled and self.config.mode == "views":
            local, members = self.ctx.local, ev.view.members
            old = self.nodes
            nodes = carried(old, members, lambda a: self._fresh(None, a))
            nodes.pop(local, None)
            if DEAD_S in map(_state, nodes.values()):  # members we held dead, back
                for a, n in nodes.items():
                    if n.state == DEAD_S:
                        nodes[a] = self._fresh(n, a)
            self.nodes = nodes
            for a in old.keys() - nodes.keys():  # (in C, with the hashes the dicts hold)
                self._clear(old[a])
            self.active = local in ev.view
            self.order = list(filter(nodes.__contains__, self.order))
        elif t is MemberDead:
            n = self.nodes.get(ev.addr)
            if n is not None and n.state != DEAD_S:
                n.heard = -1e9  # an external, confirmed verdict (Ray): no verification wait
                self._originate(self._rumor(REMOVE, n.addr.uid, n.inc, None))
            return n is not None
        elif t is ConnectionLost:
            return self._connection_lost(ev.addr)
        elif t is Subscribe:
            if ev.contact is None and self.active:
                self._unsubscribe()
            elif ev.contact is not None or not self.active:
                self._subscribe(ev.contact)
            return None
        elif t is Leave:
            self.contact = None  # a joiner that leaves stops asking
        return self.below.down_event(ev)
