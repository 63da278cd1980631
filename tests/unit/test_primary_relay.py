"""PRIMARY's relayed state exchange (views larger than ``relay_above``): every member
unicasts its state to the view's first member, which multicasts them all in one STATES
message; every member then computes exactly what seed 002's all-to-all exchange gives -
quorum, primary id, joiners, attributes - from the same states."""
import pytest

from raygroups.stack.events import ExchangeResult
from raygroups.stack.message import INTERNAL, Message
from raygroups.stack.primary import (LEASE, ONLINE, REPORT, STATE, STATES, MemberAttributes,
                                     Primary)
from raygroups.stack.view import View, ViewId

from .test_primary import (PHYS, change, delivered_views, exchange, lease_sent, make, tied,
                           vid)


def relay_round(s, view, pids=None, members=None, attrs=None):
    """As the relay (``s.local`` first in ``view``): every other member's REPORT comes in;
    returns the STATES message the relay multicast."""
    pids, members, attrs = pids or {}, members or {}, attrs or {}
    for a in view.members[1:]:
        last = members.get(a, ())
        s.up(Message(s.local, b"", INTERNAL,
                     {9: [REPORT, vid(view), pids.get(a, 0), delta(view, last),
                          attrs.get(a, {"status": ONLINE}), {}]}, a))
    [out] = [m for m in s.below.take() if m.headers[9][0] == STATES]
    return out


def delta(view, last):
    if not last:
        return None
    uids = {m.uid for m in last}
    return [[i for i, a in enumerate(view.members) if a.uid not in uids],
            [m.uid for m in last if m not in view.members]]


def test_a_member_reports_to_the_relay_and_installs_from_its_states():
    s = make(relay_above=0)
    v = change(s, s.b, s.local, s.c)
    [rep] = s.below.take()
    assert rep.dest == s.b and rep.flags == INTERNAL  # a unicast to the first member
    assert rep.headers[9] == [REPORT, vid(v), 0, None,
                              {"address": PHYS[0], "port": PHYS[1], "status": ONLINE,
                               "bootstrap": True}, {}, []]
    assert delivered_views(s) == []
    entries = [[0, 0, {"status": ONLINE, "n": i}, {"x": i}] for i in range(3)]
    s.up(Message(None, b"", INTERNAL, {9: [STATES, vid(v), entries, [None]]}, s.b))
    [got] = delivered_views(s)
    assert got.primary and got.primary_id == max(1, v.view_id.id)
    [res] = s.above.events_of(ExchangeResult)
    assert res.data == {s.b: {"x": 0}, s.local: {"x": 1}, s.c: {"x": 2}}
    attrs = s.down_event(MemberAttributes())
    assert attrs[s.c]["n"] == 2 and attrs[s.local]["primary_id"] == 0


def test_the_relay_multicasts_once_it_has_every_report_even_early_ones():
    s = make(relay_above=0)
    nxt = View(ViewId(s.local, 1), (s.local, s.b, s.c))
    # B's REPORT comes before the relay installed the view: it waits
    s.up(Message(s.local, b"", INTERNAL,
                 {9: [REPORT, vid(nxt), 0, None, {"status": ONLINE}, {}]}, s.b))
    v = change(s, s.local, s.b, s.c)
    assert v.view_id == nxt.view_id
    assert [m for m in s.below.take() if m.headers[9][0] == STATES] == []  # C is missing
    s.up(Message(s.local, b"", INTERNAL,
                 {9: [REPORT, vid(v), 0, None, {"status": ONLINE}, {}]}, s.c))
    [out] = s.below.take()
    assert out.dest is None and out.headers[9][0] == STATES and len(out.headers[9][2]) == 3
    assert s.layer.stats["states_relayed"] == 1
    s.up(Message(None, b"", INTERNAL, out.headers, s.local))  # its own multicast comes back
    assert delivered_views(s)[-1].primary


@pytest.mark.parametrize("present,primary", [(2, False), (3, True), (5, True)])
def test_the_relayed_quorum_is_the_all_to_all_quorum(present, primary):
    results = []
    for relay_above in (100, 0):
        s = make(expected_size=100, relay_above=relay_above)
        last = [s.local, s.b, s.c, s.d, s.e]
        x = s.addr("X")
        v = change(s, *last[:present], x)
        if relay_above:
            exchange(s, v, pids={m: 4 for m in last}, members={m: last for m in last})
        else:
            s.below.take()
            out = relay_round(s, v, pids={m: 4 for m in last},
                              members={m: last for m in last})
            # every member of the last primary reports the same list: it travels once
            # (beside None: no last primary, for X and for us, fresh)
            assert len(out.headers[9][3]) == 2
            s.up(Message(None, b"", INTERNAL, out.headers, s.local))
        got = delivered_views(s)[-1]
        results.append((got.primary, got.primary_id, s.layer.last_members))
    assert results[0] == results[1]
    assert results[0][0] is primary and results[0][1] == (5 if primary else 0)


