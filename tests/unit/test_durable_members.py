"""Durable members (actors/durable.py): where each member journals, what a member that
journals nothing says when a durable queue is asked of it, and what launch refuses."""
import asyncio
import os

import pytest

from raygroups.actors import durable
from raygroups.actors.queue import QueueHost
from raygroups.stack.workqueue import QueueArbitrator, QueueNotDurable


def test_every_member_journals_in_its_own_directory_named_by_group_and_member(tmp_path):
    extra = durable.spec_extra(str(tmp_path))
    assert extra == {"durable": {"journal_dir": str(tmp_path)}}
    a = durable.member_journal_dir(extra, "orders", "host-a-0")
    b = durable.member_journal_dir(extra, "orders", "host-a-1")
    assert a == os.path.join(str(tmp_path), "raygroups", "journal", "orders", "host-a-0")
    assert os.path.isdir(a) and a != b
    # the same group and member name find the same directory again (a relaunch)
    assert durable.member_journal_dir(durable.spec_extra(str(tmp_path)), "orders",
                                      "host-a-0") == a


def test_names_never_leave_the_journal_root(tmp_path):
    for cluster, member in (("..", "m"), ("a/../../b", "m"), ("g", "../x"), ("g", "")):
        p = durable.journal_path(str(tmp_path), cluster, member)
        root = os.path.join(str(tmp_path), "raygroups", "journal")
        assert os.path.commonpath([root, os.path.realpath(p)]) == root, p
        assert len(os.path.relpath(p, root).split(os.sep)) == 2, p


def test_arbitrators_and_members_of_a_plain_group_journal_nothing(tmp_path):
    extra = durable.spec_extra(str(tmp_path))
    assert durable.member_journal_dir({**extra, "workqueue": {"arbitrator": True}},
                                      "orders", "h-arbitrator") is None
    assert durable.member_journal_dir({"detached": True}, "orders", "h-0") is None
    with pytest.raises(ValueError):
        durable.spec_extra(17)


def test_a_durable_queue_on_a_member_that_journals_nothing_raises_queue_not_durable():
    host = QueueHost("h-0")
    assert not host.durable
    with pytest.raises(QueueNotDurable, match="durable=True"):
        asyncio.run(host.declare("orders", durable=True))
    arb = QueueHost("h-arbitrator", {"arbitrator": True}, journal_dir="/nowhere")
    assert not arb.durable
    with pytest.raises(QueueArbitrator):
        asyncio.run(arb.declare("orders", durable=True))
    assert QueueHost("h-1", journal_dir="/j").durable


def test_launch_refuses_a_journal_dir_without_durable():
    from raygroups.actors import Group
    with pytest.raises(ValueError, match="durable=True"):
        Group.launch("never", journal_dir="/tmp/j")
    with pytest.raises(ValueError, match="gossip"):
        Group.launch("never", durable=True, membership="gossip")


def test_a_call_moves_on_from_a_member_whose_journal_failed_unless_it_named_it():
    from ray.exceptions import RayTaskError

    from raygroups.actors import Group
    from raygroups.stack.workqueue import QueueDiskError
    g = Group("orders", _names=["h-0", "h-1"])
    failed = RayTaskError("queue_publish", "tb", QueueDiskError("h-0: its journal failed"))
    moved = g._failure("h-0", failed, None, "queue_publish")
    assert isinstance(moved, QueueDiskError) and "h-0" in g._avoid
    with pytest.raises(QueueDiskError):
        g._failure("h-0", failed, "h-0", "queue_publish")


def test_queue_calls_on_a_member_whose_journal_failed_raise_its_queue_disk_error():
    from types import SimpleNamespace

    from raygroups.stack.workqueue import QueueDiskError
    host = QueueHost("h-0", journal_dir="/j")
    host.service = SimpleNamespace(disk_error=QueueDiskError("h-0: its journal failed"),
                                   channel=SimpleNamespace(stack=None))
    with pytest.raises(QueueDiskError, match="journal failed"):
        asyncio.run(host.publish("orders", [b"x"]))
    with pytest.raises(QueueDiskError):
        asyncio.run(host.settle("orders", "accept", [[1, 1]]))
