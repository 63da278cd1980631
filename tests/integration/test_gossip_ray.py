"""Gossip membership (SWIM's eventually consistent list, Serf-like) on Ray, on the run's local
Ray session: ``Group.launch(..., membership="gossip")`` returns once every member lists every
member; ``Group.members()``, the views subscription (as membership events) and the gossip
design's HTTP endpoints answer from the gossip list; a killed member leaves every list. No
wall-clock assertions: every wait is for a condition, with a generous deadline."""
import json
import os
import time
import urllib.request

import pytest

pytest_plugins = ["tests.ray_fixtures"]

from raygroups.actors import Group  # noqa: E402

WAIT_S = 60.0


def lists(g: Group) -> dict:
    """Each member's own list of alive members (by name)."""
    return {n: sorted(m["name"] for m in g._call("members", member=n) if m["state"] == "alive")
            for n in g.member_names()}


def wait_lists(g: Group, want: list) -> dict:
    deadline = time.monotonic() + WAIT_S
    while True:
        got = lists(g)
        if all(v == sorted(want) for v in got.values()):
            return got
        assert time.monotonic() < deadline, f"lists did not converge to {want}: {got}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def gossip(ray_session):
    g = Group.launch(f"t-gossip-{os.getpid()}", members=4, membership="gossip",
                     timeout=WAIT_S, metrics_interval_s=0)
    yield g
    g.shutdown()


def test_launch_returns_once_every_member_lists_every_member(gossip):
    names = gossip.member_names()
    assert len(names) == 4
    got = lists(gossip)  # right after launch, without waiting
    assert all(v == sorted(names) for v in got.values()), got
    assert sorted(m["name"] for m in gossip.members()) == sorted(names)
    # no agreed view: each member's list has its own local view counter
    assert all(gossip.info(n)["view_size"] == 4 for n in names)


def test_the_http_api_answers_from_the_gossip_list(gossip):
    n = gossip.member_names()[0]
    url = gossip.info(n)["http_url"].rstrip("/")
    with urllib.request.urlopen(url + "/membership/size", timeout=30) as r:
        size = json.loads(r.read())
    with urllib.request.urlopen(url + "/membership/nodes", timeout=30) as r:
        nodes = json.loads(r.read())
    assert size["size"] == 4
    assert sorted(x["name"] for x in nodes["nodes"]) == sorted(gossip.member_names())
    assert {x["recovery"] for x in nodes["nodes"]} == {None}  # no state exchange here


def test_a_killed_member_leaves_every_list_and_the_subscription_says_so(gossip):
    names = gossip.member_names()
    victim = names[-1]
    before = gossip.view().view_id
    gossip.kill(victim)
    rest = [n for n in names if n != victim]
    wait_lists(gossip, rest)
    # the subscription yields the membership change as a view without the victim
    for v in gossip.views(after=before, timeout=WAIT_S):
        if victim not in {m.name for m in v.members}:
            break
    else:
        raise AssertionError("no membership event without the killed member")


def test_launch_refuses_an_unknown_membership_mode():
    with pytest.raises(ValueError, match="membership must be one of"):
        Group.launch("x", membership="raft")
