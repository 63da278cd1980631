"""Live key rotation on Ray (``Group.rotate_key``, ``raygroups rotate-key``): the group's
key is replaced while messages flow, with no restart, no view change and no message lost or
reordered; afterwards a process with the new key joins and one with the old key cannot; a
member that Ray restarts after the rotation takes the group's ring from Ray's KV and rejoins;
a launch with the retired key is refused (JoinRejected) without the key in the message."""
import asyncio
import os
import threading
import time

import pytest
import ray

pytest_plugins = ["tests.ray_fixtures"]

from raygroups.actors import Group, JoinRejected  # noqa: E402
from raygroups.actors.group_key import read_ring  # noqa: E402
from raygroups.stack import Channel, StackConfig  # noqa: E402
from raygroups.stack.auth import key_id  # noqa: E402

CLUSTER = f"rot-{os.getpid()}"


@pytest.fixture(scope="module")
def group(ray_session):
    g = Group.launch(CLUSTER, members=3, timeout=60)
    yield g
    g.shutdown()
    left = read_ring(g.namespace, CLUSTER) is not None  # (a bool: no key in a failure)
    assert not left, "shutdown deletes the group's key ring"


def keys_of(g) -> dict:
    return {n: ray.get(g._handle(n).group_key.remote()) for n in g.member_names()}


def drain(g, got: dict) -> None:
    for n in got:
        while True:
            msgs = g.receive(member=n, timeout=0.2)
            if not msgs:
                break
            got[n] += [m["payload"] for m in msgs]


def seen(g) -> dict:
    """What each member saw, for a failure message: the views it installed (ids), its last
    suspicions and its drop counters."""
    return {p["name"]: {"views": [v["view_id"] for v in g.view_history(member=p["name"])],
                        "suspicions": p.get("suspicions", [])[-4:],
                        "dropped": p.get("dropped")} for p in g.probe()}


def joins_with(g, key: bytes) -> list:
    """The view a raw channel holding ``key`` ends up in (its members' names)."""
    hosts = [(m["address"].rsplit(":", 1)[0], int(m["address"].rsplit(":", 1)[1]))
             for m in g.members()]
    cfg = StackConfig.local(initial_hosts=hosts, transport__ip_multicast=False,
                            cluster_key=key, auth_mode="aesgcm")

    async def run():
        ch = Channel(g.cluster, "probe-key", cfg)
        try:
            await ch.connect(timeout=10.0)
            return sorted(a.name for a in ch.view.members)
        finally:
            await ch.close()
    return asyncio.run(run())


def test_a_rotation_under_traffic_loses_nothing_and_changes_no_view(group):
    old = keys_of(group)
    assert len({tuple(r) for r in old.values()}) == 1 and len(next(iter(old.values()))) == 1
    old_key = next(iter(old.values()))[0]
    view = group.view()
    got = {n: [] for n in group.member_names()}
    sent, stop = [], threading.Event()

    def traffic():
        i = 0
        while not stop.is_set():
            group.send(i)  # through one member: FIFO from it
            sent.append(i)
            i += 1
            time.sleep(0.005)
    t = threading.Thread(target=traffic, daemon=True)
    t.start()
    def until(n: int) -> None:
        deadline = time.monotonic() + 30
        while len(sent) < n and time.monotonic() < deadline:
            time.sleep(0.01)
    try:
        until(20)
        before = len(sent)
        kid = group.rotate_key()
        during = len(sent) - before
        until(len(sent) + 20)
    finally:
        stop.set()
        t.join(10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(len(v) < len(sent) for v in got.values()):
        drain(group, got)
    assert all(v == sent for v in got.values()), (
        {n: len(v) for n, v in got.items()}, len(sent), seen(group))
    assert len(sent) >= 40, f"traffic flowed before and after it ({during} during it)"
    assert group.view().view_id == view.view_id, "no view change"
    new = keys_of(group)
    rings = {n: [key_id(k).hex() for k in r] for n, r in new.items()}
    assert all(r == [kid] for r in rings.values()), rings
    assert [key_id(k).hex() for k in read_ring(group.namespace, CLUSTER)] == [kid]
    assert kid != key_id(old_key).hex()
    new_key = next(iter(new.values()))[0]
    assert "probe-key" in joins_with(group, new_key), "the new key is the group's now"
    assert joins_with(group, old_key) == ["probe-key"], "the old key no longer gets in"


def test_a_member_restarted_after_the_rotation_takes_the_ring_from_ray(group):
    v0 = group.view()
    victim = v0.members[-1]
    ring = keys_of(group)[group.member_names()[0]]
    group.kill(victim.name, restart=True)   # Ray restarts it with its first spec (old key)
    deadline = time.monotonic() + 60
    back = None
    while time.monotonic() < deadline:
        v = group.view()
        back = next((m for m in v.members if m.name == victim.name and m.uid != victim.uid),
                    None)
        if back is not None:
            break
        time.sleep(0.2)
    assert back is not None, "the restarted member rejoined"
    assert keys_of(group)[victim.name] == ring


def test_a_launch_with_the_retired_key_is_refused(group):
    old = b"\x01" * 32
    with pytest.raises(JoinRejected, match="stale cluster key") as e:
        Group.launch(CLUSTER, members=4, cluster_key=old, timeout=30)
    assert old.hex() not in str(e.value) and repr(old) not in str(e.value)
    assert len(group.view().members) == 3
    g4 = Group.launch(CLUSTER, members=4, timeout=60)  # no key: the group's, from Ray
    assert len(g4.view().members) == 4


def test_rotate_key_cli_prints_one_line_and_no_key(group, ray_session):
    import subprocess
    import sys
    before = keys_of(group)[group.member_names()[0]]
    out = subprocess.run([sys.executable, "-m", "raygroups.actors", "rotate-key", CLUSTER],
                         env=ray_session.env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    after = keys_of(group)[group.member_names()[0]]
    assert len(out.stdout.strip().splitlines()) == 1
    assert key_id(after[0]).hex() in out.stdout and after != before
    for k in before + after:
        assert k.hex() not in out.stdout + out.stderr
