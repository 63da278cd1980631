"""A bootstrap file (JGroups cloud-store discovery) on a multi-node Ray (several raylets on
loopback, ``ray.cluster_utils.Cluster``): ``Group.launch(bootstrap=...)`` starts each line's
member as a member actor on a node at the line's address (one address here, so the lines are
dealt over the nodes in file order), on the line's port, with the line's seeded UUID, the
first line founding the group; a member Ray restarts rejoins with a fresh UUID, and the
coordinator's members file (the bootstrap file's place in the store) lists it under that
one. Runs tests/bootstrap_nodes_run.py in a process of its own (its own Ray), about 40 s."""
from tests.script_run import run_json


def test_a_bootstrap_file_starts_its_members_on_their_nodes_in_file_order(tmp_path):
    r = run_json("tests.bootstrap_nodes_run", tmp_path)
    lines, members = r["lines"], r["members"]
    assert len(lines) == len(r["nodes"]) == 3
    for i, line in enumerate(lines):
        m = members[line["name"]]
        assert m["uuid"] == line["uuid"] == (i + 1).to_bytes(16, "big").hex()  # seeded
        assert m["port"] == line["port"]
        assert m["node_id"] == r["nodes"][i]   # dealt over the nodes in file order
    assert r["view"][0] == lines[0]["name"] and lines[0]["coord"]  # the first line founded
    assert sorted(r["view"]) == sorted(x["name"] for x in lines)
    assert r["file_before"] == {x["name"]: x["uuid"] for x in lines}
    last = lines[-1]
    after = r["restarted"]
    assert after, "the restarted member did not rejoin under a fresh UUID listed in the file"
    assert after["restarts"] >= 1 and after["uuid"] != last["uuid"]
    assert after["node_id"] == members[last["name"]]["node_id"]
    assert after["file"][last["name"]] == after["uuid"]
    assert {k: v for k, v in after["file"].items() if k != last["name"]} == \
        {x["name"]: x["uuid"] for x in lines[:-1]}
