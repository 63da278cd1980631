"""``QueueStream``'s settling (integration/queue_stream.py) against a stand-in for the work
queue handle (no Ray, no Spark): keys a live member still holds something under after a
settle (it refused for now: QueueNotPrimary in a view change, QueueOutcomeUnknown), or whose
call did not get through, are owed and settled again, at the next batch's settle and at each
lease renewal, while the member is in the group; keys of a member that left the group are
dropped (its acquisitions were requeued). The rule is the queue handle's
(``WorkQueueHandle.settle_keys(..., owe=True)``, actors/queue_owed.py); these tests check
the stream keeps it through the handle. Without this, a refused accept leaves its jobs held
by the member, leased to the running stream, for as long as the stream lives: the bug the
campaign across Ray hosts found in the micro-batch source (test_queue_source_settle.py)."""
import pytest

from raygroups.actors import queue_lease
from raygroups.integration.queue_stream import QueueStream
from raygroups.stack.errors import GroupClosed

from .fake_queue_group import FakeGroup, FakeMember, QuietRenewer, handle


@pytest.fixture(autouse=True)
def renewer(monkeypatch):
    r = QuietRenewer()
    monkeypatch.setattr(queue_lease, "KEEPER", r)
    return r


def Member(name: str, keys: dict, refuse: int = 0, error: Exception = None) -> FakeMember:
    """One member's keyed holdings; refuses the next ``refuse`` settle calls (held stays),
    or fails the next one with ``error``."""
    return FakeMember(name, keys=keys, script=[error] if error else ["refuse"] * refuse)


def stream(*members: FakeMember, in_group=None) -> QueueStream:
    s = QueueStream.__new__(QueueStream)   # its settling only: no Spark, no Ray
    s.name = "st"
    s.group = FakeGroup(*members)
    if in_group is not None:
        s.group.in_group = in_group
    s.handle = handle(s.group)             # the real handle: its owed settles
    return s


def test_keys_a_member_refused_for_now_are_owed_and_settled_again():
    a = Member("a", {"st/1/0": 3, "st/1/1": 2}, refuse=2)
    s = stream(a)
    got = s._settle_at("a", "accept", ["st/1/0", "st/1/1"], [])
    assert got == {"settled": 0, "failed": 5, "held": 5, "gone": False}
    assert s.owed() == 2
    assert s.settle_owed() == 0 and s.owed() == 2     # refused again: still owed
    assert s.settle_owed() == 5 and s.owed() == 0     # taken: nothing left held
    assert a.keys == {} and a.calls[-1] == ("accept", ["st/1/0", "st/1/1"])
    assert s.settle_owed() == 0 and len(a.calls) == 3  # nothing owed: no call


def test_a_call_that_failed_is_owed_and_a_member_that_left_is_dropped():
    a = Member("a", {"st/2/0": 4}, error=GroupClosed("member a is gone (ActorUnavailableError)"))
    b = Member("b", {"st/2/1": 1}, error=TimeoutError("partition"))
    s = stream(a, b, in_group=["a"])                   # b left the group
    assert s._settle_at("a", "accept", ["st/2/0"], [])["gone"]
    assert s._settle_at("b", "release", [], ["st/2/1"])["gone"] is False
    assert s.owed() == 2
    assert s.settle_owed() == 4 and s.owed() == 0
    assert a.keys == {} and b.keys == {"st/2/1": 1} and len(b.calls) == 1  # b not asked again


def test_a_settle_that_took_effect_is_not_owed():
    a = Member("a", {"st/3/0": 2})
    s = stream(a)
    assert s._settle_at("a", "accept", ["st/3/0"], [])["settled"] == 2
    assert s.owed() == 0
