"""PRIMARY in a sandwich: the state exchange after every view (STATE from every member before
the view goes up), quorum rules, primary ids, interrupted rounds, attributes, NotPrimary."""
import json

import pytest

from raygroups.stack.discovery.store import MemoryStore, ScheduledStoreClient
from raygroups.stack.config import StackConfig
from raygroups.stack.errors import ConfigError, NotPrimary
from raygroups.stack.events import CollectExchange, ExchangeResult, GetPhysical, Writable
from raygroups.stack.message import INTERNAL, Message
from raygroups.stack.primary import (LEASE, RECOVERING, ONLINE, STATE, MemberAttributes, Primary,
                                     PrimaryConfig, SetStatus)
from raygroups.stack.view import View, ViewChange, ViewId

from .sandwich import Sandwich

PHYS = ("10.0.0.1", 7800)


def make(seed=0, **cfg):
    s = Sandwich(Primary(PrimaryConfig(**cfg)), answers={GetPhysical: PHYS}, seed=seed)
    s.b, s.c, s.d, s.e = (s.addr(n) for n in "BCDE")
    s.counter = 0
    s.current = None
    return s


def change(s, *members, coord=None):
    """GMS delivers the next view (counter + 1) with these members."""
    s.counter += 1
    view = View(ViewId(coord or members[0], s.counter), members)
    prev, s.current = s.current, view
    s.up_event(ViewChange(view, prev))
    return view


def vid(view):
    return [view.view_id.coord.uid, view.view_id.id]


def state(sender, view, pid=0, members=(), attrs=None, extra=None):
    return Message(None, b"", INTERNAL,
                   {9: [STATE, vid(view), pid, [m.uid for m in members],
                        attrs if attrs is not None else {"status": ONLINE}, extra or {}]}, sender)


def exchange(s, view, pids=None, members=None, extra=None):
    """Every member's STATE (``pids``/``members``/``extra`` by member)."""
    pids, members, extra = pids or {}, members or {}, extra or {}
    s.up(*[state(m, view, pids.get(m, 0), members.get(m, ()), extra=extra.get(m))
           for m in view.members])


def delivered_views(s):
    return [e.view for e in s.above.events_of(ViewChange)]


def writable(s):
    return [e.writable for e in s.above.events_of(Writable)]


def test_the_view_is_held_until_every_members_state_arrived():
    s = make()
    v = change(s, s.local, s.b, s.c)
    [st] = s.below.take()
    assert st.dest is None and st.flags == INTERNAL
    assert st.headers[9] == [STATE, vid(v), 0, [],
                             {"address": PHYS[0], "port": PHYS[1], "status": ONLINE,
                              "bootstrap": True}, {},
                             []]  # no ambiguous attempts
    assert delivered_views(s) == [] and writable(s) == [False]
    s.up(state(s.local, v), state(s.b, v))
    app = Message(None, b"early", 0, {}, s.b)  # B finished its round first and sends
    s.up(app)
    assert delivered_views(s) == [] and s.above.messages == []
    s.up(state(s.c, v))
    [got] = delivered_views(s)
    assert got.members == v.members and got.primary and got.primary_id == 1
    assert writable(s) == [False, True]
    assert [m.payload for m in s.above.messages] == [b"early"]  # after the view
    kinds = [type(e) for e in s.above.events]
    assert kinds.index(ExchangeResult) < kinds.index(ViewChange)


def test_messages_around_a_state_in_one_batch_keep_their_order():
    s = make()
    v = change(s, s.local, s.b)
    s.up(state(s.local, v))
    before, after = Message(None, b"1", 0, {}, s.b), Message(None, b"2", 0, {}, s.b)
    s.up(before, state(s.b, v), after)
    assert [m.payload for m in s.above.messages] == [b"1", b"2"]
    assert s.above.batches == [[before], [after]]


def test_first_formation_needs_a_majority_of_expected_size():
    s = make(expected_size=5)
    v = change(s, s.local, s.b)
    exchange(s, v)
    assert delivered_views(s)[-1].primary is False and delivered_views(s)[-1].primary_id == 0
    v = change(s, s.local, s.b, s.c)
    exchange(s, v)
    # max + 1 = 1, but never below the view counter (2): ids stay unique even when an
    # earlier round was interrupted somewhere
    assert delivered_views(s)[-1].primary is True
    assert delivered_views(s)[-1].primary_id == max(1, v.view_id.id) == 2
    assert s.layer.last_members == [m.uid for m in v.members]


