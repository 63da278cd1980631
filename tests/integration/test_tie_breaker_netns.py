"""The even-split tie-breaker on real hosts: four member processes, each in its own network
namespace (tests/netns.py), store discovery in one directory all four reach (the lease's
store; a qdevice both sides reach), nftables splitting them 2+2. With
``primary__tie_breaker="store"`` exactly one half is primary (the one whose first member
created the lease) and the other is not; without it neither is (MySQL Group Replication's
rule). After the heal, one primary view of all four either way."""
import glob
import os
import tempfile
import time

import pytest

from ..netns import NetLab
from .test_netns import json_lines, start_members, wait_views

_ok, _why = NetLab.available()
pytestmark = [pytest.mark.root] + ([] if _ok else [pytest.mark.skip(reason=_why)])
WAIT_S = 30.0


def last_views(procs) -> list:
    return [[e for e in json_lines(p) if e["event"] == "view"][-1] for p in procs]


def settled(procs, halves) -> list:
    """Each member's last view once it is its half's, the same on both of its members and
    decided (its primary flag no longer changes: views are reported after the exchange)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        last = last_views(procs)
        if all(sorted(last[k]["members"]) == sorted(f"m{j}" for j in half)
               and last[k]["view_id"] == last[half[0]]["view_id"]
               for half in halves for k in half):
            return last
        assert time.monotonic() < deadline, last
        time.sleep(0.1)


@pytest.mark.parametrize("tie_breaker", ["store", "none"])
def test_a_2_2_split_has_one_primary_half_with_the_tie_breaker(tie_breaker):
    store = tempfile.mkdtemp(prefix="rgtie-")
    with NetLab(4) as lab:
        procs = start_members(lab, f"netns-tie-{tie_breaker}", static=False,
                              extra=["--discovery", f"file://{store}", "--expected", "4",
                                     "--tie-breaker", tie_breaker])
        first = wait_views(lab, procs, 4, timeout=WAIT_S)
        assert all(v["primary"] for v in first), first
        halves = [[0, 1], [2, 3]]
        lab.partition(halves)
        last = settled(procs, halves)
        primary = [half for half in halves if last[half[0]]["primary"]]
        assert all(last[h[0]]["primary"] == last[h[1]]["primary"] for h in halves), last
        leases = glob.glob(os.path.join(store, "**", "*.lease"), recursive=True)
        if tie_breaker == "store":
            assert len(primary) == 1, last
            assert len(leases) == 1, leases
            [won] = primary
            assert last[won[0]]["primary_id"] > first[0]["primary_id"], last
        else:
            assert primary == [] and leases == [], (last, leases)
        lab.heal()
        again = wait_views(lab, procs, 4, timeout=2 * WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while not (len({tuple(v["view_id"]) for v in again}) == 1
                   and all(v["primary"] for v in again)):
            assert time.monotonic() < deadline, again
            time.sleep(0.1)
            again = last_views(procs)
