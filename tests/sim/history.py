"""Records what a simulated group sent and delivered, and checks the stack's guarantees:
view agreement, per-sender FIFO without duplicates, and no loss among members that stay."""
from __future__ import annotations

from collections import defaultdict


class History:
    def __init__(self, sim):
        self.sim = sim
        self.sent = []          # (sender_uid, k, frozenset(view member uids at send time))
        self.counters = defaultdict(int)

    def send(self, m) -> None:
        """Multicast the next numbered message from member m (if it can send now)."""
        if not m.alive or m.view is None or m.address not in m.view or not m.writable:
            return
        if m.stack.layer("gms").state.value != "member":
            return
        uid = m.address.uid
        self.counters[uid] += 1
        k = self.counters[uid]
        self.sent.append((uid, k, frozenset(a.uid for a in m.view.members)))
        m.send(uid + k.to_bytes(4, "big"))

    def fail(self, text: str) -> None:
        raise AssertionError(f"{text}; reproduce with --sim-seed={self.sim.seed}")

    def check_views(self) -> None:
        seen = {}
        for m in self.sim.members:
            last = None
            for v in m.views:
                key = (v.view_id.coord.uid, v.view_id.id)
                members = tuple(a.uid for a in v.members)
                if seen.setdefault(key, members) != members:
                    self.fail(f"view {v.view_id} disagrees: {v.members} at {m.name}")
                if last is not None and not last < v.view_id:
                    self.fail(f"{m.name} installed {v.view_id} after {last}")
                last = v.view_id

    def delivered_by(self, m) -> dict:
        """sender uid -> list of k delivered by m's current incarnation, in order."""
        out = defaultdict(list)
        for msg in m.delivered:
            p = msg.payload
            out[p[:16]].append(int.from_bytes(p[16:], "big"))
        return out

    def check_fifo(self, gaps: bool = False) -> None:
        """Per sender in order without duplicates; ``gaps`` allows the holes a partition
        leaves (messages sent to the other side are not delivered here)."""
        for m in self.sim.members:
            for sender, ks in self.delivered_by(m).items():
                for a, b in zip(ks, ks[1:]):
                    if b != a + 1 and not (gaps and b > a):
                        self.fail(f"{m.name} delivered {a} then {b} from {sender.hex()[:8]}")

    def check_no_loss(self, survivors) -> None:
        for m in survivors:
            got = self.delivered_by(m)
            me = m.address.uid
            for sender, k, members in self.sent:
                if me in members and k not in set(got.get(sender, ())):
                    self.fail(f"{m.name} never delivered message {k} of {sender.hex()[:8]}")

    def check_errors(self) -> None:
        for m in self.sim.members:
            if m.stack.errors:
                self.fail(f"{m.name} had {m.stack.errors} internal errors")

    def check_all(self, survivors) -> None:
        self.check_views()
        self.check_fifo()
        self.check_no_loss(survivors)
        self.check_errors()