def test_a_lone_founder_is_primary_with_the_default_expected_size():
    s = make()
    v = change(s, s.local)
    s.up(state(s.local, v))
    assert delivered_views(s)[-1].primary and delivered_views(s)[-1].primary_id == 1


@pytest.mark.parametrize("present,primary", [(2, False), (3, True), (5, True)])
def test_quorum_is_a_strict_majority_of_the_last_primary_views_members(present, primary):
    s = make(expected_size=100)
    last = [s.local, s.b, s.c, s.d, s.e]
    x = s.addr("X")  # a newcomer does not count towards the quorum
    v = change(s, *last[:present], x)
    exchange(s, v, pids={m: 4 for m in last}, members={m: last for m in last})
    got = delivered_views(s)[-1]
    assert got.primary is primary and got.primary_id == (5 if primary else 0)


def test_an_even_split_is_not_quorate():
    s = make()
    last = [s.local, s.b, s.c, s.d]
    v = change(s, s.local, s.b)
    exchange(s, v, pids={s.local: 2, s.b: 2}, members={s.local: last, s.b: last})
    assert delivered_views(s)[-1].primary is False
    with pytest.raises(NotPrimary):
        s.down(Message(None, b"x"))


def test_the_highest_primary_id_decides_and_the_last_primary_is_remembered():
    s = make(expected_size=100)
    old, newer = [s.b, s.c, s.d], [s.local, s.b, s.c]
    v = change(s, s.local, s.b, s.c)
    exchange(s, v, pids={s.local: 3, s.b: 7, s.c: 3},
             members={s.local: old, s.b: newer, s.c: old})
    got = delivered_views(s)[-1]
    assert got.primary and got.primary_id == 8
    assert s.layer.last_pid == 8 and s.layer.last_members == [m.uid for m in v.members]
    # our next STATE carries it
    v2 = change(s, s.local, s.b)
    assert s.below.sent[-1].headers[9][1:4] == [vid(v2), 8, [m.uid for m in v.members]]


def test_a_non_primary_view_does_not_change_the_last_primary():
    s = make()
    v = change(s, s.local, s.b, s.c)
    exchange(s, v)
    assert s.layer.last_pid == 1
    v2 = change(s, s.local)  # 1 of 3
    s.up(state(s.local, v2, 1, v.members))
    assert delivered_views(s)[-1].primary is False and s.layer.last_pid == 1
    assert s.layer.last_members == [m.uid for m in v.members]


def test_a_member_learns_the_last_primary_from_a_non_primary_view_and_never_bootstraps_past_it():
    """We never were in a primary view; in a non-primary one, B reports the last primary
    (id 4: B, C, D, E). We know it from then on: our next state carries it, and a view of
    members who never saw a primary but may bootstrap (a majority of ``expected_size``) is
    not a first start once B is gone (the simulator's seed 15980638: joiners formed primary
    10 holding none of primary 4's members, two of which lived on)."""
    s = make(expected_size=3)
    last = [s.b, s.c, s.d, s.e]
    v = change(s, s.b, s.local)
    exchange(s, v, pids={s.b: 4}, members={s.b: last})
    assert delivered_views(s)[-1].primary is False
    assert s.layer.last_pid == 4 and s.layer.last_members == [m.uid for m in last]
    f, g = s.addr("F"), s.addr("G")
    v2 = change(s, s.local, f, g)  # B gone; F and G never saw a primary
    assert s.below.sent[-1].headers[9][2:4] == [4, [m.uid for m in last]]
    s.up(state(s.local, v2, 4, last), state(f, v2), state(g, v2))
    assert delivered_views(s)[-1].primary is False


