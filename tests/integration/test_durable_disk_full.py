"""A durable member whose disk fills up (the Qpid new-cluster design's persistent cluster,
fail-stop as a broker whose store fails): three member processes (tests/member_proc.py
``--journal``), the third journaling on a 1 MiB tmpfs. Publishing until that disk is full
makes the third leave the group and its queue calls raise QueueDiskError; the other two go
on (a majority still has every publish on disk), and nothing acknowledged is lost."""
import os

import pytest

from ..member_proc import LoopbackMembers
from ..tmpfs import small_tmpfs

WAIT_S = 60.0
BODY = 8000  # bytes of padding per message: 1 MiB holds about 120 of them


@pytest.fixture
def tiny_disk(tmp_path):
    with small_tmpfs(tmp_path / "tiny", "1m") as mnt:
        yield mnt


def last(g: LoopbackMembers, i: int, kinds: tuple) -> list:
    return [e for e in g.events(i) if e["event"] in kinds]


def call(g: LoopbackMembers, i: int, line: str, kinds: tuple) -> dict:
    """Send a queue command to member i and wait for its answer (one of ``kinds``)."""
    before = len(last(g, i, kinds))
    g.command(i, line)
    g.wait(lambda: len(last(g, i, kinds)) > before, WAIT_S, line.split(" ", 2)[:2])
    return last(g, i, kinds)[before]


def test_a_full_disk_makes_its_member_leave_and_the_others_go_on(tmp_path, tiny_disk):
    journals = [str(tmp_path / "m0"), str(tmp_path / "m1"), str(tiny_disk / "m2")]
    answer = ("published", "queue_error")
    with LoopbackMembers(3, f"dfull-{os.getpid()}",
                         extra=["--no-ip-mcast", "--expected", "3", "--call-timeout", "20"]) as g:
        for i in range(3):
            g.spawn(i, ["--journal", journals[i]])
        g.wait_all(lambda v: len(v["members"]) == 3 and v["primary"], timeout=WAIT_S)
        acked, unsure, k = [], [], 0
        while len(g.last_view(0)["members"]) == 3:
            assert k < 400, f"the 1 MiB disk never filled up\n{g.logs()}"
            payload = f"d{k}-" + "x" * BODY
            e = call(g, k % 2, f"publish orders {payload}", answer)
            if e["event"] == "published":
                acked.append(payload)
            else:  # the view change under way: not taken, or (unknown) taken
                unsure.append(payload)
            k += 1
        g.wait_all(lambda v: sorted(v["members"]) == ["m0", "m1"] and v["primary"], [0, 1],
                   timeout=WAIT_S)
        refused = call(g, 2, "publish orders after-the-disk-filled", answer)
        assert refused["event"] == "queue_error" and refused["type"] == "QueueDiskError", \
            refused
        assert "its journal failed" in refused["error"] and "ENOSPC" in refused["error"], \
            refused["error"]
        print(f"{k} publishes, {len(acked)} acknowledged before m2's disk filled; "
              f"m2 answers {refused['error']}")
        for j in range(5):  # the other two go on
            e = call(g, j % 2, f"publish orders after-{j}", answer)
            assert e["event"] == "published", e
            acked.append(f"after-{j}")
        drained = call(g, 1, "drain orders", ("drained", "queue_error"))
        assert drained["event"] == "drained", drained
        got = drained["payloads"]
        assert len(got) == len(set(got)), "a message delivered twice"
        assert set(acked) <= set(got) <= set(acked) | set(unsure), (
            f"{len(acked)} acknowledged, {len(got)} drained; lost "
            f"{[p[:8] for p in set(acked) - set(got)]}, "
            f"never published {[p[:8] for p in set(got) - set(acked) - set(unsure)]}")
        assert len(acked) > 5
