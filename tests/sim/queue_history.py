"""A Jepsen-style history of work queue calls in the simulator, and its checks.

Every call is recorded when invoked and when it completes: ok, fail (a definite error: it
did not take effect) or info (QueueOutcomeUnknown: it may or may not have). The checks, run
after the group healed and every queue was drained:

- no acknowledged publish is lost: every publish that completed ok was accepted (on its
  queue or, after a reject, on the alternate), exactly once;
- no message is accepted twice, and nothing accepted was never published;
- every reject that completed ok put the message on the alternate queue exactly once;
- every requeue is accounted for: nothing is left acquired or available at the end, so
  what crashed, partitioned or releasing consumers held came back and was accepted;
- FIFO per publisher to a consumer, except redelivered (requeued) messages (on the main
  queue: the alternate receives messages in the order they were rejected);
- every replica ends with the same state.

The lifecycle (``listen`` records what the replicas' state machines did, and where in the
order: an event counts when its epoch and batch belong to the lineage of states the final
one grew from, since a member cut off in a minority may have applied the tail of an epoch
that the next primary view never took, and was then given the others' state): a message that was
purged, on a deleted queue, or dropped (expired or overflowed with no alternate) is
accounted for, not lost; one expired or overflowed to the alternate must be accepted (or
removed) there. Still caught: a message accepted although it was purged, deleted or
dropped; a publish invoked after its queue's delete completed that completes ok (the queue
is never created again in these tests); a retried publish (``republish``, the same id)
refused as full although its first attempt was acknowledged and the message not yet
accepted (the duplicate check comes before the limits).
"""
from __future__ import annotations

from collections import Counter, defaultdict

from raygroups.stack.workqueue import QueueFull, QueueOutcomeUnknown


