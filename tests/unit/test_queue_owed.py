"""``WorkQueueHandle``'s owed settles (actors/queue.py, actors/queue_owed.py) against stand-in
members (no Ray): a settle asked with ``owe=True`` that a live member refused for now, whose
call failed, or (keys) under which the member still holds something, is owed; owed settles
are made again at the lease keeper's tick and on ``settle_owed()`` while the member is in
the group, dropped once it is not, and at most ``limit`` are kept (the rest counted). A
member's "not held" answer leaves nothing owed."""
import pytest

from raygroups.actors import queue_lease
from raygroups.stack.errors import GroupClosed
from raygroups.stack.workqueue import NotAcquired, QueueNotPrimary

from .fake_queue_group import FakeGroup, FakeMember, QuietRenewer, deliveries, handle


@pytest.fixture(autouse=True)
def renewer(monkeypatch):
    r = QuietRenewer()
    monkeypatch.setattr(queue_lease, "KEEPER", r)
    return r


def test_a_refused_settle_is_owed_and_made_again_on_the_tick(renewer):
    a = FakeMember("a", tokens=[(1, 1), (1, 2)], script=["refuse"])
    g = FakeGroup(a)
    h = handle(g)
    ds = deliveries(h, "a", 1, 2)
    renewer.add(g, "a", 2, h.lease_s)
    with pytest.raises(QueueNotPrimary):
        h.settle_many("accept", ds, owe=True)
    assert h.owed()["deliveries"] == 2 and all(h.owes(d) for d in ds)
    assert renewer.held[("fake", "fake-ns", "a")][1] == 2   # still leased to this process
    assert renewer.tick() == h.lease_s / 3 and a.settled == []   # renews only
    assert a.renewed == 1
    assert renewer.settle_tick() == h.lease_s / 3                # settles again
    assert a.settled == [("accept", (1, 1)), ("accept", (1, 2))]
    assert h.owed() == {"deliveries": 0, "keys": 0, "settled": 2, "gone": 0, "over_limit": 0}
    assert renewer.held == {} and renewer.owed == {}             # nothing to renew or owe
    assert renewer.settle_tick() is None and len(a.calls) == 2   # nothing owed: no call


def test_a_call_that_failed_is_owed_but_not_without_owe():
    a = FakeMember("a", tokens=[(1, 1)], script=[GroupClosed("unreachable"),
                                                 GroupClosed("unreachable")])
    h = handle(FakeGroup(a))
    [d] = deliveries(h, "a", 1)
    with pytest.raises(GroupClosed):
        d.accept()                                           # a plain settle owes nothing
    assert h.owed()["deliveries"] == 0
    with pytest.raises(GroupClosed):
        h.settle_many("accept", [d], owe=True)
    assert h.owes(d)
    assert h.settle_owed() == 1 and not h.owes(d) and a.settled == [("accept", (1, 1))]


def test_not_held_is_not_owed_and_every_member_is_asked():
    a = FakeMember("a", tokens=[], script=[None])            # settled already: NotAcquired
    b = FakeMember("b", tokens=[(1, 2)], script=["refuse", "refuse"])
    c = FakeMember("c", tokens=[(1, 3)])
    h = handle(FakeGroup(a, b, c))
    ds = deliveries(h, "a", 1) + deliveries(h, "b", 2) + deliveries(h, "c", 3)
    with pytest.raises(NotAcquired):
        h.settle_many("release", ds, owe=True)
    assert [h.owes(d) for d in ds] == [False, True, False]
    assert c.settled == [("release", (1, 3))]
    assert h.settle_owed() == 0 and h.owed()["deliveries"] == 1   # refused again: owed
    assert h.settle_owed() == 1 and b.settled == [("release", (1, 2))]


def test_keys_still_held_are_owed_across_on_handles():
    a = FakeMember("a", keys={"s/1/0": 3, "s/1/1": 2}, script=["refuse"])
    h = handle(FakeGroup(a))
    got = h.on("a").settle_keys("accept", ["s/1/0", "s/1/1"], owe=True)
    assert got == {"settled": 0, "failed": 5, "held": 5}
    assert h.owed()["keys"] == 2                             # shared with the on() handle
    assert h.settle_owed() == 5 and h.owed()["keys"] == 0 and a.keys == {}
    with pytest.raises(ValueError):
        h.settle_keys("accept", ["s/1/0"], owe=True)         # which member would owe it?


