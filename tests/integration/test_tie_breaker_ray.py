"""The even-split tie-breaker on Ray (one local Ray session, tests/ray_fixtures.py): a group
of two member actors, store discovery in Ray's KV, loses one member to ``ray.kill`` (Ray's
death signal excludes it at once). MySQL Group Replication's rule leaves the survivor, one
of the last primary component's two, outside any primary component until a majority is
back (what the campaign across Ray hosts saw); with ``primary__tie_breaker="store"`` the
survivor takes that component's lease in the store, is primary with a higher primary id,
and a send goes out and is delivered. The group's primary ids only grow; the lease is the
only object the tie adds to the store."""
import itertools
import os

import pytest

from raygroups.actors import Group

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