class QueueHistory:
    def __init__(self, sim, main: str, alternate: str):
        self.sim = sim
        self.main, self.alternate = main, alternate
        self.publishes: dict = {}               # mid -> "pending" | "ok" | "fail" | "info"
        self.accepted: Counter = Counter()      # mid -> accepts that completed ok
        self.accepted_on: dict = {}             # mid -> queue it was accepted from
        self.accept_info: set = set()           # accepts with an unknown outcome
        self.rejected: Counter = Counter()      # mid -> rejects ok (from the main queue)
        self.reject_info: set = set()
        self.order: dict = defaultdict(list)    # (consumer, queue, publisher) -> [seq]
        self.calls = Counter()
        self.events: list = []                  # (event, epoch, batches applied) of replicas
        self.begins: dict = {}                  # epoch -> (the epoch, applied) it began from
        self.removed: dict = {}                 # mid -> (how, queue): purged, deleted, dropped
        self.moved: dict = {}                   # mid -> alternate it was dead-lettered to
        self.published_to: dict = {}            # mid -> (queue, time the publish was invoked)
        self.deleted: dict = {}                 # queue -> time its delete completed ok
        self.accepted_at: dict = {}             # mid -> time its first accept completed ok
        self.refused_retries: list = []         # (mid, time invoked) of retries refused as full

    def fail(self, text: str) -> None:
        raise AssertionError(f"{text}; reproduce with --sim-seed={self.sim.seed}")

    @staticmethod
    def _outcome(req) -> str:
        if req.error is None:
            return "ok"
        return "info" if isinstance(req.error, QueueOutcomeUnknown) else "fail"

    # -- recording --------------------------------------------------------------------------
    def publish(self, driver, queue: str, body: bytes):
        self.calls["publish"] += 1
        mid = None

        def done(req) -> None:
            self.publishes[mid] = self._outcome(req)
            self.calls["publish_" + self.publishes[mid]] += 1
        req = driver.publish(queue, body, callback=done)
        mid = (driver.replica.uid, req.args[1])
        self.published_to[mid] = (queue, self.sim.now)
        if not req.done:
            self.publishes[mid] = "pending"
        else:
            self.publishes[mid] = self._outcome(req)
        return req

    def republish(self, driver, queue: str, body: bytes, seq: int):
        """A retry of this driver's publish ``seq`` (the same message id)."""
        self.calls["republish"] += 1
        mid, at = (driver.replica.uid, seq), self.sim.now

        def done(req) -> None:
            out = self._outcome(req)
            self.calls["republish_" + out] += 1
            if out == "ok":
                self.publishes[mid] = "ok"  # acknowledged now, whatever the first said
            elif isinstance(req.error, QueueFull):
                self.refused_retries.append((mid, at))
        return driver.republish(queue, body, seq, callback=done)

    def lifecycle(self, op: str, driver, queue: str):
        """purge or delete ``queue`` through ``driver``."""
        self.calls[op] += 1

        def done(req) -> None:
            out = self._outcome(req)
            self.calls[f"{op}_{out}"] += 1
            if op == "delete" and out == "ok":
                self.deleted.setdefault(queue, self.sim.now)
        return getattr(driver, op)(queue, callback=done)

    def listen(self, driver, ev: tuple) -> None:
        """A replica's state machine event (``SimQueues(listener=...)``)."""
        kind = ev[0]
        if kind == "epoch":
            self.begins.setdefault(ev[1], (ev[2], ev[3]))
        elif kind in ("purge", "delete", "dropped", "rejected"):
            st = driver.replica.state
            self.events.append((ev, st.epoch, st.applied))

    def _lineage(self, state) -> None:
        """``removed`` and ``moved`` from the events within the final state's lineage."""
        taken = {state.epoch: state.applied}  # epoch -> batches of it the lineage holds
        epoch = state.epoch
        while epoch in self.begins:
            epoch, applied = self.begins[epoch]
            if epoch == 0:
                break
            taken[epoch] = applied
        for ev, epoch, applied in self.events:
            if epoch not in taken:
                self.fail(f"an event of epoch {epoch}, outside the lineage {sorted(taken)}")
            if applied > taken[epoch]:
                self.calls["events_not_taken"] += 1  # a minority's tail, replaced
                continue
            kind = ev[0]
            if kind == "rejected":
                self.moved[ev[2]] = ev[1]
            else:
                how = {"purge": "purged", "delete": "deleted"}.get(kind, "dropped")
                self.removed.setdefault(ev[2], (how, ev[1]))

    def acquired(self, driver, req, consumer: str) -> list:
        """Record what an acquire handed out (call from its callback)."""
        if req.error is not None or not req.result:
            self.calls["acquire_" + ("empty" if req.error is None else self._outcome(req))] += 1
            return []
        self.calls["acquire_ok"] += 1
        for d in req.result:
            if not d.redelivered:
                self.order[(consumer, d.queue, d.publisher)].append(d.seq)
        return list(req.result)

    def settled(self, op: str, delivery, req) -> None:
        out = self._outcome(req)
        self.calls[f"{op}_{out}"] += 1
        if req.error is not None and out == "fail":
            name = type(req.error).__name__
            self.calls[f"{op}_{name}"] += 1
        mid = delivery.mid
        if op == "accept":
            if out == "ok":
                self.accepted[mid] += 1
                self.accepted_on[mid] = delivery.queue
                self.accepted_at.setdefault(mid, self.sim.now)
            elif out == "info":
                self.accept_info.add(mid)
        elif op == "reject" and delivery.queue == self.main:
            if out == "ok":
                self.rejected[mid] += 1
            elif out == "info":
                self.reject_info.add(mid)

    # -- checks -----------------------------------------------------------------------------
    def check(self, replicas) -> None:
        digests = {r.state.digest() for r in replicas}
        if len(digests) != 1:
            self.fail(f"replicas disagree: {sorted(digests)}")
        state = replicas[0].state
        self._lineage(state)
        for q in state.queues.values():
            if q.msgs:
                self.fail(f"{len(q.msgs)} messages left on {q.name} after the drain "
                          f"({len(q.acquired)} acquired)")
        for mid, n in self.accepted.items():
            if n > 1:
                self.fail(f"message {mid[1]} of {mid[0].hex()[:8]} accepted {n} times")
            if self.publishes.get(mid) not in ("ok", "info"):
                self.fail(f"accepted message {mid[1]} was never published "
                          f"({self.publishes.get(mid)})")
            if mid in self.removed:
                how, queue = self.removed[mid]
                self.fail(f"message {mid[1]} of {mid[0].hex()[:8]} accepted on "
                          f"{self.accepted_on[mid]} although it was {how} from {queue}")
        for mid, st in self.publishes.items():
            if st == "pending":
                self.fail(f"publish {mid[1]} never completed")
            if st == "ok" and not self.accepted.get(mid) and mid not in self.accept_info \
                    and mid not in self.removed:
                where = f" (dead-lettered to {self.moved[mid]})" if mid in self.moved else ""
                self.fail(f"acknowledged publish {mid[1]} of {mid[0].hex()[:8]} was "
                          f"lost{where}")
            if st == "fail" and (self.accepted.get(mid) or mid in self.removed):
                self.fail(f"publish {mid[1]} failed definitely but was delivered")
            queue, at = self.published_to.get(mid, (None, 0.0))
            if st == "ok" and queue in self.deleted and at > self.deleted[queue]:
                self.fail(f"publish {mid[1]} to {queue} invoked at {at:.3f}, after its "
                          f"delete completed at {self.deleted[queue]:.3f}, was acknowledged")
        for mid, at in self.refused_retries:
            if self.publishes.get(mid) == "ok" and self.accepted_at.get(mid, at) >= at:
                self.fail(f"a retry of acknowledged publish {mid[1]} of {mid[0].hex()[:8]} "
                          f"was refused as full (the duplicate check must come first)")
        for mid, n in self.rejected.items():
            if n > 1:
                self.fail(f"message {mid[1]} rejected {n} times")
            if self.accepted.get(mid) and self.accepted_on.get(mid) != self.alternate:
                self.fail(f"message {mid[1]} rejected and accepted on {self.main}")
            if not self.accepted.get(mid) and mid not in self.accept_info and \
                    mid not in self.removed:
                self.fail(f"rejected message {mid[1]} never reached {self.alternate}")
        for key, seqs in self.order.items():
            if key[1] != self.main:
                continue  # the alternate gets messages in reject order, not publish order
            if any(b <= a for a, b in zip(seqs, seqs[1:])):
                self.fail(f"consumer {key[0]} got {key[2].hex()[:8]}'s messages out of "
                          f"order on {key[1]}: {seqs}")
