"""Wire versions in the simulator (5% loss, duplication, reordering, buggify): a rolling
upgrade restarts every member of a group at (1, 1) as a fresh member at (1, 2) under traffic,
one at a time in random order (most leave gracefully, some crash), and the group loses no
message, keeps a primary component throughout, and speaks version 2 only in views without an
old member: at 1 until the last old member is gone, then at 2 everywhere (MySQL Group
Replication's lowest version rule); likewise when the founder, and so the coordinator, runs
the new build from the start, and back to 1 in a rolling downgrade. A (2, 2) joiner to a group holding a (1, 1) member is refused, naming both
ranges; two groups formed apart without a version in common stay apart after the heal, and
merge once the old member of one of them has left."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.layer import MCAST
from raygroups.stack.sim import Simulation, SimOptions

from .history import History
from .test_agreed_settings_sim import formed
from .test_failures_sim import one_view

N = 5
OLD = StackConfig.local(primary__expected_size=N)
NEW = StackConfig.local(primary__expected_size=N, transport__wire_versions=(1, 2))
NEXT_ONLY = StackConfig.local(transport__wire_versions=(2, 2))


class VersionSim(Simulation):
    """Counts the packets put on the network by wire version (a bundle's second byte: a
    msgpack array header, then the version), and notes every packet sent to a member of the
    sender's view that cannot read it while the sender speaks that version. A bundle packed
    before the sender switched keeps its version (the view that brought an old joiner in was
    installed after it was packed: its messages are the old view's, which the joiner is not
    owed), so it is not noted."""

    def __init__(self, seed, options):
        super().__init__(seed, options, buggify=True)
        self.by_version = {1: 0, 2: 0}
        self.unreadable = []

    def _transmit(self, src, dest, data):
        version = data[1]
        self.by_version[version] += 1
        view = src.stack.layer("gms").view
        if version != 1 and view is not None and src.stack.transport.version == version:
            for t in self.live() if dest == MCAST else [self.by_phys[tuple(dest)]]:
                if t.alive and t.address in view and version not in t.stack.transport.accept:
                    self.unreadable.append(f"{src.name} -> {t.name} at {version}, t={self.now}")
        super()._transmit(src, dest, data)


def lossy(seed):
    return VersionSim(seed, SimOptions(loss=0.05, duplicate=0.02, reorder=0.05,
                                       delay_s=(0.0005, 0.003)))


def check_versions(sim, new_uids):
    """Every live member speaks the version of the view it installed last, and that is 2
    exactly when every member of the view is a new build (its uid in ``new_uids``)."""
    for m in sim.live():
        view = m.stack.layer("gms").view
        if view is None or m.address not in view:
            continue
        want = 2 if all(a.uid in new_uids for a in view.members) else 1
        if view.wire_version != want or m.stack.wire_version != want:
            raise AssertionError(
                f"{m.name} speaks {m.stack.wire_version} in {view} (versions {view.versions}, "
                f"its version {view.wire_version}), not {want}; reproduce with "
                f"--sim-seed={sim.seed}")


def step(sim, h, members, new_uids, primaries):
    """One traffic step: each live member sends with probability 0.3; then the checks that
    hold at every instant."""
    for m in members:
        if sim.rng.random() < 0.3:
            h.send(m)
    sim.run_for(0.02)
    check_versions(sim, new_uids)
    primaries.append(any(m.view is not None and m.view.primary and m.address in m.view
                         for m in sim.live()))


def traffic_until(sim, h, members, new_uids, primaries, pred, what, timeout_s=30.0):
    end = sim.now + timeout_s
    while not pred():
        if sim.now > end:
            h.fail(f"{what} not reached within {timeout_s}s under traffic")
        step(sim, h, [m for m in members if m.alive], new_uids, primaries)


def rolling_restart(sim_seed, founder, others, fresh):
    """N members, the first at ``founder``'s versions, the others at ``others``', under
    traffic; each member not at ``fresh``'s versions in turn, in random order, leaves (or
    crashes) and a fresh member at ``fresh``'s joins. Returns once every check passed."""
    sim = lossy(sim_seed)
    rng = sim.rng
    h = History(sim)
    members = [sim.add_member("g", f"m{i}", founder if i == 0 else others, start=False)
               for i in range(N)]
    for m in members:
        m._boot()
        sim.run_until(lambda: one_view([x for x in members if x.stack is not None]), 30,
                      f"{m.name} joins")
    sim.run_until(lambda: members[0].view.primary, 30, "a primary view of all")
    new_uids = {m.address.uid for m in members if m.config is NEW}
    primaries, crashed = [], set()
    everyone = list(members)
    traffic_until(sim, h, members, new_uids, primaries, lambda: sim.now > 0.5, "warm-up")
    order = [i for i, m in enumerate(members) if m.config is not fresh]
    rng.shuffle(order)
    for i in order:
        old = members[i]
        others = [m for m in members if m is not old]
        if rng.random() < 0.25:
            sim.crash(old)
            crashed.add(old.address.uid)
            traffic_until(sim, h, members, new_uids, primaries, lambda: one_view(others),
                          f"{old.name} excluded")
        else:
            old.leave()
            traffic_until(sim, h, members, new_uids, primaries,
                          lambda: old.left is not None and one_view(others), f"{old.name} left")
            assert old.left.reason == "left", (old.left, sim_seed)
        new = sim.add_member("g", f"n{i}", fresh)
        if fresh is NEW:
            new_uids.add(new.address.uid)
        members[i] = new
        everyone.append(new)
        traffic_until(sim, h, members, new_uids, primaries,
                      lambda: one_view(members) and all(m.view.primary for m in members),
                      f"{new.name} joined")
    done, final = sim.now, 2 if fresh is NEW else 1
    traffic_until(sim, h, members, new_uids, primaries, lambda: sim.now > done + 1.0,
                  f"traffic at version {final}")
    # what the members that stay are owed: every message sent in a view that held them, but
    # a crashed sender's last ones, which may have reached nobody (check_all judges those:
    # what one survivor delivered, every survivor must have)
    def owed_delivered(m) -> bool:
        got = h.delivered_by(m)
        return all(k in got.get(stream, ()) for stream, k, uids in h.sent
                   if m.address.uid in uids and stream[:16] not in crashed)
    sim.run_until(lambda: all(owed_delivered(m) for m in members), 30, "all delivered")
    assert [m.stack.wire_version for m in members] == [final] * N
    assert all(m.view.wire_version == final for m in members)
    assert sim.by_version[2] > 0, sim.by_version
    assert sim.unreadable == [], (sim.unreadable[:5], sim_seed)
    # every view any member installed speaks 2 exactly when it holds no old member
    for m in everyone:
        for v in m.views:
            want = 2 if all(a.uid in new_uids for a in v.members) else 1
            assert v.wire_version == want, (m.name, v, v.versions, sim_seed)
    assert all(primaries), f"no primary component at step {primaries.index(False)}; " \
                           f"reproduce with --sim-seed={sim_seed}"
    h.check_primary()
    h.check_all(members, crashed)  # views, virtual synchrony, FIFO, nothing lost, no errors


