"""FD_SOCK (stack/fd_sock.py) in a sandwich, and SWIM's verification of a lost connection
(stack/swim.py, ``ConnectionLost``): the ring neighbour watched, a loss suspected and
verified, a goodbye or a departed member never suspected, re-picks on membership changes."""
from raygroups.stack.events import (ConnectionLost, GetPhysical, Leave, MemberDead,
                                    MembersChanged, ViewInstalled)
from raygroups.stack.fd_sock import FdSock, FdSockConfig
from raygroups.stack.message import Message
from raygroups.stack.swim import (ACK, NACK, PING, PING_REQ, REMOVE, RUMORS, SUSPECT, VERIFIED,
                                  Swim, SwimConfig)
from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich


class Handle:
    def __init__(self, watch, phys, uid, on_up, on_lost):
        self.watch, self.phys, self.uid = watch, phys, uid
        self.on_up, self.on_lost, self.closed = on_up, on_lost, False

    def close(self) -> None:
        self.closed = True


class FakeWatch:
    """The host's ``watch``: records the connections the layer asks for."""

    def __init__(self):
        self.handles: list[Handle] = []
        self.byes = 0

    def open(self, phys, uid, on_up, on_lost) -> Handle:
        h = Handle(self, phys, uid, on_up, on_lost)
        self.handles.append(h)
        return h

    def leaving(self) -> None:
        self.byes += 1

    @property
    def current(self) -> Handle:
        return self.handles[-1]


def phys_of(ev):
    return ("10.0.0.9", 7800 + sum(ev.addr.uid) % 100) if ev.addr is not None else None


def fd_sock(**cfg):
    layer = FdSock(FdSockConfig(**cfg))
    s = Sandwich(layer, start=False, answers={GetPhysical: phys_of, ConnectionLost: True})
    s.host.watch = FakeWatch()
    layer.start()
    return s, s.host.watch


def install(s, *members):
    s.down_event(ViewInstalled(View(ViewId(members[0], len(s.below.events) + 1), members)))


def lost_events(s):
    return s.below.events_of(ConnectionLost)


def test_watches_the_member_after_it_in_the_view_cyclically():
    s, w = fd_sock()
    a, b, c = s.addr("a"), s.addr("b"), s.addr("c")
    install(s, a, s.local, b, c)
    assert [h.uid for h in w.handles] == [b.uid]
    assert w.current.phys == phys_of(GetPhysical(b))
    install(s, a, b, s.local)  # we are last: the ring wraps to the first
    assert w.handles[0].closed and w.current.uid == a.uid
    assert s.layer.stats["picks"] == 2


def test_alone_or_not_in_the_view_watches_nobody():
    s, w = fd_sock()
    a = s.addr("a")
    install(s, s.local)
    install(s, a)  # (excluded: a view without us)
    assert w.handles == []


def test_an_established_connection_lost_suspects_the_neighbour_at_once():
    s, w = fd_sock()
    a, b = s.addr("a"), s.addr("b")
    install(s, a, s.local, b)
    w.current.on_up()
    assert s.layer.watching == b
    w.current.on_lost("reset")
    assert lost_events(s) == [ConnectionLost(b, "reset")]
    assert s.layer.stats["suspected"] == 1 and s.layer.watching is None


def test_a_goodbye_before_the_close_is_not_suspected():
    s, w = fd_sock()
    a, b = s.addr("a"), s.addr("b")
    install(s, a, s.local, b)
    w.current.on_up()
    w.current.on_lost("left")  # b wrote BYE: it is leaving
    s.advance(10)  # retries find its port closed: still no suspicion
    for h in w.handles[1:]:
        h.on_lost("refused")
    assert lost_events(s) == []
    assert s.layer.stats["lost_left"] == 1