def test_a_member_that_left_is_dropped_and_released_from_the_lease(renewer):
    a = FakeMember("a", tokens=[(1, 1)], keys={"s/2/0": 4},
                   script=[QueueNotPrimary("view change"), TimeoutError("partition")])
    g = FakeGroup(a)
    h = handle(g)
    [d] = deliveries(h, "a", 1)
    renewer.add(g, "a", 1, h.lease_s)
    with pytest.raises(QueueNotPrimary):
        h.settle_many("accept", [d], owe=True)
    with pytest.raises(TimeoutError):
        h.on("a").settle_keys("accept", ["s/2/0"], owe=True)
    assert h.owed()["deliveries"] == 1 and h.owed()["keys"] == 1
    g.in_group = []                                          # a left the group
    assert h.settle_owed() == 0 and len(a.calls) == 2        # not asked again
    assert h.owed() == {"deliveries": 0, "keys": 0, "settled": 0, "gone": 2, "over_limit": 0}
    assert renewer.held == {}                                # its lease count released


def test_the_bound_keeps_limit_items_and_counts_the_rest(renewer):
    a = FakeMember("a", tokens=[(1, k) for k in range(5)], keys={"k0": 1, "k1": 1},
                   script=["refuse", "refuse"])
    g = FakeGroup(a)
    h = handle(g)
    h._owed.limit = 3
    ds = deliveries(h, "a", *range(5))
    renewer.add(g, "a", 5, h.lease_s)
    with pytest.raises(QueueNotPrimary):
        h.settle_many("accept", ds, owe=True)
    h.on("a").settle_keys("accept", ["k0", "k1"], owe=True)
    assert h.owed() == {"deliveries": 3, "keys": 0, "settled": 0, "gone": 0, "over_limit": 4}
    assert renewer.held[("fake", "fake-ns", "a")][1] == 3    # those not kept: left to the
    assert h.settle_owed() == 3 and h.owed()["deliveries"] == 0  # lease (not renewed)


def test_a_failing_member_list_keeps_everything_owed():
    def broken():
        raise GroupClosed("the group is gone for now")
    a = FakeMember("a", tokens=[(1, 1)], script=["refuse"])
    g = FakeGroup(a)
    h = handle(g)
    with pytest.raises(QueueNotPrimary):
        h.settle_many("accept", deliveries(h, "a", 1), owe=True)
    g.member_names = broken
    with pytest.raises(GroupClosed):
        h.settle_owed()
    assert h.owed()["deliveries"] == 1


def test_the_settling_thread_stops_without_a_call_once_ray_is_down():
    """Ray is not initialized here: the thread's loop ends at once, never calling (a call
    would start Ray again), and forgets what it was to settle."""
    import threading
    r = queue_lease.LeaseKeeper()
    r.owed[1] = [object(), 30.0]
    r.owed_thread = threading.current_thread()

    def step():
        raise AssertionError("a call after Ray went")
    r._run("owed_thread", step, threading.Event())
    assert r.owed == {} and r.owed_thread is None


def test_what_is_being_settled_again_stays_owed_to_whoever_asks_meanwhile():
    a = FakeMember("a", tokens=[(1, 1)], keys={"s/3/0": 1}, script=["refuse", "refuse"])
    g = FakeGroup(a)
    h = handle(g)
    [d] = deliveries(h, "a", 1)
    with pytest.raises(QueueNotPrimary):
        h.settle_many("accept", [d], owe=True)
    h.on("a").settle_keys("accept", ["s/3/0"], owe=True)
    seen = []
    call = g._call

    def watching(method, *args, **kw):
        seen.append((method, h.owes(d), h.owed()["deliveries"], h.owed()["keys"]))
        return call(method, *args, **kw)
    g._call = watching
    assert h.settle_owed() == 2
    assert seen == [("queue_settle", True, 1, 1), ("queue_settle_keys", False, 0, 1)]
    assert h.owed()["deliveries"] == h.owed()["keys"] == 0 and not h.owes(d)


def test_a_full_book_still_takes_back_what_it_was_settling_again():
    a = FakeMember("a", tokens=[(1, 1), (1, 2)], script=["refuse", "refuse"])
    g = FakeGroup(a)
    h = handle(g)
    h._owed.limit = 1
    ds = deliveries(h, "a", 1, 2)
    with pytest.raises(QueueNotPrimary):
        h.settle_many("accept", ds, owe=True)
    assert h.owed()["deliveries"] == 1 and h.owed()["over_limit"] == 1
    assert h.settle_owed() == 0                              # refused again: owed again,
    assert h.owed()["deliveries"] == 1 and h.owed()["over_limit"] == 1  # not over the bound
    assert h.settle_owed() == 1 and h.owed()["deliveries"] == 0
