"""The lease keeper of a process's work queue acquisitions ("Consumers that vanish").

Every acquisition through a queue handle (``actors/queue.py``) is leased to the calling
process (``CLIENT``, one id per process) for the handle's ``lease_s`` (default 30 s). While
the process holds deliveries, a daemon thread renews the lease on each member that holds
them every ``lease_s / 3``; a process that dies (a driver killed, a Spark worker gone) stops
renewing, and the member releases what that process held once the lease ran out, so another
consumer gets it (counted as ``lease_released`` in the member's queue info). A second daemon
thread settles again, at the same cadence, what the handles owe (``queue_owed.Owed``), so
that a settle waiting on an unreachable member never delays a renewal. Both threads end
when the process shuts Ray down.

``KEEPER`` is the process's one keeper; handles report what they acquired (``add``), what
left their hands (``done``) and what they owe (``watch``). The member side of a lease (its
deadline, the release when it runs out) is ``QueueHost`` in ``actors/queue.py``.
"""
from __future__ import annotations

import logging
import threading
import uuid
from typing import Any, Optional

from .queue_owed import Owed

CLIENT = uuid.uuid4().hex
"""This process's consumer id: its acquisitions live as long as it renews them."""

log = logging.getLogger("raygroups.queue")


class LeaseKeeper:
    """The process's lease keeper: counts the deliveries it holds per (group, member) and,
    while any are held, renews the lease on those members from a daemon thread; a second
    daemon thread settles again, at the same cadence, what the handles owe
    (``queue_owed.Owed``), so that a settle waiting on an unreachable member never delays a
    renewal."""

    def __init__(self):
        self.lock = threading.Lock()
        self.held: dict = {}     # (cluster, namespace, member) -> [group, count, lease_s]
        self.owed: dict = {}     # id(Owed) -> [Owed, lease_s] while it owes something
        self.thread: Optional[threading.Thread] = None        # renews
        self.owed_thread: Optional[threading.Thread] = None   # settles again
        self.wake = threading.Event()
        self.owed_wake = threading.Event()

    def _start(self, attr: str) -> None:
        """With the lock held: the thread ``attr`` ("thread", "owed_thread"), unless it runs."""
        t = getattr(self, attr)
        if t is None or not t.is_alive():
            step, wake, name = ((self.tick, self.wake, "raygroups-lease") if attr == "thread"
                                else (self.settle_tick, self.owed_wake, "raygroups-owed"))
            t = threading.Thread(target=self._run, args=(attr, step, wake), name=name,
                                 kwargs={"wait": self._next_settle() if attr == "owed_thread"
                                         else 0.0}, daemon=True)
            setattr(self, attr, t)
            t.start()

    def add(self, group: Any, member: str, n: int, lease_s: float) -> None:
        if n <= 0:
            return
        key = (group.cluster, group.namespace, member)
        with self.lock:
            entry = self.held.setdefault(key, [group, 0, lease_s])
            entry[1] += n
            entry[2] = min(entry[2], lease_s)
            self._start("thread")
        self.wake.set()

    def done(self, group: Any, member: str, n: int) -> None:
        if n <= 0:
            return
        key = (group.cluster, group.namespace, member)
        with self.lock:
            entry = self.held.get(key)
            if entry is not None:
                entry[1] -= n
                if entry[1] <= 0:
                    del self.held[key]

    def watch(self, owed: Owed, lease_s: float) -> None:
        """Settle ``owed`` again at each tick while it owes something."""
        with self.lock:
            entry = self.owed.setdefault(id(owed), [owed, lease_s])
            entry[1] = min(entry[1], lease_s)
            self._start("owed_thread")  # a tick from now, not at once: the member just refused

    def tick(self) -> Optional[float]:
        """Renew the leases; seconds to the next tick (None: nothing held). Raises
        SystemExit when Ray shuts down in this process."""
        with self.lock:
            todo = [(k[2], e[0], e[2]) for k, e in self.held.items()]
        for member, group, lease_s in todo:
            try:
                group._call("queue_renew", CLIENT, lease_s, member=member,
                            timeout=max(1.0, lease_s / 3))
            except SystemExit:
                raise
            except Exception as e:  # noqa: BLE001 - the member is gone or slow: its
                log.debug("lease renewal at %s failed: %s", member, e)  # deliveries are
        return min(lease for _m, _g, lease in todo) / 3 if todo else None  # requeued anyway

    def settle_tick(self) -> Optional[float]:
        """Settle again what the handles owe; seconds to the next tick (None: nothing
        owed). Raises SystemExit when Ray shuts down in this process."""
        with self.lock:
            books = [tuple(e) for e in self.owed.values()]
        for owed, _lease_s in books:
            try:
                owed.settle()
            except SystemExit:
                raise
            except Exception as e:  # noqa: BLE001 - the group is gone for now: next tick
                log.debug("settling again at %s failed: %s", owed.queue, e)
            with self.lock:
                if not len(owed):
                    self.owed.pop(id(owed), None)
        return min(lease for _o, lease in books) / 3 if books else None

    def _next_settle(self) -> float:
        """With the lock held: seconds to the settling thread's first tick."""
        return min((lease for _o, lease in self.owed.values()), default=15.0) / 3

    def _run(self, attr: str, step: Any, wake: threading.Event, wait: float = 0.0) -> None:
        """``step`` every time it says (5 s when it has nothing to do), after ``wait``."""
        import ray
        while True:
            if wait:
                wake.wait(wait)
                wake.clear()
            try:
                if not ray.is_initialized():
                    # the process shut Ray down: a call now would start Ray again (Ray's
                    # auto-init) and connect a process that is done with it
                    raise SystemExit
                wait = step()
            except SystemExit:  # Ray shuts down in this process: nothing to renew or settle
                with self.lock:
                    (self.held if attr == "thread" else self.owed).clear()
                    setattr(self, attr, None)
                return
            wait = 5.0 if wait is None else wait


KEEPER = LeaseKeeper()
"""This process's lease keeper (the handles of ``actors/queue.py`` report to it)."""
