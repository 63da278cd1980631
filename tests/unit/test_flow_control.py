"""FLOW_CONTROL between sandwiches: credits per receiver, blocking and unblocking through
Writable events, cumulative CREDITs (loss and reordering harmless), CREDIT_REQUEST after
max_block_s, views (leavers stop counting, joiners start full), and the application-blocked
hold queue (bounded, order kept with view changes, released on unblock)."""
import pytest

from raygroups.stack.errors import RaygroupsError
from raygroups.stack.events import AppBlocked, Writable
from raygroups.stack.flow_control import (CREDIT, CREDIT_REQUEST, FC_CONTROL, HEADER,
                                          FlowControl, FlowControlConfig, FlowControlFull)
from raygroups.stack.frag import HEADER as FRAG
from raygroups.stack.message import CONTROL, INTERNAL, Message
from raygroups.stack.view import Left, View, ViewChange, ViewId

from .sandwich import Sandwich

K = 1000
MAX = 10 * K


class Group:
    """FlowControl layers wired through a perfect network (``pump``), one per name."""

    def __init__(self, names="AB", **cfg):
        cfg.setdefault("max_credits", MAX)
        self.nodes = {}
        for i, n in enumerate(names):
            s = Sandwich(FlowControl(FlowControlConfig(**cfg)), name=n, seed=i)
            self.nodes[n] = s
        for s in self.nodes.values():  # everyone knows everyone's address
            for o in self.nodes.values():
                s.ctx.book.add(o.local)
        self.counter = 0
        self.drop = lambda msg: False

    def __getitem__(self, n):
        return self.nodes[n]

    def view(self, names, counter=None):
        self.counter += 1
        members = tuple(self.nodes[n].local for n in names)
        v = View(ViewId(members[0], counter or self.counter), members)
        for n in names:
            self.nodes[n].layer.up_event(ViewChange(v, None))
        return v

    def pump(self, rounds=10):
        """Deliver what every layer sent (multicasts to all, self included), until quiet."""
        for _ in range(rounds):
            moved = False
            for s in self.nodes.values():
                for m in s.below.take():
                    moved = True
                    if self.drop(m):
                        continue
                    targets = self.nodes.values() if m.dest is None else \
                        [o for o in self.nodes.values() if o.local == m.dest]
                    for t in targets:
                        t.up(Message(m.dest, m.payload, m.flags, dict(m.headers), s.local))
            if not moved:
                return

    def send(self, n, k, size=K, dest=None):
        s = self.nodes[n]
        s.down(Message(None if dest is None else self.nodes[dest].local,
                       n.encode() + k.to_bytes(4, "big") + b"x" * (size - 5)))


def payloads(s):
    return [(m.payload[:1].decode(), int.from_bytes(m.payload[1:5], "big"))
            for m in s.above.messages]


def writable(s, dest=None):
    """Whether sends (multicasts; or, with ``dest``, unicasts to it) go, by the last
    Writable event about them."""
    w = [e.writable for e in s.above.events_of(Writable) if e.dest == dest]
    return w[-1] if w else True


def test_a_multicast_consumes_every_account_and_blocks_at_the_smallest():
    g = Group("ABC")
    g.view("ABC")
    g.drop = lambda m: True  # nothing arrives: no credit comes back
    for k in range(10):
        g.send("A", k)
    assert writable(g["A"])
    assert len(g["A"].below.sent) == 10
    g.send("A", 10)  # does not fit: waits here, the stack is not writable
    assert len(g["A"].below.sent) == 10 and not writable(g["A"])
    assert g["A"].layer.queued_bytes == K
    assert all(v == 0 for v in g["A"].layer.credits().values())


