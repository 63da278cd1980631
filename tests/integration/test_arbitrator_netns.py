"""The work queue's arbitrator on real hosts (Galera's arbitrator, garbd): member processes
each in its own network namespace (tests/netns.py) with the work queue service on their
channel (tests/member_proc.py ``--queue``), nftables splitting them. Four holders and an
arbitrator, split {2 holders + arbitrator} | {2 holders}: the arbitrator's side is a
majority of the five and stays primary, and its publishes complete; the other side's fail
with QueueNotPrimary; the arbitrator's own publish raises QueueArbitrator. After the heal,
one primary view of five, and every holder holds the same queue (the same digest of the
whole queue state; drained anywhere: the primary side's messages, none of the other's).
Without the arbitrator the same 2+2 split of the four holders leaves neither half primary
(MySQL Group Replication's rule), and publishes fail on both."""
import glob
import os
import tempfile
import time

import pytest

from ..netns import NetLab
from .test_netns import json_lines, start_members, wait_views
from .test_tie_breaker_netns import last_views, settled

_ok, _why = NetLab.available()
pytestmark = [pytest.mark.root] + ([] if _ok else [pytest.mark.skip(reason=_why)])
WAIT_S = 30.0


def command(p, line: str) -> None:
    p.stdin.write(line + "\n")
    p.stdin.flush()


def answer(p, kinds: tuple, after: int, timeout: float = 2 * WAIT_S) -> dict:
    """The first event of ``kinds`` that member process ``p`` printed after its ``after``th
    line."""
    deadline = time.monotonic() + timeout
    while True:
        got = [e for e in json_lines(p)[after:] if e["event"] in kinds]
        if got:
            return got[0]
        assert p.poll() is None and time.monotonic() < deadline, (kinds, json_lines(p)[-5:])
        time.sleep(0.05)


def call(p, line: str, kinds: tuple = ("published", "queue_error")) -> dict:
    n = len(json_lines(p))
    command(p, line)
    return answer(p, kinds, n)


def infos(procs) -> list:
    return [call(p, "info", ("info",)) for p in procs]


def one_queue(procs, holders) -> list:
    """Wait for one primary view of ``procs``, every holder serving, one queue state;
    returns the holders' infos."""
    deadline = time.monotonic() + 2 * WAIT_S
    while True:
        again, got = last_views(procs), infos(holders)
        if len({tuple(v["view_id"]) for v in again}) == 1 and \
                all(v["primary"] for v in again) and \
                all(i["phase"] == "active" for i in got) and \
                len({(i["epoch"], i["digest"]) for i in got}) == 1:
            return got
        assert time.monotonic() < deadline, (again, got)
        time.sleep(0.2)


@pytest.mark.parametrize("arbitrator", [True, False])
def test_a_2_2_split_with_the_arbitrator_keeps_the_queue_on_its_side(arbitrator):
    n = 5 if arbitrator else 4
    with NetLab(n) as lab:
        procs = start_members(lab, f"netns-arb-{arbitrator}",
                              extra=["--queue", "--expected", str(n)],
                              more={4: ["--arbitrator"]})
        first = wait_views(lab, procs, n, timeout=WAIT_S)
        assert all(v["primary"] for v in first), first
        holders = procs[:4]
        assert call(procs[0], "publish jobs a0")["event"] == "published"
        if arbitrator:
            refused = call(procs[4], "publish jobs to-the-arbitrator")
            assert refused["type"] == "QueueArbitrator", refused
        halves = [[0, 1, 4], [2, 3]] if arbitrator else [[0, 1], [2, 3]]
        lab.partition(halves)
        last = settled(procs, halves)
        major = call(procs[0], "publish jobs on-the-arbitrator-side")
        minor = call(procs[2], "publish jobs on-the-other-side")
        assert minor["event"] == "queue_error" and minor["type"] == "QueueNotPrimary", minor
        if arbitrator:
            assert [last[k]["primary"] for k in range(5)] == [True, True, False, False, True]
            assert major["event"] == "published", major
        else:
            assert not any(v["primary"] for v in last), last
            assert major["event"] == "queue_error" and major["type"] == "QueueNotPrimary"
        lab.heal()
        wait_views(lab, procs, n, timeout=2 * WAIT_S)
        got = one_queue(procs, holders)
        want = ["a0", "on-the-arbitrator-side"] if arbitrator else ["a0"]
        assert got[0]["depths"] == {"jobs": len(want)}, got
        if arbitrator:
            assert infos([procs[4]])[0]["phase"] == "arbiter"
        drained = call(procs[3], "drain jobs", ("drained", "queue_error"))
        assert drained.get("payloads") == want, drained  # at a member of the other side
        deadline = time.monotonic() + WAIT_S
        while any(i["depths"] != {"jobs": 0} for i in infos(holders)):
            assert time.monotonic() < deadline
            time.sleep(0.2)


def test_a_2_2_split_of_durable_queues_serves_the_half_with_the_tie():
    """The other way out for durable queues: the even-split tie-breaker, the store a
    directory all four reach. Each holder journals its queues in a directory of its own.
    The half that wins the stack's lease takes the last epoch's tie in the store
    (docs/architecture.md, "The even split's tie"), and its publishes complete on its two
    disks; the other half's fail with QueueNotPrimary. After the heal every holder holds
    the same queue, with what the tie's half published."""
    store = tempfile.mkdtemp(prefix="rgqtie-")
    journals = [tempfile.mkdtemp(prefix=f"rgqtie-j{i}-") for i in range(4)]
    with NetLab(4) as lab:
        procs = start_members(lab, "netns-qtie", static=False,
                              extra=["--queue", "--expected", "4", "--discovery",
                                     f"file://{store}", "--tie-breaker", "store"],
                              more={i: ["--journal", journals[i]] for i in range(4)})
        first = wait_views(lab, procs, 4, timeout=WAIT_S)
        assert all(v["primary"] for v in first), first
        assert call(procs[0], "publish jobs a0")["event"] == "published"
        halves = [[0, 1], [2, 3]]
        lab.partition(halves)
        last = settled(procs, halves)
        [won] = [h for h in halves if last[h[0]]["primary"]]
        [lost] = [h for h in halves if h != won]
        ok = call(procs[won[1]], "publish jobs on-the-tie-side")
        refused = call(procs[lost[0]], "publish jobs on-the-other-side")
        assert ok["event"] == "published", ok
        assert refused["event"] == "queue_error" and refused["type"] == "QueueNotPrimary"
        assert len(glob.glob(os.path.join(store, "**", "queue-*.tie"), recursive=True)) == 1
        lab.heal()
        wait_views(lab, procs, 4, timeout=2 * WAIT_S)
        one_queue(procs, procs)
        drained = call(procs[lost[1]], "drain jobs", ("drained", "queue_error"))
        assert drained.get("payloads") == ["a0", "on-the-tie-side"], drained