def test_a_member_no_longer_in_the_membership_is_not_suspected():
    """A late close from the member we watched before the view changed is ignored (its
    handle was closed), and so is one whose callback races the view change."""
    s, w = fd_sock()
    a, b, c = s.addr("a"), s.addr("b"), s.addr("c")
    install(s, a, s.local, b, c)
    old = w.current
    old.on_up()
    install(s, a, s.local, c)  # b left (or was excluded): re-pick c
    assert old.closed and w.current.uid == c.uid
    old.on_lost("eof")
    assert lost_events(s) == []


def test_our_own_leave_says_goodbye_and_stops_watching():
    s, w = fd_sock()
    a, b = s.addr("a"), s.addr("b")
    install(s, a, s.local, b)
    w.current.on_up()
    s.down_event(Leave())
    assert w.byes == 1 and w.current.closed
    w.current.on_lost("eof")
    install(s, a, s.local, b)  # the view we leave from: nothing watched again
    assert len(w.handles) == 1 and lost_events(s) == []


def test_refused_suspects_once_then_backs_off_and_reconnects():
    s, w = fd_sock(retry_s=0.2, retry_max_s=1.0)
    a, b = s.addr("a"), s.addr("b")
    install(s, a, s.local, b)
    w.current.on_lost("refused")  # nobody listens where b was: b's process is gone
    assert len(lost_events(s)) == 1
    s.advance(0.2)
    assert len(w.handles) == 2
    w.current.on_lost("refused")  # again: already suspected, not again
    s.advance(0.39)
    assert len(w.handles) == 2  # the delay doubled
    s.advance(0.01)
    assert len(w.handles) == 3
    w.current.on_lost("unreachable")  # a network problem: SWIM's timers, not ours
    assert len(lost_events(s)) == 1
    s.advance(0.8)
    w.current.on_up()  # b is back up: a later loss suspects again
    w.current.on_lost("eof")
    assert len(lost_events(s)) == 2
    s.advance(0.2)  # the delay is back to its start once a connection succeeded
    assert len(w.handles) == 5


def test_gossip_mode_watches_the_next_member_of_swims_list():
    s, w = fd_sock()
    a, b = s.addr("a"), s.addr("b")
    members = tuple(sorted([s.local, a, b], key=lambda x: x.uid))
    s.layer.up_event(MembersChanged(members))
    i = members.index(s.local)
    assert w.current.uid == members[(i + 1) % 3].uid
    assert s.above.events_of(MembersChanged)  # passed on up


def test_an_inert_layer_without_host_support():
    layer = FdSock(FdSockConfig())
    s = Sandwich(layer)
    a = s.addr("a")
    install(s, a, s.local)
    assert layer.stats["no_watch"] == 1 and layer.watching is None


# -- SWIM: the verification of a lost connection ------------------------------------------
def swim_group(k=3):
    s = Sandwich(Swim(SwimConfig(probe_interval_s=10.0, probe_timeout_s=0.08,
                                 indirect_probes=k)),
                 answers={GetPhysical: ("10.0.0.1", 7800)})
    others = [s.addr(n) for n in "abcd"]
    s.down_event(ViewInstalled(View(ViewId(s.local, 1), (s.local, *others))))
    s.advance(0)
    s.below.take()
    return s, others


def sent(msgs, typ):
    return [m for m in msgs if m.headers.get(7, [None])[0] == typ]


def reply(s, sender, typ, seq):
    s.up(Message(s.local, b"", 0, {7: [typ, seq, []]}, sender=sender))


def lost(s, target):
    assert s.down_event(ConnectionLost(target, "reset")) is True
    out = s.below.take()
    pings = sent(out, PING)
    reqs = sent(out, PING_REQ)
    suspect = [m for m in sent(out, RUMORS) if m.dest is None]
    assert [m.dest for m in pings] == [target]
    assert len(suspect) == 1 and suspect[0].headers[7][2][0][:2] == [SUSPECT, target.uid]
    return pings[0].headers[7][1], [m.dest for m in reqs]


