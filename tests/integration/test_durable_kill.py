"""Durable queues in real processes killed -9 together (the Qpid new-cluster design's
persistent cluster): three member processes (tests/member_proc.py ``--journal``) on
loopback run a seeded random workload of publishers and consumers through all three, are
SIGKILLed together at a seeded moment mid-traffic, and start again on their journals; then
everything left is drained. The history (Jepsen-style: every publish and accept the test
saw acknowledged, and every accept it saw begin) must show no acknowledged publish lost,
nothing accepted twice and nothing accepted that was never published.

One group of processes serves every seed (each seed its own queue, and each seed kills and
restarts the whole group); the seed is in the test id and in every failure message.
"""
import os
import random
import signal
import time
from collections import Counter

import pytest

from ..member_proc import LoopbackMembers

BASE_SEED = int(os.environ.get("DURABLE_KILL_SEED", "1700"))
SEEDS = [BASE_SEED + k for k in range(20)]
WAIT_S = 60.0


def spawn_all(g: LoopbackMembers) -> None:
    for i in range(g.n):
        g.spawn(i, ["--journal", g.journals[i]])
    g.wait_all(lambda v: len(v["members"]) == g.n and v["primary"], timeout=WAIT_S)


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    base = tmp_path_factory.mktemp("journals")
    with LoopbackMembers(3, f"dkill-{os.getpid()}",
                         extra=["--no-ip-mcast", "--expected", "3", "--call-timeout", "15"]) as g:
        g.journals = [str(base / n) for n in g.names]
        spawn_all(g)
        yield g


def history(g: LoopbackMembers, queue: str) -> dict:
    """What the current processes said about ``queue``: payloads by event kind."""
    out: dict = {}
    for i in range(g.n):
        for e in g.events(i):
            if e.get("queue") == queue:
                if e["event"] == "drained":
                    out.setdefault("drained", []).extend(e["payloads"])
                else:
                    out.setdefault(e["event"], []).append(e.get("payload"))
    return out


def acks(g: LoopbackMembers, queue: str) -> int:
    h = history(g, queue)
    return len(h.get("published", ())) + len(h.get("accepted", ()))


def kill_all(g: LoopbackMembers) -> None:
    """SIGKILL every member at once (then reap them)."""
    procs = list(g.procs)
    for p in procs:
        os.kill(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait(10)


def drain(g: LoopbackMembers, i: int, queue: str, seed: int) -> list:
    """Acquire and accept through member i until nothing comes; the payloads accepted."""
    before = len([e for e in g.events(i) if e["event"] in ("drained", "queue_error")])
    g.command(i, f"drain {queue}")
    g.wait(lambda: len([e for e in g.events(i) if e["event"] in ("drained", "queue_error")])
           > before, WAIT_S, f"seed {seed}: drain of {queue} at m{i}", live=range(g.n))
    last = [e for e in g.events(i) if e["event"] in ("drained", "queue_error")][-1]
    assert last["event"] == "drained", f"seed {seed}: drain failed: {last}"
    return last["payloads"]


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed{s}" for s in SEEDS])
def test_kill_every_member_mid_traffic_and_restart_them_on_their_journals(group, seed):
    g = group
    rng = random.Random(seed)
    print(f"seed {seed}")
    queue = f"q{seed}"
    kill_after = rng.randint(5, 50)  # acknowledged publishes and accepts before the kill
    sent = []
    step = 0
    while acks(g, queue) < kill_after:
        assert step < 2000, f"seed {seed}: no traffic acknowledged\n{g.logs()}"
        i = rng.randrange(g.n)
        if rng.random() < 0.65 or step < 3:
            payload = f"s{seed}-{step}"
            sent.append(payload)
            g.command(i, f"publish {queue} {payload}")
        else:
            g.command(i, f"consume {queue} {rng.randint(1, 4)}")
        step += 1
        time.sleep(rng.choice((0.0, 0.0, 0.002, 0.01, 0.03)))
    burst = rng.randint(0, 60)  # a burst of publishes: the kill comes while they are answered
    for _ in range(burst):
        payload = f"s{seed}-{step}"
        sent.append(payload)
        g.command(rng.randrange(g.n), f"publish {queue} {payload}")
        step += 1
    answered = acks(g, queue) + rng.randint(0, burst // 3)
    deadline = time.monotonic() + 10
    while acks(g, queue) < answered and time.monotonic() < deadline:
        time.sleep(0.001)
    kill_all(g)
    before = history(g, queue)
    spawn_all(g)
    first = rng.randrange(g.n)
    drained = drain(g, first, queue, seed)
    drained += drain(g, (first + 1) % g.n, queue, seed)  # anything the first could not see

    published = set(before.get("published", ()))
    accepted = before.get("accepted", ())
    in_flight = set(before.get("accepting", ())) - set(accepted)  # outcome unknown
    every = list(accepted) + drained
    twice = sorted(p for p, n in Counter(every).items() if n > 1)
    never = sorted(set(every) - set(sent))
    lost = sorted(published - set(every) - in_flight)
    summary = (f"seed {seed}: {len(sent)} publishes sent, {len(published)} acknowledged, "
               f"{len(accepted)} accepts acknowledged before the kill, {len(in_flight)} "
               f"in flight, {len(drained)} drained after the restart")
    print(summary)
    assert not lost, f"{summary}: acknowledged publishes lost: {lost}"
    assert not twice, f"{summary}: accepted twice: {twice}"
    assert not never, f"{summary}: accepted but never published: {never}"
    assert published, f"{summary}: nothing was acknowledged before the kill"
