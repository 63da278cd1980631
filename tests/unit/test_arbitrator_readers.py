"""Spark's readers of the work queue never pick the group's arbitrator (it holds no queue):
executors are placed by the nodes of the members that hold data (``member_nodes``), and a
stream renews and settles only at those (``QueueStream._holders``). No Ray: a stand-in
group answers ``members()`` and ``member_names()``."""
from types import SimpleNamespace

from raygroups.integration.colocation import member_nodes
from raygroups.integration.queue_stream import QueueStream


class Members:
    def members(self):
        return [{"name": "a-0", "node_id": "na", "role": "data"},
                {"name": "b-0", "node_id": "nb", "role": "data"},
                {"name": "c-arbitrator", "node_id": "nc", "role": "arbitrator"}]

    def member_names(self):
        return sorted(m["name"] for m in self.members())


def test_executors_go_where_the_data_members_are():
    assert member_nodes(Members()) == {"a-0": "na", "b-0": "nb"}


def test_a_stream_renews_and_settles_at_the_data_members_only():
    assert QueueStream._holders(SimpleNamespace(group=Members())) == ["a-0", "b-0"]