def verified_removes(msgs, uid):
    return [r for m in msgs if m.dest is None and m.headers[7][0] == RUMORS
            for r in m.headers[7][2] if r[0] == REMOVE and r[1] == uid and r[3] == VERIFIED]


def test_a_lost_connection_nobody_can_refute_is_a_verified_death():
    s, (a, b, c, d) = swim_group()
    seq, helpers = lost(s, d)
    assert len(helpers) == 3 and d not in helpers
    for h in helpers:
        reply(s, h, NACK, seq)
    assert s.above.events_of(MemberDead) == []  # before the direct ping's own timeout
    s.advance(0.08)
    assert s.above.events_of(MemberDead) == [MemberDead(d, "connection lost")]
    assert len(verified_removes(s.below.take(), d.uid)) == 1  # multicast at once
    assert s.layer.stats["verified_dead"] == 1


def test_a_member_that_answers_the_verification_is_not_excluded():
    s, (a, b, c, d) = swim_group()
    seq, helpers = lost(s, d)
    reply(s, d, ACK, seq)
    for h in helpers:
        reply(s, h, NACK, seq)
    s.advance(0.3)
    assert s.above.events_of(MemberDead) == []
    assert verified_removes(s.below.take(), d.uid) == []
    assert s.layer.stats["verify_answered"] == 1


def test_a_member_that_answers_a_helper_is_not_excluded():
    s, (a, b, c, d) = swim_group()
    seq, helpers = lost(s, d)
    reply(s, helpers[0], ACK, seq)  # the helper's relayed ack
    for h in helpers[1:]:
        reply(s, h, NACK, seq)
    s.advance(0.3)
    assert s.above.events_of(MemberDead) == []


def test_a_silent_helper_leaves_the_suspicion_to_its_timeout():
    """We may be the one cut off: without every helper's NACK no verdict is taken early;
    the suspicion (already multicast) runs its normal course."""
    s, (a, b, c, d) = swim_group()
    seq, helpers = lost(s, d)
    for h in helpers[1:]:
        reply(s, h, NACK, seq)
    s.advance(0.3)
    assert s.above.events_of(MemberDead) == []
    assert s.layer.stats["verify_inconclusive"] == 1
    s.advance(5.0)  # the suspicion timed out: excluded by SWIM's timers
    assert [e.reason for e in s.above.events_of(MemberDead)] == ["swim"]


def test_a_loss_of_a_member_swim_holds_dead_or_unknown_starts_nothing():
    s, (a, b, c, d) = swim_group()
    x = s.addr("x")
    assert s.down_event(ConnectionLost(x)) is False
    assert s.below.take() == []


def remove_from(s, sender, uid, extra):
    s.up(Message(s.local, b"", 0, {7: [RUMORS, 0, [[REMOVE, uid, 0, extra, 3,
                                                     s.host.wall()]]]}, sender=sender))


def test_a_verified_remove_is_overruled_only_by_a_member_heard_within_a_probe_timeout():
    """Heard within a probe timeout: it spoke while its verifier waited, so it is alive.
    Heard longer ago (but within the verification window of a timer's REMOVE): a crash
    just after it spoke, which the verifier's k+1 failed pings confirmed."""
    s, (a, b, c, d) = swim_group()
    reply(s, d, ACK, 999)  # d spoke to us just now
    s.advance(0.05)
    remove_from(s, a, d.uid, VERIFIED)
    assert s.above.events_of(MemberDead) == []
    assert s.layer.stats["remove_overruled"] == 1
    s, (a, b, c, d) = swim_group()
    reply(s, d, ACK, 999)
    s.advance(0.1)
    remove_from(s, a, d.uid, None)  # a timer's REMOVE: overruled (0.5 s window)
    assert s.above.events_of(MemberDead) == []
    remove_from(s, b, d.uid, VERIFIED)
    assert s.above.events_of(MemberDead) == [MemberDead(d, "connection lost")]