def test_a_last_primary_with_members_outside_the_view_survives_the_delta():
    s = make(relay_above=0)
    gone = [s.addr("Y"), s.addr("Z")]
    v = change(s, s.local, s.b, s.c)
    s.below.take()
    last = [s.local, s.b] + gone  # 2 of 4 present: not a majority
    s.layer.last_pid, s.layer.last_members = 6, [m.uid for m in last]
    v2 = change(s, s.local, s.b, s.c)
    mine = [m for m in s.below.take() if m.headers[9][0] == STATES] or None
    assert mine is None
    out = relay_round(s, v2, pids={s.b: 6}, members={s.b: last})
    s.up(Message(None, b"", INTERNAL, out.headers, s.local))
    got = delivered_views(s)[-1]
    assert got.view_id == v2.view_id and got.primary is False
    assert Primary._undelta(v2, out.headers[9][3][0]) == [m.uid for m in last]
    assert v.view_id != v2.view_id


@pytest.mark.parametrize("header", [
    [STATES, "VID", "x", []], [STATES, "VID", [[0, 0, {}, {}]], [None]],
    [STATES, "VID", [[0, 5, {}, {}]] * 2, [None]], [STATES, "VID", [[0, 0, [], {}]] * 2, [None]],
    [STATES, "VID", [[0, 0, {}, {}]] * 2, [[[9], []]]],
    [STATES, "VID", [[0, 0, {}, {}]] * 2, [[["a"], []]]], [STATES, "VID"],
    [REPORT, "VID", 0, None, {}], [REPORT, "VID", "0", None, {}, {}],
], ids=repr)
def test_malformed_relay_messages_are_counted_never_raised(header):
    s = make(relay_above=0)
    v = change(s, s.b, s.local)
    h = [vid(v) if x == "VID" else x for x in header]
    s.up(Message(None, b"", INTERNAL, {9: h}, s.b))
    assert s.layer.stats["malformed_header"] == 1
    assert delivered_views(s) == []
    s.up(Message(None, b"", INTERNAL, {9: [STATES, vid(v), [[0, 0, {}, {}]] * 2, [None]]}, s.b))
    assert delivered_views(s)[-1].primary


def test_stale_relay_messages_are_ignored():
    s = make(relay_above=0)
    v1 = change(s, s.local, s.b)
    v2 = change(s, s.local, s.b, s.c)
    s.up(Message(None, b"", INTERNAL, {9: [STATES, vid(v1), [[0, 0, {}, {}]] * 2, [None]]},
                 s.local))
    s.up(Message(s.local, b"", INTERNAL, {9: [REPORT, vid(v1), 0, None, {}, {}]}, s.b))
    assert s.layer.stats["stale_states"] == 2
    assert delivered_views(s)[-1].view_id == v1.view_id and not delivered_views(s)[-1].primary
    assert s.layer.round["vid"] == vid(v2)
    # and an all-to-all STATE in a relayed round is not what it waits for
    s.up(Message(None, b"", INTERNAL, {9: [STATE, vid(v2), 0, [], {}, {}]}, s.b))
    assert s.layer.round is not None


def test_a_relayed_even_split_waits_for_the_relays_lease():
    """The tie-breaker in a relayed exchange: the relay (the view's first member) takes the
    lease once every member has the STATES; every member applies its LEASE alike."""
    s = tied(relay_above=0)
    s.layer.last_pid, s.layer.last_members = 4, [m.uid for m in s.last]
    v = change(s, s.local, s.b)
    states = relay_round(s, v, pids={s.b: 4}, members={s.b: s.last})
    s.up(states)  # our own multicast comes back
    assert delivered_views(s) == [] and s.layer.stats["ties"] == 1
    s.advance(1.0)
    [lease] = lease_sent(s)
    assert lease == [LEASE, vid(v), True]
    s.up(Message(None, b"", INTERNAL, {9: lease}, s.local))
    assert delivered_views(s)[-1].primary and delivered_views(s)[-1].primary_id == 5
