"""Where ``Group.launch(..., arbitrator=True)`` puts the arbitrator, without Ray
(``placement.arbitrator_slot``): on the first live node without a data member of the group
(the "third node"), else on the node with the fewest, flagged as shared; its name and port
index; and what the launch refuses to combine it with."""
import pytest

from raygroups.actors.placement import (ARBITRATOR_K, alive_nodes, arbitrator_slot,
                                        check_arbitrator, is_arbitrator, plan)
from raygroups.stack import StackConfig


def node(i, host, head=False):
    return {"NodeID": f"node{i}xxxx", "NodeManagerAddress": f"10.0.0.{i}",
            "NodeManagerHostname": host, "Alive": True,
            "Resources": {"node:__internal_head__": 1} if head else {}}


NODES = alive_nodes([node(1, "a", head=True), node(2, "b"), node(3, "c")])


def test_the_arbitrator_goes_to_the_node_without_data_members():
    data = plan(NODES, members=2)  # dealt head first: a and b
    assert [s.name for s in data] == ["a-0", "b-0"]
    slot, shared = arbitrator_slot(NODES, data)
    assert (slot.name, slot.node_id, slot.node_ip, slot.k) == (
        "c-arbitrator", "node3xxxx", "10.0.0.3", ARBITRATOR_K)
    assert not shared and is_arbitrator(slot.name)
    assert not any(is_arbitrator(s.name) for s in data)


def test_the_first_free_node_wins_and_the_name_is_stable():
    data = plan(NODES, members=1)  # a only: b and c are free
    assert arbitrator_slot(NODES, data)[0].name == "b-arbitrator"
    assert arbitrator_slot(NODES, data) == arbitrator_slot(list(NODES), list(data))


def test_without_a_free_node_it_shares_the_node_with_the_fewest():
    data = plan(NODES, members=5)  # a: 2, b: 2, c: 1
    slot, shared = arbitrator_slot(NODES, data)
    assert slot.name == "c-arbitrator" and shared
    one = alive_nodes([node(1, "a", head=True)])
    slot, shared = arbitrator_slot(one, plan(one, members=2))
    assert slot.name == "a-arbitrator" and slot.k == ARBITRATOR_K and shared


def test_nodes_sharing_a_host_name_keep_their_ip_in_the_name():
    nodes = alive_nodes([node(1, "h", head=True), node(2, "h")])
    slot, shared = arbitrator_slot(nodes, plan(nodes, members=1))
    assert slot.name == "h-10.0.0.2-arbitrator" and not shared


def test_no_live_node_is_an_error():
    with pytest.raises(RuntimeError, match="no live Ray node"):
        arbitrator_slot([], [])


@pytest.mark.parametrize("config, options, membership, bootstrap, this_node, wait, match", [
    (None, {"primary__tie_breaker": "store"}, "views", None, False, True, "tie_breaker"),
    (StackConfig.local(discovery="memory://arb", primary__tie_breaker="store"), None, "views",
     None, False, True, "tie_breaker"),
    (None, None, "gossip", None, False, True, "gossip"),
    (None, None, "views", "members.list", False, True, "bootstrap"),
    (None, None, "views", None, True, True, "this_node"),
    (None, None, "views", None, False, False, "wait=False"),
])
def test_the_launch_refuses_what_the_arbitrator_does_not_go_with(config, options, membership,
                                                                bootstrap, this_node, wait,
                                                                match):
    with pytest.raises(ValueError, match=match):
        check_arbitrator(config, options, membership, bootstrap, this_node, wait)


def test_the_launch_takes_the_arbitrator_with_the_stack_defaults():
    check_arbitrator(None, None, "views", None, False, True)
    check_arbitrator(StackConfig.local(), {"primary__tie_breaker": "none"}, "views", None,
                        False, True)
