"""Views larger than one datagram (issue 5, scale). GMS's own messages - VIEW, JOIN_RSP,
the flush's digests and cut, the merge's views, the primary component's state - travel
below FRAG, and at about 750 members they no longer fit a 60 KB bundle. The same happens at a
few dozen members with a small bundle (an MTU-sized datagram, as here): the transport
fragments them (stack/transport_frag.py). On every seed, with loss, duplication and
reordering: the group forms, a crash is flushed out, a partition heals into one view, view
agreement, virtual synchrony and FIFO hold (History), and messages were in fact fragmented."""
import pytest

from raygroups.stack.config import StackConfig
from raygroups.stack.sim import Simulation, SimOptions

from .history import History
from .test_failures_sim import one_view

N = 24
BUNDLE = 700  # bytes: a VIEW of 24 members is ~600 B, a JOIN_RSP ~1.6 KB, a FLUSH_OK ~1 KB


def settle(sim, members, what, quiet_s=3.0, timeout_s=60.0):
    """Until the live members share one view that stays for ``quiet_s``: a partition shorter
    than failure detection leaves suspicions that may still split the view after the heal
    (then merge it), and what a member multicasts in a view the others already left is, by
    virtual synchrony, not theirs to deliver."""
    deadline = sim.now + timeout_s
    while True:
        sim.run_until(lambda: one_view(members), max(deadline - sim.now, 0.0), what)
        vid = next(m for m in members if m.alive).view.view_id
        sim.run_for(quiet_s)
        if one_view(members) and next(m for m in members if m.alive).view.view_id == vid:
            return
        assert sim.now < deadline, f"{what}: the view kept changing; seed {sim.seed}"


def owed_by(m):
    """``owes(sender_uid, view_id)``: virtual synchrony owes member ``m`` a message its
    sender multicast in view ``view_id`` when m installed that view and the sender is in
    m's next view (they moved on together), or m is still in it. A sender excluded by the
    next view (a suspicion right after it sent: seed 15100189) may have sent after that
    view's flush cut; then its message is its own (virtual synchrony binds only the members
    that move on together). m's views are indexed once: the check runs after every
    simulated instant."""
    at: dict = {}
    for i, v in enumerate(m.views):
        at.setdefault(v.view_id, i)
    nxt: dict = {}  # view index -> uids of the next view

    def owes(sender_uid: bytes, view_id) -> bool:
        i = at.get(view_id)
        if i is None:
            return False
        if i + 1 == len(m.views):
            return True
        if i not in nxt:
            nxt[i] = {a.uid for a in m.views[i + 1].members}
        return sender_uid in nxt[i]
    return owes


@pytest.mark.seeds(3)
@pytest.mark.regressions(14400081,  # a stale suspicion of a member that came back went unanswered
                         15100189)  # a sender excluded right after it sent (owed no delivery)
