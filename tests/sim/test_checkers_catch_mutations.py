"""The campaigns' checkers can fail: each deliberate mutation of the protocol a checker
guards makes that checker report a violation within a fixed set of seeds, while the same
schedules pass every checker unmutated.

The schedule is a campaign in small: 5 members join at once under loss, duplication and
reordering, everyone sends (half of it in total order); with faults, a member sends a burst
and crashes, and the rest split into two sides and heal. It never waits for liveness (a
mutation may stall the group): the checkers run on whatever history the schedule made. The
checks of delivery (FIFO without gaps, no loss) run on the schedule without faults, where
every member stays and must deliver everything.

The recovery-status checkers run on a schedule of their own: a founder, then four members
that join at once and take its state (their announcements race each other), under the same
loss, duplication and reordering.
"""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.events import StatusAnnounced
from raygroups.stack.gms import Gms
from raygroups.stack.message import INTERNAL, ORDERED, Message
from raygroups.stack.nakack import NakAck
from raygroups.stack.primary import DONOR, ONLINE, STATUS, Primary
from raygroups.stack.sequencer import Sequencer
from raygroups.stack.sim import Simulation, SimOptions
from raygroups.stack.state_transfer import StateTransfer

from .history import History

SEEDS = range(40)
CFG = StackConfig.local(primary__expected_size=5)


def schedule(seed: int, faults: bool) -> tuple:
    sim = Simulation(seed, SimOptions(loss=0.05, duplicate=0.02, reorder=0.05,
                                      delay_s=(0.0005, 0.003)))
    rng = sim.rng
    h = History(sim)
    ms = [sim.add_member("g", f"m{i}", CFG) for i in range(5)]

    def traffic(seconds: float, senders) -> None:
        for _ in range(int(seconds / 0.02)):
            for m in senders:
                if rng.random() < 0.3:
                    h.send(m, ordered=rng.random() < 0.5)
            sim.run_for(0.02)

    sim.run_for(2.0)
    traffic(0.5, ms)
    if not faults:
        sim.run_for(5.0)
        return h, ms
    victim = rng.choice(ms)
    for _ in range(20):  # a burst right before the crash: some of it reaches only some members
        h.send(victim)
    sim.run_for(rng.uniform(0.0, 0.004))
    sim.crash(victim)
    rest = [m for m in ms if m is not victim]
    traffic(1.5, rest)
    rng.shuffle(rest)
    sim.partition(rest[:2], rest[2:])
    traffic(2.0, rest)
    sim.heal()
    traffic(1.0, rest)
    sim.run_for(5.0)
    return h, rest


CHECKS = {  # checker -> (with faults?, how it runs)
    "views": (True, lambda h, ms: h.check_views()),
    "virtual synchrony": (True, lambda h, ms: h.check_virtual_synchrony()),
    "total order": (True, lambda h, ms: h.check_total_order()),
    "one primary per id": (True, lambda h, ms: h.check_one_primary_per_id()),
    "primary lineage": (True, lambda h, ms: h.check_primary_lineage()),
    "fifo": (False, lambda h, ms: h.check_fifo()),
    "no loss": (False, lambda h, ms: h.check_no_loss(ms)),
    "last view": (False, lambda h, ms: h.check_last_view(ms)),
    "errors": (True, lambda h, ms: h.check_errors()),
}


def first_violation(check: str, text: str):
    """The first seed whose schedule makes ``check`` fail with ``text``, and its message."""
    faults, run = CHECKS[check]
    for seed in SEEDS:
        h, ms = schedule(seed, faults)
        try:
            run(h, ms)
        except AssertionError as e:
            assert text in str(e), f"{check} failed otherwise: {e}"
            return seed, str(e)
    return None


def test_unmutated_schedules_pass_every_checker():
    for seed in SEEDS[:20]:
        for faults in (True, False):
            h, ms = schedule(seed, faults)
            for with_faults, run in CHECKS.values():
                if with_faults == faults:
                    run(h, ms)


def _no_increment(self):
    return self.highest_counter


def _catchup_at_once(down_event):
    def patched(self, ev):
        if type(ev).__name__ == "Catchup":
            ev.callback()  # the flush does not fetch up to the cut
            return None
        return down_event(self, ev)
    return patched


def _unordered(down):
    def patched(self, msg):
        if msg.flags & ORDERED and msg.dest is None:
            self.below.down(msg)  # straight to NAKACK: no sequencer
            return
        down(self, msg)
    return patched


def _majority_of_the_view(self, view, max_pid, last, first_start=True):
    """The last primary's members in the view counted against the view, not against the
    last primary: any side of a split that is all old members is primary."""
    if max_pid == 0:
        return first_start and 2 * len(view) > self.config.expected_size
    last_set = set(last)
    return 2 * sum(1 for m in view.members if m.uid in last_set) > len(view)


def _drain_out_of_order(self, w, out):
    for seq in sorted(w.pending):  # whatever waits behind a gap, at once
        out.append(w.pending.pop(seq))


def _naks_only_while_forming(check_gaps):
    """No NAK after the schedule's formation: losses of its traffic stay gaps for good, in a
    view nothing will change."""
    def patched(self):
        if self.ctx.now() < 2.0:
            check_gaps(self)
    return patched