def test_credits_come_back_as_receivers_release_and_the_queue_drains():
    g = Group("ABC")
    g.view("ABC")
    for k in range(100):
        g.send("A", k)
        if k % 15 == 0:  # more than the credits between two pumps
            g.pump()
    g.pump()
    for n in "ABC":
        assert payloads(g[n]) == [("A", k) for k in range(100)]
    assert writable(g["A"]) and not g["A"].layer.queue
    assert g["A"].layer.stats["blocked"] >= 1
    assert g["B"].layer.stats["credits_sent"] >= 1


def test_a_unicast_consumes_only_the_destinations_unicast_account():
    g = Group("ABC")
    g.view("ABC")
    g.drop = lambda m: True
    for k in range(4):
        g.send("A", k, dest="B")
    a = g["A"].layer
    ucr = a.credits(unicast=True)
    assert ucr[g["B"].local] == MAX - 4 * K and ucr[g["C"].local] == MAX
    assert ucr[g["A"].local] == MAX
    assert set(a.credits().values()) == {MAX}  # multicast credit untouched
    for k in range(2):
        g.send("A", k, dest="C")
    for k in range(10):
        g.send("A", k)  # multicasts draw on their own accounts: B's unicasts do not count
    assert writable(g["A"]) and not a.queue and not a.uqueues
    assert set(a.credits().values()) == {0}
    ucr = a.credits(unicast=True)
    assert ucr[g["B"].local] == MAX - 4 * K and ucr[g["C"].local] == MAX - 2 * K