def test_an_interrupted_round_delivers_the_old_view_as_non_primary_with_what_it_held():
    s = make()
    v1 = change(s, s.local, s.b, s.c)
    s.up(state(s.local, v1), state(s.b, v1))
    held = Message(None, b"held", 0, {}, s.b)
    s.up(held)
    v2 = change(s, s.local, s.b)  # C crashed before its STATE
    assert s.layer.stats["rounds_interrupted"] == 1
    [first] = delivered_views(s)
    assert first.view_id == v1.view_id and first.primary is False and first.primary_id == 0
    assert s.above.messages == [held]
    ev = s.above.events_of(ViewChange)[0]
    assert ev.previous is None
    s.up(state(s.c, v1))  # C's late STATE of the old round
    assert s.layer.stats["stale_states"] == 1
    exchange(s, v2)
    assert [v.view_id for v in delivered_views(s)] == [v1.view_id, v2.view_id]
    assert delivered_views(s)[-1].primary
    assert s.above.events_of(ViewChange)[-1].previous == v1


def test_an_interrupted_round_that_could_have_been_primary_binds_later_components():
    """The campaign's split brain in miniature: a merge view of five is primary at the
    members that finished its round, interrupted here; we then split off with one other
    member. By the last primary we know (us, B, C) two of three is a majority, but the merge
    may be primary elsewhere (the other three, a majority of it, go on as primary): we hold
    two of its five, so we must not be primary. Once a view holds a majority of it too, it
    is primary, and the attempt is settled."""
    s = make()
    v1 = change(s, s.local, s.b, s.c)
    exchange(s, v1)
    assert delivered_views(s)[-1].primary and s.layer.last_pid == 1
    merge = change(s, s.local, s.b, s.c, s.d, s.e)
    s.up(state(s.local, merge, 1, v1.members))  # the others' STATEs never come here
    lone = change(s, s.local, s.b)  # interrupted: cut off with B (who also missed it)
    assert delivered_views(s)[-1].view_id == merge.view_id
    assert not delivered_views(s)[-1].primary
    sent = s.below.sent[-1].headers[9]
    assert sent[6] == [[vid(merge), [m.uid for m in merge.members]]], "we report the attempt"
    s.up(Message(None, b"", INTERNAL, {9: sent}, s.local), state(s.b, lone, 1, v1.members))
    assert delivered_views(s)[-1].primary is False, "2 of the merge's 5: not primary"
    assert s.layer.stats["blocked_by_attempts"] == 1 and s.layer.last_pid == 1
    back = change(s, s.local, s.b, s.c, s.d, s.e)
    exchange(s, back, pids={m: 1 for m in back.members}, members={m: v1.members
                                                                  for m in back.members})
    assert delivered_views(s)[-1].primary and s.layer.attempts == {}


def test_stale_and_foreign_states_are_counted_and_ignored():
    s = make()
    v = change(s, s.local, s.b)
    other = View(ViewId(s.b, 99), (s.b, s.local))
    s.up(state(s.b, other), state(s.c, v), state(s.local, v), state(s.local, v))
    assert s.layer.stats["stale_states"] == 3  # another view, not a member, a duplicate
    assert delivered_views(s) == []
    s.up(state(s.b, v))
    assert len(delivered_views(s)) == 1
    s.up(state(s.b, v))  # no round any more
    assert s.layer.stats["stale_states"] == 4


def test_a_view_without_us_is_delivered_at_once_as_non_primary():
    s = make()
    v = change(s, s.local, s.b)
    exchange(s, v)
    s.below.take()
    v2 = change(s, s.b, s.c)
    assert s.below.sent == []  # no STATE: nothing to agree on
    assert delivered_views(s)[-1].view_id == v2.view_id
    assert delivered_views(s)[-1].primary is False and s.layer.round is None


