"""The even-split tie-breaker on Ray (one local Ray session, tests/ray_fixtures.py): a group
of two member actors, store discovery in Ray's KV, loses one member to ``ray.kill`` (Ray's
death signal excludes it at once). MySQL Group Replication's rule leaves the survivor, one
of the last primary component's two, outside any primary component until a majority is
back (what the campaign across Ray hosts saw); with ``primary__tie_breaker="store"`` the
survivor takes that component's lease in the store, is primary with a higher primary id,
and a send goes out and is delivered. The group's primary ids only grow; the lease is the
only object the tie adds to the store."""
import glob
import itertools
import os
import shutil
import tempfile

import pytest

from raygroups.actors import Group, ray_compat

from ..drain import drain

pytest_plugins = ["tests.ray_fixtures"]  # the one Ray session of the run
WAIT_S = 60.0
_ids = itertools.count()


def first_view(g: Group, pred, after):
    for v in g.views(after=after, timeout=WAIT_S):
        if pred(v):
            return v
    raise AssertionError(f"no such view within {WAIT_S}s: {g.view()}")


@pytest.mark.parametrize("tie_breaker", ["store", "none"])
def test_the_survivor_of_a_primary_pair_is_primary_with_the_tie_breaker(ray_session,
                                                                          tie_breaker):
    prefix = f"rgtie{os.getpid()}x{next(_ids)}"
    g = Group.launch(f"t-tie-{tie_breaker}-{os.getpid()}", members=2, timeout=WAIT_S,
                     discovery=f"ray-kv://{prefix}",
                     stack_options={"primary__tie_breaker": tie_breaker,
                                    "primary__block_sends": False})
    try:
        v0 = g.view()
        assert len(v0.members) == 2 and v0.primary
        victim = v0.members[1]
        g.kill(victim.name)
        v1 = first_view(g, lambda v: victim not in v, after=v0.view_id)
        assert len(v1.members) == 1
        if tie_breaker == "store":
            assert v1.primary and v1.primary_id > v0.primary_id, v1
            g.send(b"after the tie")
            got = [m["payload"] for m in g.receive(max_messages=10, timeout=WAIT_S,
                                                   member=v1.members[0].name)]
            assert b"after the tie" in got, got
        else:
            assert not v1.primary and v1.primary_id == 0, v1
    finally:
        g.shutdown()


def test_a_durable_pair_on_ray_keeps_its_queue_when_it_loses_one(ray_session):
    """Durable queues with the tie-breaker take the tie of the last epoch in a store that
    outlives the cluster (docs/architecture.md, "The even split's tie"): here a directory.
    The survivor of a durable pair that loses one to ``ray.kill`` serves the queue on its
    own journal: a publish completes, and every acknowledged publish is there."""
    store = tempfile.mkdtemp(prefix="rgqtie-ray-")
    name = f"t-qtie-{os.getpid()}"
    g = Group.launch(name, members=2, durable=True, timeout=WAIT_S, discovery=f"file://{store}",
                     stack_options={"primary__tie_breaker": "store"},
                     metrics_interval_s=0, http=False)
    root = os.path.join(ray_compat.node_temp_dir(), "raygroups", "journal", name)
    try:
        v0 = g.view()
        survivor, victim = v0.members
        q = g.queue("orders", durable=True, member=survivor.name)
        q.publish_many([b"before-%d" % k for k in range(5)])
        g.kill(victim.name)
        v1 = first_view(g, lambda v: victim not in v and v.primary, after=v0.view_id)
        assert list(v1.members) == [survivor]
        q.publish(b"after the tie")  # on the survivor's disk alone: it holds the tie
        ties = glob.glob(os.path.join(store, "**", "queue-*.tie"), recursive=True)
        assert len(ties) == 1, ties
        left = drain(q)
        assert sorted(d.body for d in left) == \
            sorted([b"before-%d" % k for k in range(5)] + [b"after the tie"])
    finally:
        g.shutdown()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)
