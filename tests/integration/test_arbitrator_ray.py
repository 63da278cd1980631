"""The work queue's arbitrator on Ray (one local Ray session, tests/ray_fixtures.py; Galera's
arbitrator, garbd): ``Group.launch(members=2, arbitrator=True)`` gives two data members and
an arbitrator member actor that votes and holds no queue. One data member is killed
(``g.kill``: Ray's death signal excludes it at once): with the arbitrator the survivor and
the arbitrator are a majority of the three, stay primary, and the queue goes on (what was
published before the kill is acquired and accepted, and new publishes complete); without it
the survivor is one of two, outside any primary component, and its queue calls raise
QueueNotPrimary. The handle never sends a queue call to the arbitrator, which says it is one
(``members()``, the HTTP API, the status page's JSON)."""
import itertools
import json
import os
import urllib.request

import pytest

pytest_plugins = ["tests.ray_fixtures"]


from raygroups.actors import Group  # noqa: E402
from raygroups.stack.workqueue import QueueArbitrator, QueueNotPrimary  # noqa: E402

from .test_tie_breaker_ray import WAIT_S, first_view  # noqa: E402

_ids = itertools.count()


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("arbitrator", [True, False])
def test_two_data_members_and_the_arbitrator_keep_the_queue_when_one_is_killed(ray_session,
                                                                               arbitrator):
    g = Group.launch(f"t-arb-{arbitrator}-{os.getpid()}x{next(_ids)}", members=2,
                     timeout=WAIT_S, metrics_interval_s=0, arbitrator=arbitrator)
    try:
        v0 = g.view()
        ms = g.members()
        arbs = [m["name"] for m in ms if m["role"] == "arbitrator"]
        data = sorted(m["name"] for m in ms if m["role"] == "data")
        assert len(data) == 2 and v0.primary
        assert g.arbitrators() == arbs == ([n for n in g.member_names()
                                            if n.endswith("-arbitrator")] if arbitrator else [])
        assert len(v0.members) == 2 + len(arbs) == len(ms)
        q = g.queue("jobs")
        first = q.publish(b"before the kill")
        if arbitrator:
            [arb] = arbs
            assert g.info(arb)["role"] == "arbitrator"
            import ray
            specs = {n: ray.get(g._handle(n).spec_of.remote()) for n in g.member_names()}
            assert specs[arb].extra["workqueue"] == {"arbitrator": True}
            assert all("workqueue" not in specs[n].extra for n in data)
            # the first primary needs a majority of the three (the arbitrator counts)
            assert {s.config.primary.expected_size for s in specs.values()} == {3}
            # a second launch attaches to the same three (stable names), starting none
            again = Group.launch(g.cluster, members=2, timeout=WAIT_S, metrics_interval_s=0,
                                 arbitrator=True)
            assert again.member_names() == g.member_names() and again.arbitrators() == [arb]
            with pytest.raises(QueueArbitrator):  # it holds no queue: every call says so
                g.queues(member=arb)
            with pytest.raises(QueueArbitrator):
                g.queue("jobs", member=arb)
            with pytest.raises(QueueArbitrator):
                q.on(arb).publish(b"to the arbitrator")
            # the HTTP API's listing and the status page's JSON name it too
            url = g.info(data[0])["http_url"]
            nodes = get_json(url + "membership/nodes")["nodes"]
            assert {n["name"]: n["role"] for n in nodes} == {
                **{n: "data" for n in data}, arb: "arbitrator"}, nodes
            assert get_json(g.info(arb)["http_url"] + "membership/status")["member"][
                "role"] == "arbitrator"
            # unnamed calls prefer data members; when those failed a call lately (the
            # handle avoids them), the arbitrator answers the others, never queue calls
            assert g._call("info")["name"] in data
            g._avoid.update(data)
            assert g._call("info")["name"] == arb
            assert q.publish(b"routed") and g.queues()["jobs"]["depth"] == 2
        victim = data[1]
        g.kill(victim)
        v1 = first_view(g, lambda v: victim not in {m.name for m in v.members},
                        after=v0.view_id)
        survivor = q.on(data[0])
        if not arbitrator:
            assert not v1.primary and len(v1.members) == 1, v1
            with pytest.raises(QueueNotPrimary):
                survivor.publish(b"after the kill")
            return
        assert v1.primary and len(v1.members) == 2, v1
        assert {m.name for m in v1.members} == {data[0], arbs[0]}
        survivor.publish(b"after the kill")  # completes with the remaining holder's majority
        got = [survivor.acquire(timeout_s=WAIT_S) for _ in range(3)]
        assert [d.body for d in got] == [b"before the kill", b"routed", b"after the kill"]
        assert got[0].id == first and all(d.member == data[0] for d in got)
        for d in got:
            d.accept()
        assert g.queues()["jobs"]["depth"] == 0
    finally:
        g.shutdown()


def test_arbitrator_refuses_the_store_tie_breaker(ray_session):
    with pytest.raises(ValueError, match="tie_breaker"):
        Group.launch(f"t-arb-tie-{os.getpid()}", members=2, arbitrator=True,
                     stack_options={"primary__tie_breaker": "store"})
    assert f"t-arb-tie-{os.getpid()}" not in Group.list_groups()
