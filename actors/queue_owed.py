"""What a work queue handle owes: settles to make again while the member is in the group.

A settle that a live member refused for now (QueueNotPrimary in a view change,
QueueOutcomeUnknown), or whose call did not get through (a timeout, a partition, the member
unreachable), leaves the deliveries held by that member, leased to this process, which
renews the lease for as long as it runs: they would never be redelivered. So the handle
owes them (``WorkQueueHandle.settle_many(..., owe=True)``, ``settle_keys(..., owe=True)``):
deliveries by (member, op) and acquisition keys by (member, op), settled again at each tick
of the process's lease keeper and on demand (``WorkQueueHandle.settle_owed``). A member's
"not held" answers (NotAcquired, StaleEpoch, NoSuchQueue) leave nothing to settle: an earlier
try took effect, or the delivery was requeued. Owed items of a member no longer in the group
(``group.member_names()``) are dropped: its holds are gone and the queue redelivers its jobs.

Bounded: at most ``limit`` items (deliveries plus keys, those being settled again included)
are owed at once; those beyond are not kept, counted in ``info()["over_limit"]`` and
logged. A delivery not kept is left to its lease: the member releases it once this process stops renewing there (it holds nothing
else there, or it ends), and then it is redelivered.
"""
from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any, Callable, Optional

from raygroups.stack.workqueue import NoSuchQueue, NotAcquired, StaleEpoch

HELD_NO_MORE = (NotAcquired, StaleEpoch, NoSuchQueue)
"""A member's answers that it does not hold a delivery (any more): nothing to settle again."""
MAX_OWED = 100_000
"""Items (deliveries plus keys) one queue's handles owe at most (the bound's default)."""

log = logging.getLogger("raygroups.queue")


def owes_again(error: Optional[BaseException]) -> bool:
    """Whether a settle that answered ``error`` is to be made again."""
    return error is not None and not isinstance(error, HELD_NO_MORE)