def test_attributes_come_from_the_states_the_same_on_every_member():
    s = make(attributes={"zone": "eu"})
    v = change(s, s.local, s.b, s.c)
    [st] = s.below.take()
    assert st.headers[9][4] == {"address": PHYS[0], "port": PHYS[1], "status": ONLINE,
                                "bootstrap": True, "zone": "eu"}
    last = [s.local, s.b]
    s.up(Message(None, b"", INTERNAL, {9: [STATE, vid(v), 2, [m.uid for m in last],
                                           {"status": ONLINE, "zone": "eu"}, {}]}, s.local),
         Message(None, b"", INTERNAL, {9: [STATE, vid(v), 2, [m.uid for m in last],
                                           {"status": ONLINE, "zone": "us"}, {}]}, s.b),
         Message(None, b"", INTERNAL, {9: [STATE, vid(v), 0, [],
                                           {"status": RECOVERING}, {}]}, s.c))
    attrs = s.down_event(MemberAttributes())
    assert attrs == {
        s.local: {"status": ONLINE, "zone": "eu", "primary_id": 2, "joiner": False},
        s.b: {"status": ONLINE, "zone": "us", "primary_id": 2, "joiner": False},
        s.c: {"status": RECOVERING, "primary_id": 0, "joiner": True}}
    attrs[s.b] = None  # a copy
    assert s.down_event(MemberAttributes())[s.b]["zone"] == "us"


def test_set_status_is_announced_in_the_next_exchange():
    s = make()
    assert s.down_event(SetStatus(RECOVERING)) is None
    change(s, s.local)
    assert s.below.sent[-1].headers[9][4]["status"] == RECOVERING


def test_collect_exchange_gathers_the_layers_above_and_exchange_result_returns_them():
    s = make()
    s.above.answers[CollectExchange] = lambda ev: {**ev.data, "seq": [1, 2]}
    v = change(s, s.local, s.b)
    assert s.below.sent[-1].headers[9][5] == {"seq": [1, 2]}
    exchange(s, v, extra={s.local: {"seq": [1, 2]}, s.b: {"seq": [3]}})
    [res] = s.above.events_of(ExchangeResult)
    assert res.data == {s.local: {"seq": [1, 2]}, s.b: {"seq": [3]}}


def test_no_exchange_result_without_states():
    s = make()
    change(s, s.b, s.c)
    assert s.above.events_of(ExchangeResult) == []


def test_sends_outside_a_primary_component_raise_not_primary_internal_ones_pass():
    s = make()
    with pytest.raises(NotPrimary):
        s.down(Message(None, b"before any view"))
    v = change(s, s.local, s.b)
    with pytest.raises(NotPrimary):
        s.down(Message(None, b"during the exchange"))
    s.down(Message(None, b"stack", INTERNAL))
    assert s.below.sent[-1].payload == b"stack"
    exchange(s, v)
    s.down(Message(s.b, b"now"))
    assert s.below.sent[-1].payload == b"now"
    assert s.layer.stats["primary_views"] == 1


def test_other_events_pass_up_and_down():
    s = make()
    ev = Writable("nakack", False)
    s.up_event(ev)
    assert s.above.events == [ev]
    assert s.down_event(GetPhysical()) == PHYS


@pytest.mark.parametrize("header", [
    5, [], [STATE], [1, "VID", 0, [], {}, {}], [STATE, "VID", "0", [], {}, {}],
    [STATE, "VID", True, [], {}, {}], [STATE, "VID", 1.0, [], {}, {}],
    [STATE, "VID", 0, [], [], {}], [STATE, "VID", 0, [], {}, []], [STATE, "VID", 0, 5, {}, {}],
    [STATE, "VID", 0, [], {}], {"a": 1},
], ids=repr)
def test_malformed_states_are_counted_never_raised(header):
    s = make()
    v = change(s, s.local, s.b)
    h = [vid(v) if x == "VID" else x for x in header] if type(header) is list else header
    s.up(Message(None, b"", INTERNAL, {9: h}, s.b), state(s.local, v))
    assert s.layer.stats["malformed_header"] == 1
    assert delivered_views(s) == []  # B's STATE is still awaited
    s.up(state(s.b, v))
    assert delivered_views(s)[-1].primary


def test_a_state_with_unusable_primary_members_does_not_lose_the_view():
    """B's STATE names its last primary's members as lists (garbage from the wire): it is
    counted as malformed, and the application still sees every view, in order."""
    s = make()
    v1 = change(s, s.local, s.b, s.c)
    s.up(Message(None, b"", INTERNAL, {9: [STATE, vid(v1), 3, [[1], [2]], {}, {}]}, s.b))
    s.up(state(s.local, v1), state(s.c, v1))
    assert s.layer.stats["malformed_header"] == 1
    v2 = change(s, s.local, s.c)
    exchange(s, v2)
    assert [v.view_id for v in delivered_views(s)] == [v1.view_id, v2.view_id]