@pytest.mark.seeds(50)
def test_a_rolling_upgrade_loses_nothing_keeps_a_primary_and_switches_after_the_last(sim_seed):
    """Every member starts at (1, 1). Old members stay ahead of new ones in the view, so an
    old member coordinates until the last one is gone."""
    rolling_restart(sim_seed, OLD, OLD, NEW)


@pytest.mark.seeds(50)
def test_a_rolling_upgrade_under_a_coordinator_of_the_new_build(sim_seed):
    """The founder runs (1, 2) already (the group speaks 1 for the others): the coordinator
    that flushes out the last old member is a new build, which must switch only once that
    member is out of the view."""
    rolling_restart(sim_seed, NEW, OLD, NEW)


@pytest.mark.seeds(50)
@pytest.mark.regressions(15600109)  # a HIGHEST packed at 2 went out after the switch to 1
def test_a_rolling_downgrade_goes_back_to_1_with_the_first_old_member(sim_seed):
    """Every member starts at (1, 2), at version 2, and is replaced by a (1, 1) member: the
    group speaks 1 from the view that takes in the first of them on, and the joiner, which
    cannot read the multicasts sent at 2 before the others installed that view, gets them
    again at 1."""
    rolling_restart(sim_seed, NEW, NEW, OLD)


@pytest.mark.seeds(10)
def test_a_joiner_without_a_version_in_common_is_refused_naming_both_ranges(sim_seed):
    sim = lossy(sim_seed)
    group = formed(sim, ["old"], OLD)
    group.append(sim.add_member("g", "up", NEW))
    sim.run_until(lambda: one_view(group), 30, "a (1, 2) member joins")
    vid = group[0].view.view_id
    x = sim.add_member("g", "x", NEXT_ONLY)
    sim.run_until(lambda: x.left is not None, 30, "x refused")
    assert "transport.wire_versions is [1, 1] in the group, [2, 2] here" in x.left.reason, \
        x.left.reason
    assert x.view is None and all(m.view.view_id == vid for m in group)
    assert sum(m.stack.layer("gms").stats["joins_denied"] for m in group) >= 1
    assert all(m.stack.wire_version == 1 for m in group)


@pytest.mark.seeds(10)
def test_groups_without_a_version_in_common_stay_apart_until_the_old_member_leaves(sim_seed):
    """Group a: {a0 at (1, 1), a1 at (1, 2)}, at [1, 1]; group b: {b0 at (2, 2), b1 at
    (1, 2)}, at [2, 2], formed apart. After the heal they stay apart (refused, not asked
    again at every check); once a0 left, a speaks [1, 2] and they merge, at version 2."""
    sim = lossy(sim_seed)
    a = [sim.add_member("g", "a0", OLD, start=False), sim.add_member("g", "a1", NEW, start=False)]
    b = [sim.add_member("g", "b0", NEXT_ONLY, start=False),
         sim.add_member("g", "b1", NEW, start=False)]
    sim.partition(a, b)
    for side in (a, b):
        for m in side:
            m._boot()
            sim.run_until(lambda: all(x.view is not None for x in side if x.alive), 30, "boot")
        sim.run_until(lambda: one_view(side), 30, f"{side[0].name}'s group")
    assert a[0].stack.wire_version == 1 and b[0].stack.wire_version == 2
    sim.heal()
    sim.run_for(10.0)  # ten merge checks
    assert one_view(a) and one_view(b)
    gms = {m.name: m.stack.layer("gms").stats for m in a + b}
    refused = sum(s["merges_refused"] for s in gms.values())
    incompatible = sum(s["merges_incompatible"] for s in gms.values())
    assert refused + incompatible >= 1, gms
    assert refused <= 4 and incompatible <= 4, gms  # remembered, not asked every check
    a[0].leave()
    rest = [a[1], *b]
    sim.run_until(lambda: a[0].left is not None and one_view(rest), 30, "merged")
    assert all(m.stack.wire_version == 2 for m in rest)
    assert {tuple(r) for r in rest[0].view.versions} == {(1, 2), (2, 2)}
