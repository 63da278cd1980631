"""The work queue in the deterministic simulator: a ``Replica`` bound to a ``SimMember``.

    sim = Simulation(seed=7)
    members = [sim.add_member("g", f"m{i}") for i in range(3)]
    queues = [SimQueues(sim, m) for m in members]     # right after add_member
    sim.run_until(lambda: all(q.active for q in queues), 30)
    queues[0].create("jobs")
    req = queues[0].publish("jobs", b"job-1")
    sim.run_until(lambda: req.done, 5)

Deliveries reach the replica synchronously, in delivery order (views through the member's
``deliver``, messages through ``on_message``); its queue position goes into every view's
state exchange (``Stack.exchange_handlers``), and joiners get the state from the donor. What the replica sends goes out after the current event (never
re-entering the stack), and waits while the stack refuses (a flush, flow control).
``restart()`` restarts the member as a fresh incarnation with a fresh replica. ``skew_s``
sets the member's wall clock ahead of (or behind) the simulation's: the timestamps its
publishes carry and the cut-off of its EXPIREs. ``journal``: a ``SimJournal`` makes the
replica durable; it outlives the member, and a restart recovers the replica from it.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..errors import RaygroupsError
from ..view import ViewChange
from . import durable, ties
from .config import WorkQueueConfig
from .replica import Delivery, Phase, Replica, Request


class SimQueues:
    def __init__(self, sim: Any, member: Any, config: Optional[WorkQueueConfig] = None,
                 listener: Optional[Callable[["SimQueues", tuple], None]] = None,
                 skew_s: float = 0.0, journal: Any = None):
        self.sim, self.member = sim, member
        self.journal = journal
        self.skew_s = skew_s
        self.config = config or WorkQueueConfig()
        self.listener = listener
        self.replica: Optional[Replica] = None
        self.pending: list = []     # (dest, payload, ordered) taken from the replica
        self.scheduled = False
        self.incarnation = -1
        self.send_errors = 0
        deliver = member.deliver

        def on_deliver(item: Any) -> None:
            deliver(item)
            if type(item) is ViewChange and self._current():
                self.pending = []  # the old view's sends: its epoch is over
                self.replica.on_view(item.view)
                self._kick()

        member.deliver = on_deliver
        member.on_message = self._on_messages
        self._attach()
        self._tick()

    # -- wiring ---------------------------------------------------------------------------
    def _attach(self) -> None:
        m = self.member
        self.incarnation = m.incarnation
        recovered = None
        j = self.journal
        if j is not None:
            recovered = durable.replay(self.config, *j.recovered())
            if recovered.cut:
                j.restart_snapshot(recovered.image())
        self.replica = Replica(m.stack.local, self.config, clock=lambda: self.sim.now,
                               wall=lambda: self.sim.now + self.skew_s,
                               durable=j is not None, recovered=recovered,
                               ties=m.config.primary.tie_breaker == "store")
        if j is not None:
            replica = self.replica

            def on_durable(pos: tuple) -> None:
                if replica is self.replica and self._current():
                    replica.on_durable(pos)
                    self._kick()
            j.on_durable = on_durable
        if self.listener is not None:
            self.replica.state.listener = lambda ev: self.listener(self, ev)
        replica = self.replica

        def result(view_id: list, data: dict) -> None:
            replica.on_exchange(view_id, {a.uid: d for a, d in data.items()})
        m.stack.exchange_handlers(replica.exchange_data, result)
        self.pending = []

    def _current(self) -> bool:
        return self.member.alive and self.member.incarnation == self.incarnation

    def restart(self) -> None:
        """Crash the member if alive and boot a fresh incarnation with a fresh replica."""
        if self.replica is not None:
            self.replica.close()
        if self.journal is not None:
            self.journal.crash()
        self.sim.restart(self.member)
        self._attach()

    def crash(self) -> None:
        self.sim.crash(self.member)
        if self.journal is not None:
            self.journal.crash()

    def _on_messages(self, _member: Any, batch: list) -> None:
        if not self._current():
            return
        r = self.replica
        for msg in batch:
            r.on_message(msg)
        self._kick()

    # -- sending ----------------------------------------------------------------------------
    def _kick(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            self.member.call_later(0, self._flush)

    def _flush(self) -> None:
        self.scheduled = False
        if not self._current():
            self.pending = []
            return
        if self.journal is not None:
            self.journal.write(self.replica.take_journal(), self.member)
        self._ask_ties()
        self.pending.extend(self.replica.take_outgoing())
        m = self.member
        i = 0
        try:
            while i < len(self.pending):
                dest, payload, ordered = self.pending[i]
                m.send(payload, dest=dest, ordered=ordered)
                i += 1
        except RaygroupsError:
            self.send_errors += 1  # refused for now (flush, flow control): next tick
        del self.pending[:i]

    def _ask_ties(self) -> None:
        """The replica's even-split ties, from the simulation's discovery store (which
        outlives every member, as a directory or a bucket does)."""
        replica, m = self.replica, self.member
        ties.ask_all(replica, m.store, m.cluster,
                     lambda: replica is self.replica and self._current(), self._kick)

    def _tick(self) -> None:
        if self._current() and self.replica.phase is not Phase.CLOSED:
            self.replica.tick()
            self._flush()
        self.member.call_later(self.config.tick_s, self._tick)

    # -- API --------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self._current() and self.replica.phase is Phase.ACTIVE

    def _call(self, req: Request) -> Request:
        self._kick()
        return req

    def create(self, name: str, alternate: Optional[str] = None, callback=None, **limits) -> Request:
        """``limits``: max_depth, max_bytes, overflow, ttl_s."""
        return self._call(self.replica.create(name, alternate, limits.get("max_depth"),
                                              limits.get("max_bytes"), callback,
                                              limits.get("overflow"), limits.get("ttl_s")))

    def publish(self, queue: str, body: bytes, callback=None) -> Request:
        return self._call(self.replica.publish(queue, body, callback))

    def republish(self, queue: str, body: bytes, seq: int, callback=None) -> Request:
        return self._call(self.replica.republish(queue, body, seq, callback))

    def purge(self, queue: str, callback=None) -> Request:
        return self._call(self.replica.purge(queue, callback))

    def delete(self, queue: str, callback=None) -> Request:
        return self._call(self.replica.delete(queue, callback))

    def queues(self) -> dict:
        return self.replica.queues()

    def acquire(self, queue: str, n: int = 1, timeout_s: Optional[float] = None,
                callback=None, many: bool = False) -> Request:
        req = self.replica.acquire(queue, n, callback, many=many)
        if timeout_s is not None and not req.done:
            replica = self.replica

            def expire() -> None:
                if not req.done:
                    replica.cancel(req)
                    self._kick()
            self.member.call_later(timeout_s, expire)
        return self._call(req)

    def settle(self, op: str, delivery: Delivery, callback=None) -> Request:
        return self._call(self.replica.settle(op, delivery, callback))