def test_a_first_start_needs_a_majority_of_members_free_to_bootstrap():
    """A view whose members know no primary component is a first start: primary when the
    members whose state allows it (a restarted member actor says no) are a majority of
    expected_size, so fresh incarnations never start a new lineage, and one of them in the
    view does not hold up the launch's members."""
    s = make(expected_size=3)
    v = change(s, s.local, s.b)
    s.up(state(s.local, v, attrs={"status": ONLINE, "bootstrap": True}),
         state(s.b, v, attrs={"status": ONLINE, "bootstrap": False}))
    assert not delivered_views(s)[-1].primary
    assert s.layer.stats["first_start_refused"] == 1 and s.layer.last_pid == 0
    v = change(s, s.local, s.b, s.c)
    s.up(state(s.local, v, attrs={"status": ONLINE, "bootstrap": True}),
         state(s.b, v, attrs={"status": ONLINE, "bootstrap": False}),
         state(s.c, v, attrs={"status": ONLINE}))  # a state from before the flag: may
    assert delivered_views(s)[-1].primary and s.layer.last_pid == 2


def test_a_member_that_may_not_bootstrap_says_so_in_its_state():
    s = make(bootstrap=False)
    change(s, s.local, s.b)
    [st] = s.below.take()
    assert st.headers[9][4]["bootstrap"] is False


# -- the even-split tie-breaker (primary.tie_breaker="store") ---------------------------------
def tied(store=None, seed=0, **cfg):
    """A member with a store client (``store``: a MemoryStore; latency 0.01 s per call)
    whose last primary was (us, B, C, D), primary id 4."""
    s = make(tie_breaker="store", seed=seed, **cfg)
    s.store = store if store is not None else MemoryStore()
    s.host.store = ScheduledStoreClient(s.store, s.host.call_later, lambda: 0.01)
    s.last = [s.local, s.b, s.c, s.d]
    return s


def lease_sent(s):
    return [m.headers[9] for m in s.below.sent if m.headers[9][0] == LEASE]


def run_exchange(s, *members):
    """A view of ``members`` (first one coordinator), their states (the last primary as
    ``tied`` says), the store calls, and the LEASE the coordinator multicast looped back."""
    v = change(s, *members)
    exchange(s, v, pids={m: 4 for m in members}, members={m: s.last for m in members})
    s.advance(1.0)
    for h in lease_sent(s):
        if h[1] == vid(v):
            s.up(Message(None, b"", INTERNAL, {9: h}, s.local))
    return v


def test_an_even_split_with_the_lease_won_is_primary():
    s = tied()
    v = run_exchange(s, s.local, s.b)
    assert lease_sent(s) == [[LEASE, vid(v), True]]
    got = delivered_views(s)[-1]
    assert got.primary and got.primary_id == 5
    [(name, text)] = s.store.files("test").items()
    assert name.startswith("primary-4-") and name.endswith(".lease")
    assert json.loads(text)["half"] == sorted(m.uid.hex() for m in v.members)


def test_the_same_half_wins_again_with_a_joiner():
    """The winner's round was interrupted before its LEASE (a joiner came): the next view,
    the same half of the split component and the joiner, reads its lease back and wins."""
    s = tied()
    v = change(s, s.local, s.b)
    exchange(s, v, pids={m: 4 for m in v.members}, members={m: s.last for m in v.members})
    s.advance(1.0)  # the lease is taken ...
    assert s.store.calls["put"] == 1 and lease_sent(s) == [[LEASE, vid(v), True]]
    x = s.addr("X")
    v2 = run_exchange(s, s.local, s.b, x)  # ... but the next view came before the LEASE
    assert s.store.calls["get"] == 1 and lease_sent(s)[-1] == [LEASE, vid(v2), True]
    assert delivered_views(s)[-1].primary and delivered_views(s)[-1].primary_id == 5
    # another half of the same component loses
    v3 = run_exchange(s, s.local, s.c)
    assert lease_sent(s)[-1] == [LEASE, vid(v3), False]


