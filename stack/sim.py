"""Deterministic simulator: the same Stack objects on a virtual clock and network.

Every random choice (link delay, loss, duplication, reordering, member UUIDs, protocol
randomness) comes from one seed, so a run replays exactly. Failures name the seed:
``reproduce with --sim-seed=N``. Users can run their configuration at 1,000 members here.
``Simulation(seed, buggify=True)`` adds FoundationDB-style perturbations from the same seed
(stack/sim_buggify.py): skewed timers, stalled members, view-change races, zombie packets,
loss bursts.
"""
from __future__ import annotations

import contextlib
import gc
import heapq
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from .config import StackConfig
from .discovery.bootstrap import seeded_uid
from .discovery.store import MemoryStore, ScheduledStoreClient
from .layer import MCAST
from .message import ORDERED, Message
from .sim_buggify import Buggify, BuggifyOptions
from .view import Left, View, ViewChange


class SimTimeout(AssertionError):
    """``run_until`` ran out of virtual time; the message names the seed."""


@contextlib.contextmanager
def collector_paused():
    """Within the block (or the decorated function) CPython's collector makes no automatic
    collection (restored after; ``gc.collect()`` still collects). A large simulation holds
    millions of long-lived objects, which every automatic collection traverses, yet makes
    next to no cyclic garbage while it runs (a full collection after every phase of a
    300-member gossip run, a crash, a join storm and a partition, found 8 unreachable
    objects; of a 200-member views run, 56): with the thresholds raised to a collection of
    the young every million allocations, the collections were still a fifth of the CPU time
    of a 1,000-member views formation. Nothing simulated depends on the collector."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class SimOptions:
    loss: float = 0.0
    """Probability that one packet copy is dropped."""
    duplicate: float = 0.0
    """Probability that one packet copy is delivered twice."""
    reorder: float = 0.0
    """Probability that one packet copy is held back (delivered after later ones)."""
    delay_s: tuple = (0.0002, 0.001)
    """Uniform one-way delay range per packet copy."""
    reorder_delay_s: float = 0.01
    """Extra delay, up to this much, for a copy chosen for reordering."""
    store_delay_s: tuple = (0.001, 0.005)
    """Uniform latency of one call to the simulated discovery store (``Simulation.store``)."""
    clock_skew_s: float = 0.0
    """Each member's wall clock (``Host.wall``) is off by up to this much either way, drawn
    per member (from its own stream of the seed: other draws are unchanged); 0: every wall
    clock reads the simulated time."""
    history: bool = True
    """Keep every member's views, events and deliveries (``SimMember.views``/``events``/
    ``delivered``), as tests read them. False keeps none (``SimMember.view`` is still the
    current view): large simulations would otherwise hold every view ever installed."""


class _Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _WatchConn:
    """A simulated FD_SOCK watch connection (``SimWatch.open``): TCP between two members,
    so no loss; it closes when its target's process ends."""
    __slots__ = ("sim", "watcher", "w_inc", "target", "t_inc", "uid", "on_up", "on_lost",
                 "state", "bye")

    def __init__(self, sim, watcher, target, uid, on_up, on_lost):
        self.sim, self.watcher, self.w_inc, self.target = sim, watcher, watcher.incarnation, target
        self.t_inc, self.uid, self.on_up, self.on_lost = 0, uid, on_up, on_lost
        self.state, self.bye = "connecting", False

    def close(self) -> None:
        """The watcher closed it (a re-pick, its stack stopped)."""
        self.state = "closed"
        self.sim.watches.discard(self)

    def report(self, fn, *args) -> Callable[[], None]:
        """``fn(*args)`` on the watcher, unless its incarnation ended or it closed this."""
        def run() -> None:
            w = self.watcher
            if w.alive and w.incarnation == self.w_inc and self.state != "closed":
                if fn is self.on_lost:
                    self.close()
                fn(*args)
        return run


class SimWatch:
    """``Host.watch`` of a simulated member (stack/fd_sock.py): connections modelled by
    ``Simulation`` from its own stream of the seed. A crashed member's connections close at
    once (the watcher hears "reset" one link delay later, "left" after a BYE); across a
    partition or a cut link nothing arrives, as from a host that vanished;
    ``Simulation.reset_watch`` is a middlebox resetting one connection."""

    def __init__(self, member: "SimMember"):
        self.member = member

    def open(self, phys, uid: bytes, on_up, on_lost) -> _WatchConn:
        return self.member.sim._watch_open(self.member, phys, uid, on_up, on_lost)

    def leaving(self) -> None:
        self.member.sim._watch_bye(self.member)