def test_a_large_unicast_waiting_for_a_slow_receiver_holds_back_no_multicast():
    # JGroups keeps MFC and UFC apart: a state transfer to a joiner that has not credited
    # it yet must not stop the group's multicasts (the total order rides on them)
    g = Group("ABC")
    g.view("ABC")
    g.drop = lambda m: m.dest == g["B"].local  # B credits none of its unicasts
    for k in range(12):
        g.send("A", k, dest="B")
    a = g["A"].layer
    assert len(a.uqueues[g["B"].local]) == 2 and a.uqueues[g["B"].local].bytes == 2 * K
    assert not writable(g["A"], g["B"].local)  # sends to B wait, and those alone
    assert writable(g["A"]) and writable(g["A"], g["C"].local)
    for k in range(30):
        g.send("A", k)  # a multicast each: out at once, credited by B, C and A
        g.send("A", k, dest="C")  # unicasts to C do not wait behind B's either
        g.pump()
    assert payloads(g["B"]) == [("A", k) for k in range(30)]
    assert [p for p in payloads(g["C"])] == [("A", k // 2) for k in range(60)]
    assert not a.queue and len(a.uqueues) == 1 and len(a.uqueues[g["B"].local]) == 2
    g.drop = lambda m: False
    g["A"].up(Message(g["A"].local, b"", FC_CONTROL, {HEADER: [CREDIT, 9, 5 * K, 0, 5 * K]},
                      g["B"].local))
    assert not a.uqueues and writable(g["A"], g["B"].local)
    assert a.stats["blocked_unicast"] == 1 and a.stats["blocked"] == 0


def stalled(sends):
    """A and B, nothing arriving; A multicast ``sends`` messages of K (10 fit)."""
    g = Group("AB")
    g.view("AB")
    g.drop = lambda m: True
    for k in range(sends):
        g.send("A", k)
    return g, g["A"]


def test_a_multicast_backlog_holds_back_no_unicast():
    g, a = stalled(11)
    assert len(a.layer.queue) == 1 and not writable(a)
    n = len(a.below.sent)
    g.send("A", 99, dest="B")
    assert len(a.below.sent) == n + 1 and a.below.sent[-1].dest == g["B"].local


def test_a_receiver_credits_multicasts_and_unicasts_apart():
    g = Group("AB", min_threshold=0.1)
    g.view("AB")
    a, b = g["A"], g["B"]
    g.send("A", 1)
    g.send("A", 2, dest="B")
    g.send("A", 3, dest="B")
    b.below.take()
    for m in a.below.take():
        b.up(Message(m.dest, m.payload, m.flags, dict(m.headers), a.local))
    credits = [m.headers[HEADER] for m in b.below.take() if HEADER in m.headers]
    assert credits[-1][2:] == [3 * K, K, 2 * K]  # [.., total, multicast, unicast]


def test_a_credit_from_a_build_before_the_split_is_one_sum_multicast_first():
    # a rolling upgrade: an older receiver sends [CREDIT, epoch, total] for both kinds
    g = Group("AB")
    g.view("AB")
    g.drop = lambda m: True
    a, b = g["A"], g["B"]
    for k in range(3):
        g.send("A", k)
        g.send("A", k, dest="B")

    def credit(total):
        a.up(Message(a.local, b"", FC_CONTROL, {HEADER: [CREDIT, 4, total]}, b.local))
    credit(2 * K)
    assert a.layer.credits()[b.local] == MAX - K
    assert a.layer.credits(unicast=True)[b.local] == MAX - 3 * K
    credit(6 * K)  # everything released: both accounts full again
    assert a.layer.credits()[b.local] == MAX
    assert a.layer.credits(unicast=True)[b.local] == MAX


def test_application_blocked_receiver_holds_deliveries_and_grants_nothing():
    g = Group("AB")
    g.view("AB")
    g["B"].down_event(AppBlocked(True))
    for k in range(30):
        g.send("A", k)
        g.pump()
    assert payloads(g["B"]) == []                # held, not delivered
    assert not writable(g["A"])                  # the sender is blocked on B
    assert g["B"].layer.stats["credits_sent"] == 0
    held = len(g["B"].layer.held)
    assert held * K <= MAX                       # never more than the credits granted
    assert len(g["A"].below.sent) == 0
    assert g["B"].down_event(AppBlocked(False)) is True
    g.pump()
    assert payloads(g["B"]) == [("A", k) for k in range(30)]
    assert payloads(g["A"]) == [("A", k) for k in range(30)]
    assert writable(g["A"])


def test_view_changes_are_held_in_order_with_messages_writable_is_not():
    g = Group("AB")
    v1 = g.view("AB")
    b = g["B"]
    b.down_event(AppBlocked(True))
    g.send("A", 1)
    g.pump()
    v2 = View(ViewId(v1.view_id.coord, 9), v1.members)
    b.layer.up_event(ViewChange(v2, v1))
    b.layer.up_event(Writable("nakack", False))
    g.send("A", 2)
    g.pump()
    assert [type(e) for e in b.above.events] == [ViewChange, Writable]
    b.down_event(AppBlocked(False))
    g.pump()
    assert payloads(b) == [("A", 1), ("A", 2)]
    assert [type(e) for e in b.above.events] == [ViewChange, Writable, ViewChange]


def test_release_stops_when_the_application_blocks_again():
    g = Group("AB", max_credits=100 * K)
    g.view("AB")
    b = g["B"]
    b.down_event(AppBlocked(True))
    for k in range(1200):
        g.send("A", k, size=50)
    g.pump()
    assert len(b.layer.held) == 1200

    orig = b.above.up

    def up(batch):  # the application's queue fills again after the first chunk
        orig(batch)
        b.down_event(AppBlocked(True))
    b.above.up = up
    b.down_event(AppBlocked(False))
    assert 0 < len(b.above.messages) < 1200
    b.above.up = orig
    b.down_event(AppBlocked(False))
    assert [k for _, k in payloads(b)] == list(range(1200))


def test_a_lost_credit_is_covered_by_the_next_cumulative_one():
    g = Group("AB")
    g.view("AB")
    lost = []

    def drop_first_credit(m):
        h = m.headers.get(HEADER)
        if h and h[0] == CREDIT and not lost:
            lost.append(h)
            return True
        return False
    g.drop = drop_first_credit
    for k in range(60):
        g.send("A", k)
        g.pump()
    assert lost
    assert payloads(g["B"]) == [("A", k) for k in range(60)]
    assert writable(g["A"])


def test_blocked_sender_asks_for_credit_after_max_block():
    g = Group("AB", max_block_s=0.5)
    g.view("AB")
    g.drop = lambda m: (m.headers.get(HEADER) or [None])[0] == CREDIT  # every CREDIT lost
    for k in range(12):
        g.send("A", k)
        g.pump()
    a = g["A"]
    assert not writable(a)
    g.drop = lambda m: False
    a.advance(0.4)
    assert a.layer.stats["credit_requests_sent"] == 0
    a.advance(0.2)
    assert a.layer.stats["credit_requests_sent"] == 1
    g.pump()
    assert g["B"].layer.stats["credit_requests_received"] == 1
    assert writable(a) and payloads(g["B"]) == [("A", k) for k in range(12)]
    a.advance(5)  # no more requests once unblocked
    assert a.layer.stats["credit_requests_sent"] == 1


def test_stale_and_reordered_credits_are_ignored():
    g = Group("AB")
    g.view("AB")
    a, b = g["A"], g["B"]
    g.drop = lambda m: True
    for k in range(8):
        g.send("A", k)
    epoch = 7

    def credit(total, ep=epoch):
        a.up(Message(a.local, b"", FC_CONTROL, {HEADER: [CREDIT, ep, total]}, b.local))
    credit(3 * K)
    assert a.layer.credits()[b.local] == MAX - 5 * K
    credit(2 * K)  # an older total arriving late
    credit(3 * K)  # a duplicate
    assert a.layer.credits()[b.local] == MAX - 5 * K
    assert a.layer.stats["stale_credits"] == 2
    credit(10 ** 9)  # more than was ever charged: clamped to full credit
    assert a.layer.credits()[b.local] == MAX
    credit(5, ep=3)  # an older epoch
    assert a.layer.credits()[b.local] == MAX


def test_a_receiver_that_forgot_a_sender_starts_a_new_epoch():
    g = Group("AB")
    g.view("AB")
    a, b = g["A"], g["B"]
    for k in range(30):
        g.send("A", k)
        g.pump()
    old = b.layer.recv[a.local].epoch
    b.layer.recv.clear()  # e.g. pruned after A left and came back through a merge
    for k in range(30, 60):
        g.send("A", k)
        g.pump()
    assert b.layer.recv[a.local].epoch > old
    assert payloads(b) == [("A", k) for k in range(60)] and writable(a)


def test_members_that_leave_stop_counting_and_joiners_start_full():
    g = Group("ABC")
    g.view("ABC")
    c = g["C"]
    c.down_event(AppBlocked(True))  # C stops consuming
    for k in range(15):
        g.send("A", k)
        g.pump()
    a = g["A"]
    assert not writable(a) and a.layer.queue
    g.view("AB")  # C leaves: A is unblocked at once
    assert writable(a) and not a.layer.queue
    g.pump()
    assert payloads(g["B"]) == [("A", k) for k in range(15)]
    g.view("ABC")  # C comes back (as a new member): full credit
    assert a.layer.credits()[c.local] == MAX


def test_internal_and_unreliable_messages_are_never_charged_or_queued():
    g, a = stalled(11)
    assert a.layer.queue
    n = len(a.below.sent)
    a.down(Message(None, b"i" * 5000, INTERNAL))
    a.down(Message(a.local, b"c" * 5000, CONTROL))
    assert len(a.below.sent) == n + 2  # they pass the queue


def test_senders_that_ignore_writability_get_flow_control_full():
    g = Group("AB", max_queued_bytes=3 * K)
    g.view("AB")
    g.drop = lambda m: True
    for k in range(13):
        g.send("A", k)  # 10 go, 3 wait
    with pytest.raises(FlowControlFull):
        g.send("A", 13)
    assert issubclass(FlowControlFull, RaygroupsError)
    a = g["A"]
    # the fragments of one message that already started are always taken whole
    a.down(Message(None, b"f" * K, 0, {FRAG: [5, 1, 3]}))
    assert len(a.layer.queue) == 4


def test_a_misbehaving_sender_beyond_twice_the_credit_is_dropped_and_counted():
    g = Group("AB")
    g.view("AB")
    a, b = g["A"], g["B"]
    b.down_event(AppBlocked(True))
    for k in range(25):  # injected straight into B: A's credits are not involved
        b.up(Message(None, b"A" + k.to_bytes(4, "big") + b"x" * (K - 5), 0, {}, a.local))
    assert len(b.layer.held) == 2 * MAX // K
    assert b.layer.stats["dropped_over_credit"] == 5
    b.down_event(AppBlocked(False))
    assert [k for _, k in payloads(b)] == list(range(20))


def test_leaving_releases_what_was_held():
    g = Group("AB")
    g.view("AB")
    b = g["B"]
    b.down_event(AppBlocked(True))
    g.send("A", 1)
    g.pump()
    b.layer.up_event(Left("left"))
    assert payloads(b) == [("A", 1)] and type(b.above.events[-1]) is Left


@pytest.mark.parametrize("hdr", [5, [], [7], [CREDIT], [CREDIT, 1], [CREDIT, "1", 2],
                                 [CREDIT, 1, -5], [CREDIT, 1, None], [CREDIT, 1, 2, 3],
                                 [CREDIT, 1, 2, -1, 3], [CREDIT, 1, 2, 3, "4"], "x", {"a": 1}])
def test_malformed_headers_are_counted_never_raised(hdr):
    g = Group("AB")
    g.view("AB")
    b = g["B"]
    b.up(Message(None, b"", FC_CONTROL, {HEADER: hdr}, g["A"].local),
         Message(None, b"A\0\0\0\1ok", 0, {}, g["A"].local))
    assert b.layer.stats["malformed_header"] == 1
    assert payloads(b) == [("A", 1)]


def test_credit_request_is_answered_with_the_cumulative_total():
    g = Group("AB")
    g.view("AB")
    a, b = g["A"], g["B"]
    for k in range(3):
        g.send("A", k)
    g.pump()
    b.below.take()
    b.up(Message(b.local, b"", FC_CONTROL, {HEADER: [CREDIT_REQUEST]}, a.local))
    [m] = b.below.take()
    assert m.dest == a.local and m.headers[HEADER][0] == CREDIT
    assert m.headers[HEADER][2] == 3 * K


class Refused(RaygroupsError):
    pass


def refusing(s):
    """Make the layer below ``s`` refuse what comes down (e.g. GMS during a flush) while
    ``refuse["on"]``; returns (what it took since, refuse)."""
    sent, refuse = [], {"on": True}

    def down(m):
        if refuse["on"]:
            raise Refused()
        sent.append(m)
    s.below.down = down
    return sent, refuse


def test_a_refused_fragment_waits_here_a_refused_message_raises():
    g = Group("AB")
    g.view("AB")
    a = g["A"]
    sent, refuse = refusing(a)
    with pytest.raises(Refused):  # a whole message: the application sees the error
        a.down(Message(None, b"w" * K))
    a.layer.down(Message(None, b"f" * K, 0, {FRAG: [0, 1, 2]}))  # a continuation: kept
    assert len(a.layer.queue) == 1 and not writable(a)
    refuse["on"] = False
    a.layer.up_event(Writable("flush", True))  # the flush ended: retried
    assert [m.headers[FRAG] for m in sent] == [[0, 1, 2]] and writable(a)
    assert a.layer.credits()[g["B"].local] == MAX - K  # charged once, when it went out


def test_the_stack_reports_whether_flow_control_takes_app_blocking():
    import random

    from raygroups.stack.config import StackConfig

    from .sandwich import ManualHost
    views = StackConfig.local().build("c", "A", ManualHost(), random.Random(1))
    names = [la.name for la in views.layers]
    assert names.index("flow_control") == names.index("gms") + 1
    assert views.set_app_blocked(True) is True and views.layer("flow_control").app_blocked
    assert views.set_app_blocked(False) is True
    gossip = StackConfig.local(membership="gossip").build("c", "A", ManualHost(), random.Random(1))
    assert "flow_control" not in [la.name for la in gossip.layers]
    assert gossip.set_app_blocked(True) is False  # the Channel pauses reading instead


def test_a_destinations_unicast_queue_at_its_bound_refuses_that_destination_alone():
    g = Group("ABC", max_queued_bytes=3 * K)
    g.view("ABC")
    g.drop = lambda m: True
    for k in range(13):
        g.send("A", k, dest="B")  # 10 go, 3 wait
    with pytest.raises(FlowControlFull):
        g.send("A", 13, dest="B")
    g.send("A", 0, dest="C")  # another destination, and multicasts, still go
    g.send("A", 1)
    assert [m.dest for m in g["A"].below.sent[-2:]] == [g["C"].local, None]


def test_the_stack_tracks_writability_per_destination():
    import random

    from raygroups.stack.config import StackConfig

    from .sandwich import ManualHost
    st = StackConfig.local().build("c", "A", ManualHost(), random.Random(1))
    b = object()  # a member (any hashable stands for its address here)
    st.note(Writable("flow_control", False, b))
    assert st.writable and st.writable_to(None) and not st.writable_to(b)
    assert st.writable_to(object())
    st.note(Writable("flow_control", False))
    assert not st.writable_to(None)
    st.note(Writable("flow_control", True))
    st.note(Writable("flow_control", True, b))
    assert st.writable_to(b) and st.writable


def test_unicasts_waiting_for_a_member_that_leaves_go_on_at_the_view_change():
    """C stops crediting A's unicasts, and some wait; C leaves the view: they go on at once,
    uncharged (as a new send to a non-member does; UNICAST expires the connection), counted,
    and sends to C no longer wait. Not at the next CREDIT_REQUEST tick, and not forever."""
    g = Group("ABC")
    g.view("ABC")
    g.drop = lambda m: m.dest == g["C"].local  # C credits none of A's unicasts
    for k in range(12):
        g.send("A", k, dest="C")
    a = g["A"]
    assert len(a.layer.uqueues[g["C"].local]) == 2 and not writable(a, g["C"].local)
    n = len(a.below.sent)
    g.view("AB")  # C leaves
    assert not a.layer.uqueues and writable(a, g["C"].local)
    assert [m.dest for m in a.below.sent[n:]] == [g["C"].local] * 2
    assert a.layer.stats["unicasts_to_departed"] == 2 and a.layer.queued_bytes == 0
    assert a.layer.block_timer is None  # nothing waits: no CREDIT_REQUEST tick left


def test_unicasts_refused_below_are_retried_when_the_flush_ends():
    """A layer below refused the drain of a destination's unicasts (a flush): when it ends
    they go at once, like multicasts, not at the next CREDIT_REQUEST tick."""
    g = Group("AB")
    g.view("AB")
    g.drop = lambda m: True
    for k in range(11):
        g.send("A", k, dest="B")
    a = g["A"]
    assert len(a.layer.uqueues[g["B"].local]) == 1
    sent, refuse = refusing(a)
    a.up(Message(a.local, b"", FC_CONTROL, {HEADER: [CREDIT, 9, 5 * K, 0, 5 * K]},
                 g["B"].local))  # credit came back, the drain is refused
    assert len(a.layer.uqueues[g["B"].local]) == 1 and a.layer.stats["drain_refused"] == 1
    refuse["on"] = False
    a.layer.up_event(Writable("flush", True))  # the flush ended: retried
    assert len(sent) == 1 and sent[0].dest == g["B"].local
    assert not a.layer.uqueues and writable(a, g["B"].local)