class Owed:
    """The owed settles of one queue of ``group`` (shared by a handle and its ``on()``
    handles). ``settle_tokens(member, op, deliveries)`` -> [None or the error] and
    ``settle_keys(member, op, keys)`` -> {"settled", ...}: the handle's settles, which owe
    again what is still refused. ``released(member, n)``: called for deliveries that leave
    the books other than through ``settle_tokens`` (the lease keeper's count);
    ``owing(self)``: called when something is owed (the lease keeper then ticks it)."""

    def __init__(self, group: Any, queue: str,
                 settle_tokens: Callable[[str, str, list], list],
                 settle_keys: Callable[[str, str, list], dict], limit: int = MAX_OWED,
                 released: Callable[[str, int], None] = lambda member, n: None,
                 owing: Callable[["Owed"], None] = lambda owed: None):
        self.group, self.queue, self.limit = group, queue, limit
        self.settle_tokens, self.settle_keys = settle_tokens, settle_keys
        self.released, self.owing = released, owing
        self.lock = threading.Lock()
        self.deliveries: dict = {}  # (member, op) -> {token: Delivery}
        self.keys: dict = {}        # (member, op) -> {key: None}
        self.retrying: Counter = Counter()  # ("d", member, token) or ("k", member, key)
        # being settled again: still owed to whoever asks meanwhile
        self.settled = 0            # settled again: deliveries, and jobs under keys
        self.gone = 0               # dropped: their member left the group
        self.over_limit = 0         # not kept: beyond the bound

    def __len__(self) -> int:
        with self.lock:
            return self._count()

    def _count(self) -> int:
        """With the lock held: what the bound counts (what is being retried included)."""
        return (sum(len(v) for v in self.deliveries.values()) +
                sum(len(v) for v in self.keys.values()) + len(self.retrying))

    def _owed(self, kind: str) -> set:
        """With the lock held: (member, token or key) of what is owed, being retried too."""
        books = self.deliveries if kind == "d" else self.keys
        return ({(m, x) for (m, _op), entry in books.items() for x in entry} |
                {(m, x) for c, m, x in self.retrying if c == kind})

    def info(self) -> dict:
        """{"deliveries", "keys"}: owed now (being settled again included); "settled",
        "gone", "over_limit": so far."""
        with self.lock:
            return {"deliveries": len(self._owed("d")), "keys": len(self._owed("k")),
                    "settled": self.settled, "gone": self.gone,
                    "over_limit": self.over_limit}

    def owes(self, delivery: Any) -> bool:
        """Whether ``delivery``'s settle is owed (or being settled again)."""
        with self.lock:
            return ("d", delivery.member, delivery.token) in self.retrying or any(
                delivery.token in ds for (m, _op), ds in self.deliveries.items()
                if m == delivery.member)

    def _room(self, n: int, what: str, member: str, op: str) -> int:
        room = max(0, self.limit - self._count())
        if n > room:
            self.over_limit += n - room
            log.warning("%s: %d %s to %s at %s not kept: %d settles owed already (the "
                        "bound)", self.queue, n - room, what, op, member, self.limit)
        return min(n, room)

    def add_deliveries(self, member: str, op: str, deliveries: list) -> int:
        """Owe ``deliveries`` (at ``member``); how many were kept (the rest: over the
        bound, and ``released``)."""
        if not deliveries:
            return 0
        with self.lock:
            entry = self.deliveries.setdefault((member, op), {})
            new = [d for d in deliveries if d.token not in entry]
            back = [d for d in new if ("d", member, d.token) in self.retrying]  # had room
            fresh = [d for d in new if ("d", member, d.token) not in self.retrying]
            kept = back + fresh[:self._room(len(fresh), "deliveries", member, op)]
            entry.update((d.token, d) for d in kept)
            if not entry:
                del self.deliveries[(member, op)]
        if len(kept) < len(new):
            self.released(member, len(new) - len(kept))
        if kept:
            self.owing(self)
        return len(kept)

    def add_keys(self, member: str, op: str, keys: list) -> int:
        """Owe ``keys`` (at ``member``); how many were kept."""
        with self.lock:
            entry = self.keys.setdefault((member, op), {})
            new = [k for k in keys if k not in entry]
            back = [k for k in new if ("k", member, k) in self.retrying]  # had room
            fresh = [k for k in new if ("k", member, k) not in self.retrying]
            kept = back + fresh[:self._room(len(fresh), "keys", member, op)]
            entry.update(dict.fromkeys(kept))
            if not entry:
                del self.keys[(member, op)]
        if kept:
            self.owing(self)
        return len(kept)

    def _take(self, only: Optional[list]) -> tuple:
        """What is owed (``only``: of these deliveries), out of the books and marked as
        being retried."""
        with self.lock:
            if only is None:
                ds, ks = self.deliveries, self.keys
                self.deliveries, self.keys = {}, {}
            else:
                want = {(d.member, d.token) for d in only}
                ds, ks = {}, {}
                for (member, op), entry in list(self.deliveries.items()):
                    mine = [t for t in entry if (member, t) in want]
                    if mine:
                        ds[(member, op)] = {t: entry.pop(t) for t in mine}
                        if not entry:
                            del self.deliveries[(member, op)]
            self.retrying.update(self._marks("d", ds) + self._marks("k", ks))
            return ds, ks

    @staticmethod
    def _marks(kind: str, books: dict) -> list:
        return [(kind, m, x) for (m, _op), entry in books.items() for x in entry]

    def _retried(self, kind: str, books: dict) -> None:
        with self.lock:
            self.retrying.subtract(self._marks(kind, books))
            self.retrying = +self.retrying  # without the zeros

    def _put_back(self, ds: dict, ks: dict) -> None:
        with self.lock:
            for k, entry in ds.items():
                self.deliveries.setdefault(k, {}).update(entry)
            for k, entry in ks.items():
                self.keys.setdefault(k, {}).update(entry)
        self._retried("d", ds)
        self._retried("k", ks)

    def settle(self, only: Optional[list] = None) -> int:
        """Settle what is owed again (``only``: of these deliveries); how many were settled
        (deliveries, and jobs under keys). What is still refused is owed again. Raises what
        ``group.member_names()`` raises (then nothing was taken)."""
        ds, ks = self._take(only)
        if not ds and not ks:
            return 0
        try:
            members = set(self.group.member_names())
        except BaseException:
            self._put_back(ds, ks)
            raise
        done = 0
        todo = [("d", k, e) for k, e in sorted(ds.items())] + \
               [("k", k, e) for k, e in sorted(ks.items())]
        for i, (kind, (member, op), entry) in enumerate(todo):
            try:
                done += self._again(kind, member, op, entry, member in members)
            except BaseException:  # Ray shuts down here: the untried stay owed
                self._retried(kind, {(member, op): entry})
                self._put_back({k: e for c, k, e in todo[i + 1:] if c == "d"},
                               {k: e for c, k, e in todo[i + 1:] if c == "k"})
                raise
            self._retried(kind, {(member, op): entry})
        with self.lock:
            self.settled += done
        return done

    def _again(self, kind: str, member: str, op: str, entry: dict, present: bool) -> int:
        """Settle one (member, op)'s owed deliveries or keys again; how many settled."""
        what = "deliveries" if kind == "d" else "keys"
        if not present:
            self._gone(member, op, len(entry), what)
            if kind == "d":
                self.released(member, len(entry))
            return 0
        if kind == "d":
            return sum(e is None for e in self.settle_tokens(member, op, list(entry.values())))
        try:
            return self.settle_keys(member, op, sorted(entry))["settled"]
        except Exception as e:  # noqa: BLE001 - owed again (settle_keys): the next try
            log.warning("%s: %s again at %s failed: %s", self.queue, op, member, e)
            return 0

    def _gone(self, member: str, op: str, n: int, what: str) -> None:
        with self.lock:
            self.gone += n
        log.info("%s: %s left the group; %d owed %s to %s dropped (requeued)", self.queue,
                 member, n, what, op)
