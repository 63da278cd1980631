"""Gossip mode: finding members declared dead again (memberlist's reconnect, Serf's reap).

After a partition each side declares the other dead, and its tombstones then drop the other
side's ALIVE announcements at the incarnation they were buried with: without more, the two
sides never list each other again. So a member remembers the members failure detection
declared dead (not those that left), each with its physical address, for ``reconnect_for_s``
and at most ``reconnect_max`` of them (the longest dead forgotten first). About every
``reconnect_interval_s`` it picks one of them at random, with probability min(1, remembered /
live members) as Serf does (so the group as a whole tries each dead member about once per
interval, whatever its size), and tells it that it was declared dead: the REMOVE rumor about
it, sent to its remembered address, with the teller's own ALIVE (its address). A message
from a member held dead (its announcement, a ping, an answer) is answered the same way, at
most once per probe interval per member.

Beyond memberlist and Serf, which rejoin a dead member without telling it anything: the
member told refutes its death as SWIM refutes a suspicion, with a higher incarnation (to its
own list at once, and to the teller directly), and every member takes an ALIVE at a higher
incarnation over its tombstone. A member that answers is thus re-added on both sides with
a fresh incarnation, by the protocol's own rule, and the news travels as a rumor; the teller
is in turn a member the answerer held dead, so the answer's side learns it the same way.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Optional


class Throttle:
    """When each of at most ``keep`` members was last acted on (the longest ago forgotten
    first)."""

    def __init__(self, keep: int):
        self.keep = keep
        self._last: OrderedDict = OrderedDict()

    def may(self, addr: Any, now: float, every_s: float) -> bool:
        """True (and noted) unless ``addr`` was acted on less than ``every_s`` ago."""
        last = self._last.get(addr)
        if last is not None and now - last < every_s:
            return False
        self._last.pop(addr, None)
        self._last[addr] = now
        if len(self._last) > self.keep:
            self._last.popitem(last=False)
        return True

    def forget(self, addr: Any) -> None:
        """``addr`` was never acted on: the next ``may`` for it is True."""
        self._last.pop(addr, None)


class DeadMembers:
    """Recently dead members (address -> (physical address, death time)), oldest first,
    and when each member held dead was last told so."""

    def __init__(self, keep: int, for_s: float):
        self.keep, self.for_s = keep, for_s
        self.entries: OrderedDict = OrderedDict()
        self.told = Throttle(keep)

    def __len__(self) -> int:
        return len(self.entries)

    def remember(self, addr: Any, phys: Optional[tuple], now: float) -> None:
        self.entries.pop(addr, None)
        self.entries[addr] = (phys, now)
        if len(self.entries) > self.keep:
            self.entries.popitem(last=False)

    def forget(self, addr: Any) -> None:
        self.entries.pop(addr, None)
        self.told.forget(addr)

    def phys(self, addr: Any) -> Optional[tuple]:
        entry = self.entries.get(addr)
        return entry[0] if entry is not None else None

    def pick(self, rng: Any, live: int, now: float) -> Optional[Any]:
        """One remembered member to try, or None (none left, or not this time)."""
        entries = self.entries
        while entries and now - next(iter(entries.values()))[1] > self.for_s:
            entries.popitem(last=False)
        if not entries or rng.random() >= len(entries) / max(1, live):
            return None
        return rng.choice(list(entries))

    def may_tell(self, addr: Any, now: float, every_s: float) -> bool:
        """True (and noted) unless ``addr`` was told less than ``every_s`` ago."""
        return self.told.may(addr, now, every_s)