class SimMember:
    """One simulated member. Survives crash/restart: ``address`` changes per incarnation."""

    def __init__(self, sim: "Simulation", index: int, cluster: str, name: str,
                 config: StackConfig):
        self.sim, self.index, self.cluster, self.name, self.config = sim, index, cluster, name, config
        self.local_phys = (f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}", 7800)
        self.incarnation = 0
        self.stack = None
        self.alive = False
        self.views: list[View] = []
        self.delivered: list[Message] = []
        self.events: list = []
        self.left: Optional[Left] = None
        self.uids: list[bytes] = []  # the UUID of every incarnation
        self.on_message: Optional[Callable[["SimMember", list], None]] = None
        self.stalled_until = 0.0  # buggify: nothing of this member runs before this time
        self.race_until = 0.0     # buggify: its packets take longer until this time
        skew = sim.options.clock_skew_s
        self.clock_offset = random.Random(f"{sim.seed}:clock:{index}").uniform(-skew, skew) \
            if skew else 0.0
        # Host.store: this member's client of the simulation's one discovery store
        self.store = ScheduledStoreClient(sim.store, self._schedule_own, sim._store_delay)
        self.watch = SimWatch(self)  # Host.watch: FD_SOCK's connections

    # Host protocol ------------------------------------------------------------------------
    def now(self) -> float:
        return self.sim.now

    def wall(self) -> float:
        return self.sim.now + self.clock_offset

    def call_later(self, delay: float, fn: Callable[[], None]) -> _Timer:
        if self.sim.buggify is not None:
            delay = self.sim.buggify.timer_delay(delay)
        return self.sim._schedule(delay, fn, self)

    def _schedule_own(self, delay: float, fn: Callable[[], None]) -> _Timer:
        """Something that runs on this member (a store call's callback): a stall holds it."""
        return self.sim._schedule(delay, fn, self)

    def emit(self, dest: Any, data: bytes) -> None:
        self.sim._transmit(self, dest, data)

    def deliver(self, item: Any) -> None:
        keep = self.sim.options.history
        if keep:
            self.events.append(item)
        if type(item) is ViewChange:
            if keep:
                self.views.append(item.view)
            if self.sim.buggify is not None:
                self.sim.buggify.view_installed(self, self.sim.now)
        elif type(item) is Left:
            self.left = item
            self.sim._schedule(0, self._stop_after_flush)

    def _stop_after_flush(self) -> None:
        """Runs after the stack's pending flush (e.g. the last VIEW_ACK) went out."""
        self.stack.stop()
        self.alive = False
        self.sim._watch_closed(self)

    def deliver_messages(self, batch: list) -> None:
        if self.sim.options.history:
            self.delivered.extend(batch)
            self.events.extend(batch)
        if self.on_message is not None:
            self.on_message(self, batch)

    # user API -----------------------------------------------------------------------------
    @property
    def address(self):
        return self.stack.local

    @property
    def view(self) -> Optional[View]:
        return self.stack.view if self.stack is not None else None

    def send(self, payload: Any, dest=None, ordered: bool = False) -> None:
        """Like Channel.send, without waiting: raises NotPrimary outside a primary
        component (check ``writable`` first)."""
        self.stack.send(Message(dest, payload, ORDERED if ordered else 0))

    @property
    def writable(self) -> bool:
        return self.alive and self.stack.writable

    def writable_to(self, dest) -> bool:
        """Whether a send to ``dest`` (None: a multicast) would go without waiting."""
        return self.alive and self.stack.writable_to(dest)

    def leave(self) -> None:
        self.stack.leave()

    def _boot(self) -> None:
        self.incarnation += 1
        rng = random.Random(f"{self.sim.seed}:{self.index}:{self.incarnation}")
        uid = seeded_uid(self.config, self.cluster, self.name, fresh=self.incarnation > 1)
        self.stack = self.config.build(self.cluster, self.name, self, rng, uid=uid)
        self.uids.append(self.stack.local.uid)
        self.alive, self.left = True, None
        self.stack.start()
        self.stack.connect()

    def __repr__(self) -> str:
        return f"SimMember({self.name})"


