"""BUGGIFY for the simulator: perturbations that only a simulation turns on, from its seed.

FoundationDB's simulator enables each BUGGIFY site for a run with some probability and then
fires it at random; rare schedules that a plain random network almost never produces become
common. Here the sites live in the simulator (the layers are unchanged and run as they do on
real sockets), each enabled or not for a run by the seed:

- ``timer_skew``: a layer's timer fires early (down to ``early`` of its delay) or late (up to
  ``late`` times it, plus up to ``late_add_s``; zero-delay callbacks included, which moves
  them behind packets that arrive meanwhile);
- ``stall``: a member's event loop stalls for up to ``stall_max_s``: nothing it receives and
  no timer of its runs until the stall ends, then all of it in the original order;
- ``view_race``: for a moment after a member installs a view, what it sends takes up to
  ``race_s`` longer, so messages sent right after a view change reach the others before or
  after they installed it;
- ``zombie``: now and then one packet copy is delayed by ``zombie_s`` (beyond a flush and the
  view change after it), arriving in a later view;
- ``loss_burst``: one link (both directions) drops all or half of its packets for up to
  ``burst_max_s``.

The bounds are below failure detection's timers: a perturbation makes schedules rare, not
members dead (a stall of ``stall_max_s`` never looks like a crash). ``describe()`` names the
sites a run enabled; failing runs print it with their seed.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

SITES = ("timer_skew", "stall", "view_race", "zombie", "loss_burst")


@dataclass
class BuggifyOptions:
    enable_p: float = 0.5
    """Probability that a site is enabled for a run (FoundationDB: 25%)."""
    sites: tuple = SITES
    """The sites that may be enabled (a test may narrow them)."""
    timer_p: float = 0.1
    """With ``timer_skew``: share of timers that fire early or late."""
    early: float = 0.9
    """Earliest firing, as a share of the timer's delay."""
    late: float = 1.5
    """Latest firing, as a multiple of the timer's delay ..."""
    late_add_s: float = 0.01
    """... plus up to this much (zero-delay callbacks move behind arrivals)."""
    tick_s: float = 0.1
    """How often stalls and loss bursts may start (virtual seconds)."""
    stall_p: float = 0.1
    """With ``stall``: chance per tick that one random member stalls."""
    stall_max_s: float = 0.25
    """Longest stall (below failure detection's probe timeouts)."""
    race_p: float = 0.3
    """With ``view_race``: chance that a view installed at a member opens a race window."""
    race_s: float = 0.02
    """Longest extra delay of a member's packets right after it installed a view."""
    zombie_p: float = 0.002
    """With ``zombie``: chance per packet copy of a long delay."""
    zombie_s: tuple = (1.0, 5.0)
    """The long delay's range (beyond ``view_ack_timeout_s``: a flush ends meanwhile)."""
    burst_p: float = 0.05
    """With ``loss_burst``: chance per tick that a burst starts on one random link."""
    burst_max_s: float = 0.3
    """Longest burst."""


@dataclass
class Buggify:
    """The perturbations of one run, drawn from ``seed`` with a stream of their own."""
    seed: int
    options: BuggifyOptions = field(default_factory=BuggifyOptions)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}:buggify")
        o = self.options
        self.enabled = {s for s in SITES if s in o.sites and self.rng.random() < o.enable_p}
        self.bursts: dict = {}  # frozenset({a, b}) -> (until, drop probability)
        self.fired: dict = {s: 0 for s in SITES}

    def on(self, site: str) -> bool:
        return site in self.enabled

    def describe(self) -> str:
        on = ", ".join(f"{s} ({self.fired[s]}x)" for s in SITES if s in self.enabled)
        return f"buggify: {on or 'no site enabled'}"

    # -- hooks the simulator calls ---------------------------------------------------------
    def timer_delay(self, delay: float) -> float:
        o, rng = self.options, self.rng
        if "timer_skew" not in self.enabled or rng.random() >= o.timer_p:
            return delay
        self.fired["timer_skew"] += 1
        if rng.random() < 0.5:
            return delay * rng.uniform(o.early, 1.0)
        return delay * rng.uniform(1.0, o.late) + rng.uniform(0.0, o.late_add_s)

    def packet_delay(self, src: Any, now: float) -> float:
        """Extra delay of one packet copy from ``src`` (a race window or a zombie)."""
        o, rng, extra = self.options, self.rng, 0.0
        if src.race_until > now:
            extra += rng.uniform(0.0, o.race_s)
        if "zombie" in self.enabled and rng.random() < o.zombie_p:
            self.fired["zombie"] += 1
            extra += rng.uniform(*o.zombie_s)
        return extra

    def dropped(self, src: Any, dest: Any, now: float) -> bool:
        """Whether a loss burst on the link src-dest drops this copy."""
        burst = self.bursts.get(frozenset((src, dest)))
        if burst is None:
            return False
        until, p = burst
        if now >= until:
            del self.bursts[frozenset((src, dest))]
            return False
        return self.rng.random() < p

    def view_installed(self, member: Any, now: float) -> None:
        if "view_race" in self.enabled and self.rng.random() < self.options.race_p:
            self.fired["view_race"] += 1
            member.race_until = now + self.options.race_s

    def tick(self, live: list, now: float) -> None:
        """Maybe start a stall of one member and a loss burst on one link."""
        o, rng = self.options, self.rng
        if not live:
            return
        if "stall" in self.enabled and rng.random() < o.stall_p:
            m = rng.choice(live)
            m.stalled_until = max(m.stalled_until, now + rng.uniform(0.001, o.stall_max_s))
            self.fired["stall"] += 1
        if "loss_burst" in self.enabled and len(live) > 1 and rng.random() < o.burst_p:
            a, b = rng.sample(live, 2)
            p = rng.choice((0.5, 1.0))
            self.bursts[frozenset((a, b))] = (now + rng.uniform(0.01, o.burst_max_s), p)
            self.fired["loss_burst"] += 1
