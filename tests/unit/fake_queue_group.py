"""A stand-in for a ``Group`` and its member actors' queue calls, for unit tests of
``WorkQueueHandle``'s settling and of the sources on it (no Ray): each member holds tokens
(plain deliveries) and keys (keyed ones), and answers ``queue_settle``/``queue_settle_keys``
as ``QueueHost`` does, or refuses for now, or fails the call, as its script says."""
from raygroups.actors.queue import Delivery, WorkQueueHandle
from raygroups.stack.workqueue import NotAcquired, QueueNotPrimary


class FakeMember:
    """``script``: what the next settle calls do, in order: None (take them), "refuse"
    (QueueNotPrimary per token, or every key still held), or an exception (the call fails).
    Past the script, calls take what they settle."""

    def __init__(self, name: str, tokens=(), keys=None, script=()):
        self.name, self.tokens, self.keys = name, set(tokens), dict(keys or {})
        self.script, self.calls, self.settled = list(script), [], []
        self.renewed = 0

    def _next(self):
        return self.script.pop(0) if self.script else None

    def queue_settle(self, queue, op, tokens):
        self.calls.append((op, list(tokens)))
        step = self._next()
        if isinstance(step, BaseException):
            raise step
        out = []
        for t in tokens:
            if t not in self.tokens:
                out.append(NotAcquired(f"{t} not held at {self.name}"))
            elif step == "refuse":
                out.append(QueueNotPrimary(f"{self.name} is not in a primary component"))
            else:
                self.tokens.discard(t)
                self.settled.append((op, t))
                out.append(None)
        return out

    def queue_renew(self, client, lease_s):
        self.renewed += 1
        return len(self.tokens)

    def queue_settle_keys(self, queue, op, keys):
        self.calls.append((op, list(keys)))
        step = self._next()
        if isinstance(step, BaseException):
            raise step
        held = sum(self.keys.get(k, 0) for k in keys)
        if step == "refuse":
            return {"settled": 0, "failed": held, "held": held}
        for k in keys:
            if k in self.keys:
                self.settled.append((op, k))
                del self.keys[k]
        return {"settled": held, "failed": 0, "held": 0}


class FakeGroup:
    cluster, namespace = "fake", "fake-ns"

    def __init__(self, *members: FakeMember):
        self.members = {m.name: m for m in members}
        self.in_group = list(self.members)

    def member_names(self):
        return list(self.in_group)

    def _call(self, method, *args, member=None, **_kw):
        return getattr(self.members[member], method)(*args)


def handle(group: FakeGroup, member=None, **kw) -> WorkQueueHandle:
    return WorkQueueHandle(group, "jobs", member=member, create=False, **kw)


def deliveries(h: WorkQueueHandle, member: str, *ks) -> list:
    """Deliveries of ``h`` held by ``member``, tokens (1, k)."""
    return [Delivery(h, "jobs", member, b"job", ("p", k), (1, k), False) for k in ks]


class QuietRenewer:
    """A lease keeper without its threads (``tick()``, ``settle_tick()`` by hand): monkeypatched in as
    ``raygroups.actors.queue_lease.KEEPER``."""

    def __new__(cls):
        from raygroups.actors.queue_lease import LeaseKeeper
        r = LeaseKeeper()
        r._start = lambda attr: None
        return r