def _raise_on_view_ack(handle):
    def patched(self, sender, h):
        if h[0] == 4:  # VIEW_ACK
            raise RuntimeError("mutation")
        handle(self, sender, h)
    return patched


MUTATIONS = [
    # (checker, what it reports, the mutation of the protocol it guards)
    ("views", "disagrees", lambda mp: mp.setattr(Gms, "next_counter", _no_increment)),
    ("virtual synchrony", "having delivered different messages",
     lambda mp: mp.setattr(NakAck, "down_event", _catchup_at_once(NakAck.down_event))),
    ("total order", "in different orders",
     lambda mp: mp.setattr(Sequencer, "down", _unordered(Sequencer.down))),
    ("one primary per id", "given to two components",
     lambda mp: mp.setattr(Primary, "_quorate", lambda self, *args: True)),
    ("primary lineage", "no majority",
     lambda mp: mp.setattr(Primary, "_quorate", _majority_of_the_view)),
    ("fifo", "then", lambda mp: mp.setattr(NakAck, "_drain", _drain_out_of_order)),
    ("no loss", "never delivered",
     lambda mp: mp.setattr(NakAck, "_check_gaps", lambda self: None)),
    ("last view", "delivered different messages in the last view",
     lambda mp: mp.setattr(NakAck, "_check_gaps", _naks_only_while_forming(NakAck._check_gaps))),
    ("errors", "internal errors",
     lambda mp: mp.setattr(Gms, "_handle", _raise_on_view_ack(Gms._handle))),
]


@pytest.mark.parametrize("check,text,mutate", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_mutation_of_the_protocol_fails_its_checker(monkeypatch, check, text, mutate):
    mutate(monkeypatch)
    found = first_violation(check, text)
    assert found is not None, f"the {check} checker missed its mutation on seeds {SEEDS}"
    print(f"{check}: seed {found[0]}: {found[1][:200]}")


def recovery_schedule(seed: int) -> History:
    sim = Simulation(seed, SimOptions(loss=0.05, duplicate=0.02, reorder=0.05,
                                      delay_s=(0.0005, 0.003)))
    h = History(sim)
    ms = []

    def add(name: str) -> None:
        m = sim.add_member("g", name, CFG)
        m.stack.layer("state_transfer").handlers(lambda: b"state", lambda data: None)
        ms.append(m)
    add("m0")
    sim.run_for(1.0)
    for i in range(1, 5):
        add(f"m{i}")
    sim.run_for(4.0)
    return h


RECOVERY_CHECKS = {
    "statuses": lambda h: h.check_statuses(),
    "recovery": lambda h: h.check_recovery(),
}


def _own_multicast(self):
    """Each member multicasts its own change instead of through the view's first member."""
    vid, view = self.attrs[0], self.attrs[1]
    if vid is not None and self.ctx.local in view:
        self.below.down(Message(None, b"", INTERNAL,
                                {9: [STATUS, vid, self.ctx.local.uid, self.status]}))


def _from_any_member(self, m, h):
    """A STATUS applied from any member of the view, in the order it arrives here."""
    _, vid, uid, status = h
    view = self.attrs[1]
    if view is not None and vid == self.attrs[0] and m.sender in view:
        member = next(a for a in view.members if a.uid == uid)
        self.announced[member] = status
        self.announcements += 1
        self.above.up_event(StatusAnnounced(vid, self.announcements, member, status))


def _no_donor(status_in):
    def patched(self, change):
        s = status_in(self, change)
        return ONLINE if s == DONOR else s
    return patched


def _never_donor(down_event):
    def patched(self, ev):
        if type(ev).__name__ == "SetStatus" and ev.status == DONOR:
            return None
        return down_event(self, ev)
    return patched


RECOVERY_MUTATIONS = [
    ("statuses", "differently", lambda mp: (
        mp.setattr(Primary, "_forward_status", _own_multicast),
        mp.setattr(Primary, "_on_status", _from_any_member))),
    ("recovery", "not DONOR", lambda mp: (
        mp.setattr(StateTransfer, "_status_in", _no_donor(StateTransfer._status_in)),
        mp.setattr(Primary, "down_event", _never_donor(Primary.down_event)))),
]


def test_unmutated_recovery_schedules_pass_the_status_checkers():
    for seed in SEEDS[:10]:
        h = recovery_schedule(seed)
        for run in RECOVERY_CHECKS.values():
            run(h)


@pytest.mark.parametrize("check,text,mutate", RECOVERY_MUTATIONS,
                         ids=[m[0] for m in RECOVERY_MUTATIONS])
def test_a_mutation_of_the_recovery_status_fails_its_checker(monkeypatch, check, text, mutate):
    mutate(monkeypatch)
    for seed in SEEDS:
        try:
            RECOVERY_CHECKS[check](recovery_schedule(seed))
        except AssertionError as e:
            assert text in str(e), f"{check} failed otherwise: {e}"
            print(f"{check}: seed {seed}: {str(e)[:200]}")
            return
    raise AssertionError(f"the {check} checker missed its mutation on seeds {SEEDS}")
