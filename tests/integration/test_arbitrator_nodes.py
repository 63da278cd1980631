"""The arbitrator on a multi-node Ray (three raylets on loopback, ``ray.cluster_utils.Cluster``;
Galera's arbitrator, garbd): ``Group.launch(members=2, arbitrator=True)`` puts the two data
members on two nodes and the arbitrator on the third, which holds none; when one data
member's node is removed, the other and the arbitrator stay primary and the queue goes on
(what was published before is acquired, a new publish completes). Without the arbitrator
the same loss leaves the survivor outside any primary component (QueueNotPrimary). The node
follower's launch (one member per live node, no arbitrator) gives the arbitrator's node a
data member of its own and never takes the arbitrator for it. Runs
tests/arbitrator_nodes_run.py in a process of its own (its own Ray), about 20 s each."""
import pytest

from tests.script_run import run_json


@pytest.mark.parametrize("arbitrator", [True, False])
def test_the_arbitrator_on_the_third_node_keeps_the_queue_when_a_node_goes(tmp_path,
                                                                           arbitrator):
    r = run_json("tests.arbitrator_nodes_run", tmp_path,
                 *([] if arbitrator else ["--no-arbitrator"]))
    nodes, launched = r["nodes"], r["launched"]
    data = {n: node for n, (node, role) in launched.items() if role == "data"}
    assert sorted(data.values()) == sorted(nodes[:2])  # dealt head first
    kept = [n for n in data if data[n] != r["removed_node"]]
    if not arbitrator:
        assert len(launched) == 2
        assert r["after_removal"] == {"members": kept, "primary": False}, r
        assert r["queue"] == {"error": "QueueNotPrimary"}, r
        return
    [(arb, (arb_node, _))] = [(n, v) for n, v in launched.items() if v[1] == "arbitrator"]
    assert arb_node == nodes[2] and arb_node not in data.values()  # the node without data
    assert arb.endswith("-arbitrator")
    assert r["after_removal"]["primary"], r
    assert sorted(r["after_removal"]["members"]) == sorted(kept + [arb])
    assert r["queue"] == {"acquired": ["before", "after"], "depth": 0}, r
    followed = r["followed"]
    assert followed[arb] == [arb_node, "arbitrator"]
    assert sorted(v for n, v in followed.items() if n != arb) == sorted(
        [[data[kept[0]], "data"], [arb_node, "data"]]), followed