def test_views_beyond_one_datagram_form_flush_and_merge(sim_seed):
    sim = Simulation(sim_seed, SimOptions(loss=0.03, duplicate=0.02, reorder=0.05,
                                          delay_s=(0.0005, 0.003)), buggify=True)
    rng = sim.rng
    cfg = StackConfig.local(transport__max_bundle_size=BUNDLE)
    h = History(sim)
    sent = []  # (sender, stream, k, the sender's view)

    def send(m) -> None:
        n = len(h.sent)
        h.send(m)
        if len(h.sent) > n:
            sent.append((m.address, h.sent[-1][0], h.sent[-1][1], m.view.view_id))
    members = [sim.add_member("big", "m0", cfg)]
    sim.run_until(lambda: members[0].view is not None, 5, "founding")
    for i in range(1, N):
        sim.run_for(rng.uniform(0, 0.01))
        members.append(sim.add_member("big", f"m{i}", cfg))
    sim.run_until(lambda: one_view(members), 60, f"{N} members agree")
    for _ in range(10):
        for m in rng.sample(members, 5):
            send(m)
        sim.run_for(0.02)
    victim = rng.choice(members[1:])
    sim.crash(victim)
    victim_uid = victim.address.uid
    sim.run_until(lambda: one_view(members), 60, "the crash flushed out")
    live = [m for m in members if m.alive]
    half = rng.sample(live, len(live) // 2)
    sim.partition(half, [m for m in live if m not in half])
    sim.run_for(3.0)
    sim.heal()
    settle(sim, members, "one view after the heal")
    for _ in range(10):
        for m in rng.sample(live, 5):
            send(m)
        sim.run_for(0.02)

    def all_delivered() -> bool:
        for m in live:
            got, owes = h.delivered_by(m), owed_by(m)
            for sender, stream, k, vid in sent:
                # (what the crashed member sent and nobody received is lost, as it may be)
                if sender.uid != victim_uid and owes(sender.uid, vid) and \
                        k not in got.get(stream, ()):
                    return False
        return True
    sim.run_until(all_delivered, 30, "all delivered")
    # it checked some
    assert sum(owed_by(m)(s[0].uid, s[3]) for m in live for s in sent) >= len(sent)
    h.check_views()
    h.check_virtual_synchrony()
    h.check_fifo(gaps=True)  # (a partition leaves holes: what went to the other side)
    h.check_errors()
    st = [m.stack.layer("transport").stats for m in live]
    assert sum(s["frag_messages"] for s in st) > 0 and sum(s["frag_reassembled"] for s in st) > 0
    assert sum(m.stack.errors for m in members if m.stack is not None) == 0


@pytest.mark.seeds(10)
@pytest.mark.regressions(16070490)  # a flush of a merge view answered before its VIEW came
def test_relayed_state_exchange_and_coordinator_stable_keep_seed_002(sim_seed):
    """The large-group paths on a small group (relay_above=0, coord_only_above=0): the
    primary component's state relayed by the first member, STABLE digests to the
    coordinator only; crashes, partitions and heals with ordered and unordered traffic:
    virtual synchrony, total order, at most one primary per primary id, nothing sent outside
    a primary (seed 002, as test_consistency_sim checks the all-to-all exchange)."""
    from .test_consistency_sim import N, start, traffic
    sim = Simulation(sim_seed, SimOptions(loss=0.05, duplicate=0.02, reorder=0.05,
                                          delay_s=(0.0005, 0.003)), buggify=True)
    rng = sim.rng
    cfg = StackConfig.local(primary__expected_size=N, primary__relay_above=0,
                            stable__coord_only_above=0)
    h = History(sim)
    members = start(sim, N, cfg)
    # a crash, then a split into halves with traffic on both sides, then the heal
    sim.crash(rng.choice(members))
    traffic(sim, h, members, rng.uniform(0.5, 1.5))
    live = [m for m in members if m.alive]
    rng.shuffle(live)
    sim.partition(live[:len(live) // 2], live[len(live) // 2:])
    traffic(sim, h, members, rng.uniform(1.0, 2.0))
    sim.heal()
    traffic(sim, h, members, rng.uniform(0.2, 1.0))
    sim.run_until(lambda: one_view(members) and all(m.view.primary for m in members if m.alive),
                  30, "one primary view after the last heal")
    for check in (h.check_views, h.check_virtual_synchrony, h.check_total_order,
                  h.check_primary, h.check_errors):
        check()
    h.check_fifo(gaps=True)
    live = [m for m in members if m.alive]
    assert sum(m.stack.layer("primary").stats["states_relayed"] for m in live) > 0
    assert len({m.view.primary_id for m in live}) == 1
    # NAKACK purges: stability comes through the coordinator-only STABLE rounds (a partition
    # stops the rounds, so the first may come after the heal)
    sim.run_until(lambda: all(m.stack.layer("stable").stats["stability_received"] > 0
                              for m in live), 10, "stability at every member")


@pytest.mark.scale
@pytest.mark.seeds(1)
def test_views_mode_traffic_per_member_and_round_does_not_grow_with_n(sim_seed):
    """Views mode at 30 members (below the 32-member thresholds: all-to-all STABLE) and at
    120 (above: STABLE digests to the coordinator): per member and round, the datagrams
    sent and received stay flat (they grew with N: 39 received at 30 members, 134 at 120,
    380 at 300, before)."""
    from raygroups.stack.sim_scale import simulate
    small = simulate(30, "views", seed=sim_seed, rumors=0, storm=0, crash=False,
                     traffic_rounds=5)
    large = simulate(120, "views", seed=sim_seed, rumors=0, storm=0, crash=False,
                     traffic_rounds=5)
    for key in ("steady_sent_per_member_round", "steady_received_per_member_round"):
        assert 0 < large[key] <= 1.5 * small[key], \
            f"{key}: {small[key]} at 30 members, {large[key]} at 120; " \
            f"reproduce with --sim-seed={sim_seed}"
    assert large["errors"] == 0
