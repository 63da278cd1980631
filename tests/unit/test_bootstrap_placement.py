"""Bootstrap files on Ray without Ray: where each line's member goes (``bootstrap_slots``)
and the UUID rule of a restarted member actor (``join_config``)."""
import pytest

from raygroups.actors.member import join_config
from raygroups.actors.placement import bootstrap_slots
from raygroups.stack import StackConfig
from raygroups.stack.discovery.bootstrap import generate_bootstrap


def node(i, ip):
    return {"NodeID": f"n{i}", "NodeManagerAddress": ip, "Alive": True}


def test_lines_go_to_a_node_at_their_address_dealt_in_file_order():
    nodes = [node(0, "10.0.0.1"), node(1, "10.0.0.2"), node(2, "10.0.0.2")]
    mf = generate_bootstrap(["10.0.0.2", "10.0.0.1"], "c", per_node=2)
    slots = bootstrap_slots(nodes, mf.entries)
    assert [s.name for s in slots] == [e.name for e in mf.entries]  # file order, its names
    # 10.0.0.1 has one node; 10.0.0.2's two lines are dealt over its two nodes
    assert [(s.node_id, s.node_ip, s.k) for s in slots] == [
        ("n0", "10.0.0.1", 0), ("n0", "10.0.0.1", 1), ("n1", "10.0.0.2", 0),
        ("n2", "10.0.0.2", 0)]


def test_a_line_at_an_address_without_a_node_is_refused_by_name():
    mf = generate_bootstrap(["10.0.0.9"], "c")
    with pytest.raises(ValueError, match="A names 10.0.0.9"):
        bootstrap_slots([node(0, "10.0.0.1")], mf.entries)


def test_a_restarted_member_never_takes_its_seeded_uuid_again():
    mf = generate_bootstrap(["127.0.0.1"], "c")
    cfg = StackConfig.local(bootstrap=mf)
    assert join_config(cfg, 0).store.use_bootstrap_identity
    assert not join_config(cfg, 1).store.use_bootstrap_identity
    plain = StackConfig.local()
    assert join_config(plain, 0) is plain
    again = join_config(plain, 3)  # no bootstrap file: only the first-start rule changes
    assert again.store is None and plain.primary.bootstrap and not again.primary.bootstrap


def test_a_restarted_member_never_bootstraps_the_group_again():
    """A process Ray restarted joins the group; it never takes part in a first start (a
    view of fresh incarnations knowing no primary would start a new lineage beside the
    group's state: the campaign across Ray hosts lost acknowledged publishes that way)."""
    cfg = StackConfig.local(primary__expected_size=3)
    assert join_config(cfg, 0).primary.bootstrap
    assert not join_config(cfg, 1).primary.bootstrap
    assert join_config(cfg, 1).primary.expected_size == 3


def test_the_cli_passes_a_bootstrap_file_and_launch_refuses_it_with_other_plans():
    from raygroups.actors import Group, cli
    args = cli.parser().parse_args(["up", "g", "--bootstrap", "/etc/1.list"])
    assert args.bootstrap == "/etc/1.list"
    for other in ({"follow_nodes": True}, {"members": 3}, {"this_node": True}):
        with pytest.raises(ValueError, match="bootstrap file names every member"):
            Group.launch("g", bootstrap="/etc/1.list", **other)  # refused before Ray starts