def test_an_even_split_with_the_lease_lost_is_not_primary_and_the_same_members_win_again():
    store = MemoryStore()
    winner, loser = tied(store), tied(store, seed=1)
    winner.last = loser.last = [winner.local, winner.b, loser.local, loser.b]
    v = run_exchange(winner, winner.local, winner.b)
    assert delivered_views(winner)[-1].primary
    run_exchange(loser, loser.local, loser.b)  # the other half of the same last primary
    assert lease_sent(loser)[-1][2] is False and not delivered_views(loser)[-1].primary
    assert loser.layer.stats["leases_lost"] == 1
    # the winning half again, in a later view (the round re-run): reads back its own lease
    v2 = run_exchange(winner, winner.local, winner.b)
    assert v2.view_id.id > v.view_id.id and lease_sent(winner)[-1] == [LEASE, vid(v2), True]


def test_fewer_than_half_is_never_primary_and_a_majority_never_touches_the_store():
    s = tied()
    run_exchange(s, s.local)  # 1 of 4
    assert not delivered_views(s)[-1].primary and lease_sent(s) == []
    run_exchange(s, s.local, s.b, s.c)  # 3 of 4
    assert delivered_views(s)[-1].primary and lease_sent(s) == []
    assert sum(s.store.calls.values()) == 0 and s.layer.stats["ties"] == 0


def test_a_store_that_fails_loses_the_tie_after_its_retries():
    s = tied(tie_breaker_timeout_s=2.0, tie_breaker_retry_s=0.5)
    s.store.unavailable = True
    v = change(s, s.local, s.b)
    exchange(s, v, pids={m: 4 for m in v.members}, members={m: s.last for m in v.members})
    s.advance(5.0)
    assert lease_sent(s) == [[LEASE, vid(v), False]] and s.store.calls["put"] == 4
    s.up(Message(None, b"", INTERNAL, {9: lease_sent(s)[0]}, s.local))
    assert not delivered_views(s)[-1].primary


def test_members_wait_for_the_coordinators_lease_whenever_it_comes():
    s = tied()
    v = change(s, s.b, s.local)  # B coordinates: we take no lease, we wait for B's
    s.up(Message(None, b"", INTERNAL, {9: [LEASE, vid(v), True]}, s.c))  # not the coordinator
    assert s.layer.stats["stale_leases"] == 1
    s.up(Message(None, b"", INTERNAL, {9: [LEASE, vid(v), True]}, s.b))  # before the states
    assert delivered_views(s) == []
    exchange(s, v, pids={m: 4 for m in v.members}, members={m: s.last for m in v.members})
    s.advance(1.0)
    assert lease_sent(s) == [] and sum(s.store.calls.values()) == 0
    assert delivered_views(s)[-1].primary and delivered_views(s)[-1].primary_id == 5


def test_an_interrupted_tie_is_an_ambiguous_attempt():
    s = tied()
    v = change(s, s.b, s.local)
    exchange(s, v, pids={m: 4 for m in v.members}, members={m: s.last for m in v.members})
    change(s, s.local, s.c, s.e)  # before B's LEASE: it may have won at B
    assert s.below.sent[-1].headers[9][6] == [[vid(v), [s.b.uid, s.local.uid]]]


def test_the_tie_breaker_needs_a_store_and_a_known_value():
    with pytest.raises(ConfigError, match="discovery store"):
        StackConfig.lan(primary__tie_breaker="store")
    with pytest.raises(ConfigError, match="tie_breaker"):
        StackConfig.lan(primary__tie_breaker="coin")
    cfg = StackConfig.lan(primary__tie_breaker="store", discovery="file:///tmp/x")
    assert cfg.agreed()["primary.tie_breaker"] == "store"


@pytest.mark.parametrize("bad", ["abc", "3", 0, -1, 2.5, True, None])
def test_expected_size_is_a_number_of_members(bad):
    with pytest.raises(ConfigError, match="expected_size is a number of members") as e:
        StackConfig.local(primary__expected_size=bad)
    assert repr(bad) in str(e.value)
    assert StackConfig.local(primary__expected_size=3).primary.expected_size == 3
