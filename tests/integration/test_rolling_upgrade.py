"""A rolling upgrade on Ray (``Group.upgrade``, MySQL Group Replication's version rule): five
member actors at the default wire versions (1, 1) are replaced one at a time by member actors
at (1, 2) while the driver sends through the group. An observer channel at (1, 2), in the
group throughout, sees: every view primary; the group's wire version 1 while any (1, 1) member
is in the view and 2 from the view without the last one; every message the driver sent,
exactly once and in order. Then a member at (2, 2) only is refused, naming both ranges.

``raygroups upgrade CLUSTER --wheel FILE`` on a group the CLI started: every member then runs
the wheel's build (a copy of this checkout with its own version number), after the CLI's job
ended, and a local wheel given to ``Group.upgrade`` is refused before any member leaves."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
import ray

pytest_plugins = ["tests.ray_fixtures"]

from raygroups.actors import Group, JoinRejected  # noqa: E402
from raygroups.stack import Channel, StackConfig  # noqa: E402
from raygroups.stack.message import Message  # noqa: E402
from raygroups.stack.view import ViewChange  # noqa: E402

CLUSTER = f"upg-{os.getpid()}"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NEXT = {"transport__wire_versions": (1, 2)}


class Observer:
    """A channel at (1, 2) in the group, recording views and payloads on its own loop."""

    def __init__(self, g: Group):
        ring = ray.get(g._handle(g.member_names()[0]).group_key.remote())
        hosts = [(m["address"].rsplit(":", 1)[0], int(m["address"].rsplit(":", 1)[1]))
                 for m in g.members()]
        self.cfg = StackConfig.local(initial_hosts=hosts, transport__ip_multicast=False,
                                     cluster_key=ring, auth_mode="aesgcm", **NEXT)
        self.cluster = g.cluster
        self.views: list = []
        self.payloads: list = []
        self.joined = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()
        assert self.joined.wait(60), "the observer did not join"

    async def _run(self) -> None:
        ch = Channel(self.cluster, "observer", self.cfg)
        await ch.connect(timeout=30.0)
        self.views.append((ch.view, ch.wire_version))
        self.joined.set()
        try:
            while not self.stop.is_set():
                try:
                    events = await ch.events_many(timeout=0.2)
                except asyncio.TimeoutError:
                    continue
                for ev in events:
                    if isinstance(ev, ViewChange):
                        self.views.append((ev.view, ch.wire_version))
                    elif isinstance(ev, Message):
                        self.payloads.append(ev.payload)
        finally:
            await ch.close()


def test_a_rolling_upgrade_under_traffic_loses_nothing_and_raises_the_version_last(
        ray_session):
    g = Group.launch(CLUSTER, members=5, timeout=90)
    try:
        obs = Observer(g)
        sent, stop = [], threading.Event()

        def traffic() -> None:
            i = 0
            while not stop.is_set():
                try:
                    g.send(i)
                except Exception:  # the member asked was just replaced: not sent
                    time.sleep(0.05)
                    continue
                sent.append(i)
                i += 1
                time.sleep(0.005)
        t = threading.Thread(target=traffic, daemon=True)
        t.start()
        order = g.upgrade(stack_options=NEXT, timeout=90)
        time.sleep(1.0)
        stop.set()
        t.join(10)
        deadline = time.monotonic() + 30
        while set(obs.payloads) < set(sent) and time.monotonic() < deadline:
            time.sleep(0.1)
        obs.stop.set()
        obs.thread.join(10)

        assert sorted(order) == sorted(g.member_names()) and len(order) == 5
        assert len(sent) > 100
        got = [p for p in obs.payloads if isinstance(p, int)]
        assert got == sorted(set(got)), "a message twice or out of order"
        assert set(sent) <= set(got), f"lost: {sorted(set(sent) - set(got))[:10]}"
        old_gone = False
        for view, version in obs.views:
            assert view.primary, f"a view without a primary component: {view}"
            old = any(hi < 2 for _, hi in view.ranges().values())
            old_gone = old_gone or not old
            assert view.wire_version == (1 if old else 2), (view, view.versions)
        assert old_gone and obs.views[-1][0].wire_version == 2
        stats = [p["stats"]["stack"]["wire_version"] for p in g.probe() if p]
        assert stats == [2] * 5, stats

        # a sixth member at (1, 1) takes the group back to 1 (a rollback is a join); then a
        # build that speaks only 2 is refused, with both ranges named
        Group.launch(CLUSTER, members=6, timeout=60,
                     stack_options={"transport__wire_versions": (1, 1)})
        with pytest.raises(JoinRejected, match=r"transport.wire_versions is \[1, 1\] in the "
                                               r"group, \[2, 2\] here"):
            Group.launch(CLUSTER, members=7, timeout=60,
                         stack_options={"transport__wire_versions": (2, 2)})
        assert len(Group.attach(CLUSTER).member_names()) == 6  # the refused one removed
    finally:
        g.shutdown()


def cli(session, cwd, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: not from this checkout, whose directory would come ahead
    of the new build on the members' path (Ray gives the workers its drivers' sys.path)."""
    env = session.env(PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "raygroups.actors", *args], env=env,
                         capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert out.returncode == 0, f"raygroups {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out


def new_build(tmp_path, version: str) -> str:
    """A wheel of this checkout numbered ``version``: the "new build" of an upgrade."""
    src = tmp_path / "checkout"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "campaign-results", "__pycache__", "*.egg-info", "build", "dist"))
    import raygroups
    init = src / "raygroups" / "__init__.py"
    old = f'__version__ = "{raygroups.__version__}"'
    assert old in init.read_text()
    init.write_text(init.read_text().replace(old, f'__version__ = "{version}"'))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True,
                   text=True, timeout=600)
    [whl] = (tmp_path / "dist").glob("raygroups-*.whl")
    return str(whl)


def test_raygroups_upgrade_with_a_wheel_runs_the_new_build_on_every_member(ray_session,
                                                                           tmp_path):
    import raygroups
    cluster = f"upw-{os.getpid()}"
    new = f"{raygroups.__version__}+next"
    whl = new_build(tmp_path, new)
    cli(ray_session, tmp_path, "up", cluster, "--members", "3", "--json", "--token-file",
        str(tmp_path / "token"))
    g = Group.attach(cluster)
    try:
        assert {g.info(n)["version"] for n in g.member_names()} == {raygroups.__version__}
        with pytest.raises(ValueError, match="only for a job"):
            g.upgrade(runtime_env={"py_modules": [whl]})
        assert len(g.view().members) == 3  # refused before anyone left
        out = cli(ray_session, tmp_path, "upgrade", cluster, "--wheel", whl, "--option",
                  "transport__wire_versions=[1,2]", "--json")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert sorted(result["upgraded"]) == sorted(g.member_names())
        assert result["builds"] == [new] and result["wire_versions"] == [2], result
        # the CLI's job is over; the members live on, from the wheel it uploaded
        assert {g.info(n)["version"] for n in g.member_names()} == {new}
        assert len(g.view().members) == 3 and g.view().primary
        g.send(b"after the upgrade")
    finally:
        g.shutdown()
