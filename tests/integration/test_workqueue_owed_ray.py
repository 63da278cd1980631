"""A live member refuses an accept, for real, and the handle's owed settle takes it later,
exactly once: on a local Ray cluster, a group of two member actors (each its own process
and sockets). The member holding a delivery is left alone in a view of half the group, out of
the primary component, by pausing the other (its stack neither reads nor sends; Ray calls
still reach every member): it refuses the accept (QueueNotPrimary) while it lives on and
keeps the delivery, leased to this process. Two members, so that no primary component can
form without the holder: of three, the two others could form one as they resume, before
they merge back, and its new epoch would requeue the holder's holds (then correctly refused
as stale, and redelivered: another scenario, which made this test flaky). The accept is owed (``QueueBatch.pending``,
``WorkQueueHandle.owed``). After the other resumes and they merge back, the handle's lease keeper
settles it again on its tick: the job is accepted once, never redelivered, and the queue is
empty at every member. Without the owed rule the delivery stays held (and, once nothing
renews its lease, is redelivered): the test fails. No wall-clock assertions: every wait is
for a condition with a generous deadline."""
import os

import pytest

pytest_plugins = ["tests.ray_fixtures"]

from raygroups.actors import Group  # noqa: E402
from raygroups.integration.queue_source import QueueBatch  # noqa: E402
from raygroups.stack.workqueue import AcquireTimeout  # noqa: E402

from ..aio import wait_until  # noqa: E402

WAIT_S = 120.0
LEASE_S = 3.0  # the lease keeper ticks every lease_s / 3


@pytest.fixture(scope="module")
def group(ray_session):
    g = Group.launch(f"t-owed-{os.getpid()}", members=2, timeout=60.0, metrics_interval_s=0)
    yield g
    g.shutdown()


def _view(group, member):
    try:
        return group._call("view", member=member)
    except Exception:  # noqa: BLE001 - between channels (a merge): ask again
        return None


def test_an_accept_a_live_member_refused_is_owed_and_taken_once_after_the_heal(group):
    holder, *others = group.member_names()
    q = group.queue("owed", member=holder, lease_s=LEASE_S)
    q.publish(b"job-once")
    d = q.acquire(timeout_s=30)
    batch = QueueBatch([d], None, q)

    for m in others:  # the holder alone: half of 2, not primary; the other is silent,
        group.pause(m, WAIT_S * 2)  # and alone it is half too: no primary requeues its holds
    wait_until(lambda: (v := _view(group, holder)) is not None and len(v) == 1
               and not v.primary, "the holder alone, outside the primary component", WAIT_S)

    assert batch.commit() == 0                        # refused by a live member, for now
    assert batch.pending == [d] and batch.unsettled == 0, batch.errors
    assert "QueueNotPrimary" in batch.errors[0]
    assert q.owed()["deliveries"] == 1
    assert q.info()["acquired"] == 1                  # still held there, leased to us

    for m in others:
        group.pause(m, 0.01)                          # resume: they merge back
    wait_until(lambda: all((v := _view(group, m)) is not None and len(v) == 2 and v.primary
                           for m in group.member_names()), "one primary view of two", WAIT_S)

    # the lease keeper's tick settles it again (no call here asks for it)
    wait_until(lambda: q.owed()["deliveries"] == 0, "the owed accept settled again", timeout=WAIT_S)
    assert q.owed()["settled"] == 1 and q.owed()["gone"] == 0
    assert batch.pending == []
    for m in group.member_names():
        info = q.on(m).info()
        assert info["depth"] == 0 and info["acquired"] == 0, (m, info)
        assert info["dequeued"] == 1 and info["requeued"] == 0, (m, info)
        with pytest.raises(AcquireTimeout):           # never redelivered
            q.on(m).acquire(timeout_s=1.0)
    assert group._call("queue_info", member=holder)["leases"]["lease_released"] == 0