class Simulation:
    force_buggify: Optional[bool] = None
    """Overrides every Simulation's ``buggify`` argument when set (the test option
    ``--sim-buggify=on|off``)."""

    def __init__(self, seed: int, options: Optional[SimOptions] = None,
                 buggify: "bool | BuggifyOptions" = False):
        self.seed = seed
        self.options = options or SimOptions()
        if self.force_buggify is not None:
            buggify = self.force_buggify and (buggify or True)
        self.buggify: Optional[Buggify] = None
        if buggify:
            self.buggify = Buggify(seed, buggify if isinstance(buggify, BuggifyOptions)
                                   else BuggifyOptions())
        self.rng = random.Random(seed)
        self.now = 0.0
        self.queue: list = []
        self.seq = 0
        self.members: list[SimMember] = []
        self.by_phys: dict = {}
        self.groups: Optional[dict] = None  # member -> partition index
        self.cuts: set = set()              # frozenset({a, b}) links that drop everything
        self.packets = 0
        self.dropped = 0
        self.store = MemoryStore()  # the discovery store; ``store.unavailable`` is an outage
        self._store_rng = random.Random(f"{seed}:store")  # store latency draws only
        self._watch_rng = random.Random(f"{seed}:watch")  # FD_SOCK connections' draws only
        self.watches: set = set()  # established _WatchConn
        self.watch_connect_timeout_s = 1.0  # a connect across a partition fails after this

    def _store_delay(self) -> float:
        return self._store_rng.uniform(*self.options.store_delay_s)

    def add_member(self, cluster: str, name: str, config: Optional[StackConfig] = None,
                   start: bool = True) -> SimMember:
        m = SimMember(self, len(self.members), cluster, name, config or StackConfig.local())
        if self.buggify is not None and not self.members:
            self._schedule(self.buggify.options.tick_s, self._buggify_tick)
        self.members.append(m)
        self.by_phys[m.local_phys] = m
        if start:
            m._boot()
        return m

    # clock ------------------------------------------------------------------------------
    def _schedule(self, delay: float, fn: Callable[[], None],
                  owner: Optional[SimMember] = None) -> _Timer:
        """``fn`` runs ``delay`` from now; ``owner``: the member it runs on (held while that
        member stalls)."""
        t = _Timer()
        self.seq += 1
        heapq.heappush(self.queue, (self.now + max(delay, 0.0), self.seq, fn, t, owner))
        return t

    def step(self) -> bool:
        """Run the next event. False when nothing is left."""
        while self.queue:
            when, _, fn, t, owner = heapq.heappop(self.queue)
            if fn is not None and t.cancelled:
                continue
            if owner is not None and owner.stalled_until > when:
                # a stalled member: everything of its runs at the stall's end, in order
                self.seq += 1
                heapq.heappush(self.queue, (owner.stalled_until, self.seq, fn, t, owner))
                continue
            self.now = when
            if fn is None:  # a packet's arrival at ``owner``: t = (incarnation, data, src)
                if owner.alive and owner.incarnation == t[0]:
                    owner.stack.receive(t[1], t[2])
            else:
                fn()
            return True
        return False

    def _buggify_tick(self) -> None:
        self.buggify.tick(self.live(), self.now)
        self._schedule(self.buggify.options.tick_s, self._buggify_tick)

    def run_for(self, seconds: float) -> None:
        end = self.now + seconds
        while self.queue and self.queue[0][0] <= end:
            self.step()
        self.now = max(self.now, end)

    def run_until(self, pred: Callable[[], bool], timeout_s: float = 30.0,
                  what: str = "condition") -> None:
        end = self.now + timeout_s
        while not pred():
            if not self.queue or self.queue[0][0] > end:
                self.now = max(self.now, end)
                bug = f" ({self.buggify.describe()})" if self.buggify is not None else ""
                raise SimTimeout(f"{what} not reached within {timeout_s}s of simulated time; "
                                 f"reproduce with --sim-seed={self.seed}{bug}")
            when = self.queue[0][0]
            while self.queue and self.queue[0][0] <= when:
                self.step()

    # network ----------------------------------------------------------------------------
    def _transmit(self, src: SimMember, dest: Any, data: bytes) -> None:
        if dest == MCAST:
            targets = [m for m in self.members if m is not src and m.alive]
        else:
            m = self.by_phys.get(tuple(dest))
            targets = [m] if m is not None and m.alive else []
        opt, rng, bug, now = self.options, self.rng, self.buggify, self.now
        lo, hi = opt.delay_s
        span = hi - lo  # (lo + span * random(): what rng.uniform(lo, hi) draws, inline)
        for t in targets:
            self.packets += 1
            if (self.groups is not None and self.groups.get(src) != self.groups.get(t)) or \
                    (self.cuts and frozenset((src, t)) in self.cuts):
                self.dropped += 1
                continue
            if opt.loss and rng.random() < opt.loss:
                self.dropped += 1
                continue
            if bug is not None and bug.bursts and bug.dropped(src, t, now):
                self.dropped += 1
                continue
            copies = 2 if opt.duplicate and rng.random() < opt.duplicate else 1
            for _ in range(copies):
                delay = lo + span * rng.random()
                if opt.reorder and rng.random() < opt.reorder:
                    delay += rng.uniform(0, opt.reorder_delay_s)
                if bug is not None:
                    delay += bug.packet_delay(src, now)
                # (as _schedule, without a handle or a closure: ``step`` delivers it, and
                # nobody cancels an arrival)
                self.seq += 1
                heapq.heappush(self.queue, (now + max(delay, 0.0), self.seq, None,
                                            (t.incarnation, data, src.local_phys), t))

    # faults -----------------------------------------------------------------------------
    def partition(self, *groups: Iterable[SimMember]) -> None:
        """Only members of the same group talk; members in no group are isolated."""
        self.groups = {}
        for i, g in enumerate(groups):
            for m in g:
                self.groups[m] = i
        for m in self.members:
            self.groups.setdefault(m, -1 - m.index)

    def cut(self, a: SimMember, b: SimMember) -> None:
        """Drop everything between a and b (both ways): partial, non-transitive partitions."""
        self.cuts.add(frozenset((a, b)))

    def heal(self) -> None:
        self.groups = None
        self.cuts = set()

    def crash(self, m: SimMember) -> None:
        if m.alive:
            m.stack.stop()
            m.alive = False
            self._watch_closed(m)
        m.alive = False

    # FD_SOCK's watch connections ----------------------------------------------------------
    def severed(self, a: SimMember, b: SimMember) -> bool:
        """A partition or a cut link lies between a and b."""
        return (self.groups is not None and self.groups.get(a) != self.groups.get(b)) or \
            (bool(self.cuts) and frozenset((a, b)) in self.cuts)

    def _watch_delay(self) -> float:
        return self._watch_rng.uniform(*self.options.delay_s)

    def _watch_open(self, m: SimMember, phys, uid: bytes, on_up, on_lost) -> _WatchConn:
        conn = _WatchConn(self, m, self.by_phys.get(tuple(phys)), uid, on_up, on_lost)
        self._schedule(2 * self._watch_delay(), lambda: self._watch_connect(conn), m)
        return conn

    def _watch_connect(self, conn: _WatchConn) -> None:
        t, w = conn.target, conn.watcher
        if conn.state == "closed" or not w.alive or w.incarnation != conn.w_inc:
            return
        if t is not None and self.severed(w, t):
            self._schedule(self.watch_connect_timeout_s,
                           conn.report(conn.on_lost, "unreachable"), w)
        elif t is None or not t.alive or t.stack.local.uid != conn.uid or \
                not t.config.fd_sock.enabled:
            conn.report(conn.on_lost, "refused")()  # nobody listens, or another member
        else:
            conn.state, conn.t_inc = "up", t.incarnation
            self.watches.add(conn)
            conn.on_up()

    def _watch_closed(self, m: SimMember) -> None:
        """m's process ended: the kernel closes its connections. Its watchers hear of it
        one link delay later, unless a partition or cut lies between (no FIN arrives: the
        connection stays open, silently dead, on the watcher's side)."""
        for conn in [c for c in self.watches if c.target is m or c.watcher is m]:
            if conn.watcher is m:
                self.watches.discard(conn)
            elif conn.t_inc == m.incarnation and not self.severed(conn.watcher, m):
                self.watches.discard(conn)
                self._schedule(self._watch_delay(), conn.report(
                    conn.on_lost, "left" if conn.bye else "reset"), conn.watcher)

    def _watch_bye(self, m: SimMember) -> None:
        for conn in self.watches:
            if conn.target is m and not self.severed(conn.watcher, m):
                conn.bye = True

    def reset_watch(self, watcher: SimMember, target: SimMember) -> int:
        """A middlebox resets the watch connections from ``watcher`` to ``target`` (both
        stay up and reachable); returns how many it reset."""
        hit = [c for c in self.watches if c.watcher is watcher and c.target is target]
        for conn in hit:
            self.watches.discard(conn)
            self._schedule(self._watch_delay(), conn.report(conn.on_lost, "reset"), watcher)
        return len(hit)

    def restart(self, m: SimMember) -> None:
        """A new incarnation: fresh UUID, same name and physical address."""
        self.crash(m)
        m._boot()

    def live(self) -> list[SimMember]:
        return [m for m in self.members if m.alive]
