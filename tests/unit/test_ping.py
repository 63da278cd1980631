"""PING discovery in a sandwich: requests, responses, rounds, multicast and static modes."""
import pytest

from raygroups.stack.discovery.ping import REQ, RSP, DiscoveryConfig, Ping
from raygroups.stack.events import (AddPhysical, EmitTo, FindMembers, GetPhysical,
                                    MembershipStatus, PingData, ViewInstalled)
from raygroups.stack.layer import MCAST
from raygroups.stack.message import CONTROL, Message
from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich

OWN_PHYS = ("10.0.0.1", 7800)


def make(**cfg):
    opts = dict(timeout_s=0.3, num_pings=3)
    opts.update(cfg)
    s = Sandwich(Ping(DiscoveryConfig(**opts)))
    s.phys = {None: OWN_PHYS}
    s.below.answers[GetPhysical] = lambda ev: s.phys.get(ev.addr)
    s.found = []
    return s


def find(s):
    s.down_event(FindMembers(s.found.append))


def emits(s):
    return [e for e in s.below.events if type(e) is EmitTo]


def request(s, sender, phys=("10.0.0.7", 7801)):
    return Message(None, b"", CONTROL, {1: [REQ, sender.name, list(phys) if phys else None]},
                   sender)


def response(s, sender, is_coord, joined, coord=None, phys=("10.0.0.7", 7801), coord_phys=None):
    return Message(s.local, b"", CONTROL, {1: [RSP, sender.name, list(phys), is_coord, joined,
                                               coord.uid if coord else None,
                                               list(coord_phys) if coord_phys else None]}, sender)


def test_no_answer_while_not_connecting():
    s = make()
    s.up(request(s, s.addr("X")))
    assert s.below.sent == [] and s.layer.stats["pings_received"] == 1


def test_request_answered_with_membership_status():
    s = make()
    b = s.addr("B")
    view = View(ViewId(s.local, 3), (s.local, b))
    s.down_event(ViewInstalled(view))
    assert s.below.events_of(ViewInstalled) == [ViewInstalled(view)]  # passed down
    x = s.addr("X")
    s.up(request(s, x))
    assert AddPhysical(x, ("10.0.0.7", 7801)) in s.below.events
    [rsp] = s.below.sent
    assert rsp.dest == x and rsp.flags == CONTROL
    assert rsp.headers[1] == [RSP, s.local.name, list(OWN_PHYS), True, True, s.local.uid,
                              list(OWN_PHYS)]


def test_member_answers_with_its_coordinator():
    s = make()
    a = s.addr("A")
    s.phys[a] = ("10.0.0.9", 7000)
    s.down_event(ViewInstalled(View(ViewId(a, 3), (a, s.local))))
    s.up(request(s, s.addr("X"), phys=None))
    assert s.below.events_of(AddPhysical) == []
    [rsp] = s.below.sent
    assert rsp.headers[1][3:] == [False, True, a.uid, ["10.0.0.9", 7000]]


def test_joiner_answers_not_joined():
    s = make()
    s.down_event(MembershipStatus(False, False))
    s.up(request(s, s.addr("X")))
    assert s.below.sent[0].headers[1][3:] == [False, False, None, None]


def test_multicast_round_pings_the_group_and_ends_at_the_timeout():
    s = make(break_on_coord_rsp=True)
    find(s)
    s.advance(0)
    assert [e.phys for e in emits(s)] == [MCAST]
    e = emits(s)[0]
    assert e.msg.dest is None and e.msg.flags == CONTROL
    assert e.msg.headers[1] == [REQ, s.local.name, list(OWN_PHYS)]
    b = s.addr("B")
    s.up(response(s, b, False, False))  # another joiner: not a reason to stop
    s.advance(0.29)
    assert len(emits(s)) == 3 and s.found == []
    s.advance(0.02)
    assert s.found == [[PingData(b, ["10.0.0.7", 7801], False, False, None)]]
    s.advance(5.0)
    assert len(emits(s)) == 3 and len(s.found) == 1
    assert s.layer.stats["pings_sent"] == 3


def test_static_mode_pings_every_initial_host_but_itself():
    hosts = (("10.0.0.5", 7800), OWN_PHYS, ("10.0.0.6", 7800))
    s = make(mode="static", initial_hosts=hosts, num_pings=2)
    find(s)
    s.advance(0.3)
    assert [e.phys for e in emits(s)] == [hosts[0], hosts[2]] * 2
    assert all(e.msg.headers[1][0] == REQ for e in emits(s))


def test_break_on_coord_rsp_ends_the_round_early():
    s = make(timeout_s=1.0)
    find(s)
    s.advance(0)
    a, c = s.addr("A"), s.addr("C")
    s.up(response(s, c, False, True, coord=a, coord_phys=("10.0.0.9", 7000)))
    assert s.found == []  # a member, not the coordinator
    assert AddPhysical(a, ("10.0.0.9", 7000)) in s.below.events
    s.up(response(s, a, True, True, coord=a))
    assert len(s.found) == 1
    assert {p.addr: (p.is_coord, p.joined, p.coord) for p in s.found[0]} == {
        c: (False, True, a), a: (True, True, a)}
    s.advance(5.0)
    assert len(emits(s)) == 1 and len(s.found) == 1  # the rest of the round was cancelled
    s.up(response(s, c, True, True))  # late answers are ignored
    assert len(s.found) == 1


def test_without_break_on_coord_rsp_the_round_runs_to_the_timeout():
    s = make(break_on_coord_rsp=False)
    find(s)
    a = s.addr("A")
    s.up(response(s, a, True, True, coord=a))
    assert s.found == []
    s.advance(0.3)
    assert len(emits(s)) == 3
    assert [[p.addr for p in r] for r in s.found] == [[a]]


def test_a_new_round_supersedes_the_old_one():
    s = make()
    first, second = [], []
    s.down_event(FindMembers(first.append))
    s.advance(0.15)
    s.down_event(FindMembers(second.append))
    s.advance(1.0)
    assert first == [] and second == [[]]
    assert len(emits(s)) == 2 + 3


def test_unrelated_messages_pass_up():
    s = make()
    m = Message(None, b"app", 0, {2: [0, 1]}, s.addr("B"))
    s.up(m)
    assert s.above.messages == [m]


@pytest.mark.parametrize("header", [5, [], [7], [REQ], [RSP, "x"], [REQ, "x", ["h"]],
                                    [REQ, "x", ["h", "port"]], [RSP, "x", None, 1, 1, b"bad", None],
                                    {}, {"a": 1}, [REQ, "x", {}],
                                    [REQ, "x", ["h", float("inf")]]], ids=repr)
def test_malformed_headers_are_counted_never_raised(header):
    s = make()
    s.down_event(MembershipStatus(True, True))
    find(s)
    s.up(Message(None, b"", CONTROL, {1: header}, s.addr("X")),
         Message(None, b"app", 0, {}, s.local))
    assert s.layer.stats["malformed_header"] == 1
    assert [m.payload for m in s.above.messages] == [b"app"]
