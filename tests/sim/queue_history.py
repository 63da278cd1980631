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
"""
from __future__ import annotations

from collections import Counter, defaultdict

from raygroups.stack.workqueue import QueueOutcomeUnknown


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
        if not req.done:
            self.publishes[mid] = "pending"
        else:
            self.publishes[mid] = self._outcome(req)
        return req

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
        for mid, st in self.publishes.items():
            if st == "pending":
                self.fail(f"publish {mid[1]} never completed")
            if st == "ok" and not self.accepted.get(mid) and mid not in self.accept_info:
                self.fail(f"acknowledged publish {mid[1]} of {mid[0].hex()[:8]} was lost")
            if st == "fail" and self.accepted.get(mid):
                self.fail(f"publish {mid[1]} failed definitely but was delivered")
        for mid, n in self.rejected.items():
            if n > 1:
                self.fail(f"message {mid[1]} rejected {n} times")
            if self.accepted.get(mid) and self.accepted_on.get(mid) != self.alternate:
                self.fail(f"message {mid[1]} rejected and accepted on {self.main}")
            if not self.accepted.get(mid) and mid not in self.accept_info:
                self.fail(f"rejected message {mid[1]} never reached {self.alternate}")
        for key, seqs in self.order.items():
            if key[1] != self.main:
                continue  # the alternate gets messages in reject order, not publish order
            if any(b <= a for a, b in zip(seqs, seqs[1:])):
                self.fail(f"consumer {key[0]} got {key[2].hex()[:8]}'s messages out of "
                          f"order on {key[1]}: {seqs}")
