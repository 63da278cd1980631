"""Simulator campaign for the recovery status of MySQL Group Replication's design: members
with state transfer join under traffic, loss, reordering and buggify, while donors crash
right after a join, members leave or crash, and the group splits and heals. Checked on every
run: every member answers the same statuses at each view and applies the same ordered
announcements after it; a joiner is RECOVERING and its donor DONOR in the joiner's first
view; a failed recovery ends with the member gone saying why; in the end everyone is ONLINE
in one view; and the group guarantees (views, virtual synchrony, total order, primary). Half
the runs exchange states through the view's first member (the large-view path)."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.primary import ERROR, OFFLINE, ONLINE, RECOVERING
from raygroups.stack.sim import Simulation, SimOptions

from .history import History
from .test_consistency_sim import one_view, traffic

# the first primary needs 3 of the 4 first members: a newcomer that founds a group of its
# own while the group is out of its reach, and another that joins it, are no primary
CFG = StackConfig.local(primary__expected_size=4, state_transfer__timeout_s=3.0)
RELAYED = CFG.with_options(primary__relay_above=0)  # the exchange through the first member


def add(sim, name, cfg=CFG, get=True):
    """A member whose application state is the number of messages it delivered."""
    m = sim.add_member("g", name, cfg)
    m.stack.layer("state_transfer").handlers(
        (lambda: b"%d" % len(m.delivered)) if get else None, lambda data: None)
    return m


def statuses(m) -> dict:
    return {a.name: x["status"] for a, x in m.stack.member_attributes().items()}


def settled(members) -> bool:
    """One view, and every live member answers that everyone in it is ONLINE."""
    live = [m for m in members if m.alive]
    return one_view(members) and all(set(statuses(m).values()) == {ONLINE} and
                                     len(statuses(m)) == len(live) for m in live)


@pytest.mark.seeds(100)
@pytest.mark.regressions(15980638,  # joiners that never saw a primary bootstrapped one
                         16110242)  # a failed recovery's leave timed out, saying "timeout"
def test_recovery_status_lifecycle(sim_seed):
    sim = Simulation(sim_seed, SimOptions(loss=0.05, duplicate=0.02, reorder=0.05,
                                          delay_s=(0.0005, 0.003)), buggify=True)
    rng = sim.rng
    h = History(sim)
    cfg = rng.choice([CFG, RELAYED])
    members = [add(sim, "m0", cfg)]
    sim.run_until(lambda: members[0].view is not None, 5, "founding")
    for i in range(1, 4):
        sim.run_for(rng.choice([0.0, rng.uniform(0, 0.2)]))  # some join in one view
        members.append(add(sim, f"m{i}", cfg))
    traffic(sim, h, members, 1.0)
    sim.run_until(lambda: settled(members), 30, "everyone joined and ONLINE")
    for step in range(rng.randint(2, 4)):
        live = [m for m in members if m.alive]
        kind = rng.choice(["join", "join, donor crashes", "leave", "crash", "split"])
        if kind.startswith("join") or len(live) <= 3:  # the group keeps a majority
            members.append(add(sim, f"m{len(members)}", cfg))
            if kind == "join, donor crashes" and len(live) > 2:
                sim.run_for(rng.uniform(0.0, 0.3))
                coord = [m for m in live if m.alive and m.view is not None and
                         m.view.members[0] == m.address]
                if coord:  # the donor, if the join is through by now
                    sim.crash(coord[0])
        elif kind == "leave":
            h.leave(rng.choice(live))
        elif kind == "crash":
            sim.crash(rng.choice(live))
        else:
            rng.shuffle(live)
            sim.partition(live[:len(live) // 2], live[len(live) // 2:])
            traffic(sim, h, members, rng.uniform(0.5, 2.0))
            sim.heal()
        traffic(sim, h, members, rng.uniform(0.3, 1.5))
    sim.run_until(lambda: settled(members), 30, "one view, everyone ONLINE")
    h.check_group()
    h.check_recovery()


def test_a_joiner_and_its_donor_go_back_to_online_and_a_leaver_is_offline():
    sim = Simulation(7)
    h = History(sim)
    a = add(sim, "a")
    sim.run_until(lambda: a.view is not None, 5, "founding")
    b = add(sim, "b")
    sim.run_until(lambda: statuses(a) == {"a": "DONOR", "b": RECOVERING}, 10, "a recovery")
    assert statuses(b) == {"a": "DONOR", "b": RECOVERING}  # the same answer at b
    sim.run_until(lambda: settled([a, b]), 10, "both ONLINE")
    c = add(sim, "c")
    sim.run_until(lambda: settled([a, b, c]), 10, "c ONLINE too")
    c.leave()
    sim.run_until(lambda: not c.alive, 10, "c left")
    for m in (a, b):  # c announced OFFLINE before the view without it
        [(_, anns)] = [x for vid, x in h.statuses_by_view(m).items()
                       if c.address.uid in x[0]][-1:]
        assert anns[-1] == (c.address.uid, OFFLINE), anns
    h.check_statuses()
    h.check_recovery()


def test_a_recovery_that_times_out_is_error_everywhere_and_the_member_leaves():
    sim = Simulation(11)
    h = History(sim)
    a = add(sim, "a", get=False)  # no get_state: nobody sends the state
    sim.run_until(lambda: a.view is not None, 5, "founding")
    b = add(sim, "b")
    sim.run_until(lambda: statuses(a).get("b") == ERROR, 10, "b in ERROR at a")
    sim.run_until(lambda: not b.alive and a.view is not None and len(a.view) == 1, 10,
                  "b gone")
    assert b.left.reason == "recovery failed: no state from the donor a within 3 s"
    h.check_statuses()
    assert statuses(a) == {"a": ONLINE}


def test_a_joiner_whose_donor_is_cut_off_fails_at_the_next_view():
    """The donor's state never reaches the joiner: cut off as it sends it. The joiner's
    next view has no donor, so its recovery fails at once (ERROR in that view's exchange)
    and it leaves, rather than waiting out the timeout."""
    sim = Simulation(3)
    h = History(sim)
    a = add(sim, "a")
    sim.run_until(lambda: a.view is not None, 5, "founding")
    b = add(sim, "b")
    get = a.stack.layer("state_transfer").get_state

    def cut_off():
        sim.partition([a], [b])
        return get()
    a.stack.layer("state_transfer").get_state = cut_off
    sim.run_until(lambda: b.left is not None, 10, "b gave up")
    assert b.left.reason == "recovery failed: the donor a left before the state came"
    assert sim.now < CFG.state_transfer.timeout_s + 2  # not the timeout
    last = h.statuses_by_view(b)
    assert list(last.values())[-1][0][b.address.uid] == ERROR
    h.check_statuses()
    h.check_recovery()
