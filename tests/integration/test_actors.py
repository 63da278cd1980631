"""Members as Ray actors (issue 6) on a real local Ray cluster, one Ray session per run.

One 5-member group for the module: launch, views that agree with every member's stack,
members' attributes, multicast through the handle, a second launch that attaches, a second
driver process that attaches by name, the async forms, typed errors, leave and rejoin through
the subscription, a debug pause; then ``ray.kill`` of a member (excluded, Ray's signal in the
record) and a Ray restart of another (rejoins with a fresh UUID). No wall-clock assertions:
every wait is for a condition, with a generous deadline.
"""
import asyncio
import json
import os
import random
import re
import threading
import time
import urllib.request

import pytest

pytest_plugins = ["tests.ray_fixtures"]


from raygroups.actors import (Group, GroupClosed, JoinRejected, NoSuchGroup,  # noqa: E402
                              NotMember)
from raygroups.actors.group_key import read_ring  # noqa: E402
from raygroups.stack import ConfigError, RaygroupsError, View  # noqa: E402

from ..aio import wait_until  # noqa: E402

WAIT_S = 60.0


def wait_for(g: Group, pred, after=None, timeout: float = WAIT_S) -> View:
    """The first view (from the subscription) that satisfies ``pred``."""
    for v in g.views(after=after, timeout=timeout):
        if pred(v):
            return v
    raise AssertionError(f"no view satisfying the condition within {timeout}s: {g.view()}")


@pytest.fixture(scope="module")
def group(ray_session):
    g = Group.launch(f"t-actors-{os.getpid()}", members=5, timeout=WAIT_S,
                     metrics_interval_s=0.5)
    yield g
    g.shutdown()


def test_launch_five_members_one_view(group):
    v = group.view()
    assert len(v.members) == 5
    assert sorted(m.name for m in v.members) == sorted(group.member_names())


def test_the_first_primary_needs_a_majority_of_the_members_launched(group):
    """Group.launch bootstraps once, as MySQL Group Replication does: its founder's group of
    one is not primary, the first primary view holds a majority of the five launched. So a
    member that starts while cut off from its group (Ray restarting it, a host booted again
    into a partition) founds a group of one that is not a second primary."""
    hist = [v for n in group.member_names() for v in group.view_history(n)]
    primaries = [v for v in hist if v["primary"]]
    assert primaries and all(2 * len(v["members"]) > 5 for v in primaries), primaries
    assert any(len(v["members"]) == 1 and not v["primary"] for v in hist), hist  # the founder

def test_views_agree_with_every_members_stack(group):
    v = group.view()
    infos = group.probe()
    assert len(infos) == 5
    for info in infos:
        assert info["state"] == "member", info
        assert info["view"]["view_id"] == [v.view_id.coord.name, v.view_id.id]
        assert info["view"]["uuids"] == [m.uuid_hex for m in v.members]
        # the member's own history ends with the same view
        hist = group.view_history(member=info["name"])
        assert hist[-1]["view_id"] == info["view"]["view_id"]


def test_members_attributes(group, ray_session):
    ms = group.members()
    v = group.view()
    assert [m["uuid"] for m in ms] == [a.uuid_hex for a in v.members]
    for m in ms:
        assert {"name", "uuid", "address", "node_id", "state", "coordinator",
                "actor_name", "http_url"} <= set(m)
        assert m["node_id"] == ray_session.node_id
        assert m["state"] == "alive"
        assert m["address"].startswith("127.0.0.1:")
        assert m["actor_name"] == f"raygroups:{group.cluster}:{m['name']}"
    assert [m["coordinator"] for m in ms] == [True] + [False] * 4
    # no actor handles leak into what users get
    assert "ActorHandle" not in repr(ms)


def test_send_reaches_every_member_and_batches(group):
    group.send(b"job-1")
    names = group.member_names()
    for n in names:
        got = []
        while not got:
            got = [m for m in group.receive(timeout=5, member=n) if m["payload"] == b"job-1"]
        assert got[0]["sender"] in names
    assert group.send_many([b"b%d" % i for i in range(500)]) == 500
    n, seen = names[0], []
    while len(seen) < 500:
        batch = group.receive(max_messages=1000, timeout=10, member=n)
        assert batch, "messages stopped arriving"
        seen += [m["payload"] for m in batch if m["payload"].startswith(b"b")]
    assert seen == [b"b%d" % i for i in range(500)]  # FIFO from one sender


def _ours(batch, prefix: bytes) -> list:
    return [m for m in batch if m.payload.startswith(prefix)]


def test_batch_reads_and_subscriptions_keep_fifo_without_loss_or_duplicates(group):
    """A driver sends numbered messages in batches of random sizes while it reads each
    member's inbox in batches of random sizes between sends (reads that name a member never
    move where the handle sends); then half the members are read to the end through a
    subscription, half through an async one. Every member has every message once, in send
    order, all from one sender, each tagged with the current view."""
    seed = 19081
    print(f"seed {seed}")
    rng = random.Random(seed)
    names = group.member_names()
    sent = [b"fifo-%d" % k for k in range(1500)]
    got: dict = {n: [] for n in names}
    k = 0
    while k < len(sent):
        step = rng.randint(1, 250)
        assert group.send_many(sent[k:k + step]) == len(sent[k:k + step])
        k += step
        reader = rng.choice(names)
        b = group.receive_many(max_messages=rng.randint(1, 400), timeout=0, member=reader)
        got[reader] += _ours(b, b"fifo-")
    view = group.view().view_id
    for i, n in enumerate(names):
        cap = rng.randint(50, 700)
        sub = group.subscribe(member=n, max_messages=cap, wait_s=5.0,
                              min_messages=rng.randint(1, cap), linger_s=rng.choice((0, 0.05)))
        if i % 2:
            async def read(sub=sub, n=n):
                async for b in sub:
                    assert 0 < len(b) <= cap
                    got[n] += _ours(b, b"fifo-")
                    if len(got[n]) >= len(sent):
                        return
            asyncio.run(asyncio.wait_for(read(), WAIT_S))
        else:
            for b in sub:
                assert 0 < len(b) <= cap
                got[n] += _ours(b, b"fifo-")
                if len(got[n]) >= len(sent):
                    break
        assert sub.taken_by_others == 0
    for n in names:
        assert [m.payload for m in got[n]] == sent, n
        assert len({m.sender for m in got[n]}) == 1
        assert {tuple(m.view) for m in got[n]} == {(view.coord.uuid_hex, view.id)}


def test_a_publisher_keeps_its_batches_fifo_with_several_in_flight(group):
    """Batches of random sizes (seeded) through a publisher with 3 calls in flight, sync
    then async: every member delivers every message once, in the order given; a batch
    sent again under its number sends nothing."""
    seed = 19083
    print(f"seed {seed}")
    rng = random.Random(seed)
    sent = [b"pub-%d" % k for k in range(2000)]
    cuts = sorted(rng.sample(range(1, len(sent)), 24))
    batches = [sent[a:b] for a, b in zip([0] + cuts, cuts + [len(sent)])]
    pub = group.publisher(in_flight=3)
    for b in batches[:12]:
        pub.send_many(b)

    async def rest():
        for b in batches[12:]:
            await pub.send_many_async(b)
        return await pub.flush_async()
    assert asyncio.run(rest()) == len(sent)
    again = group._handle(pub.member).send_many.remote(batches[0], None, (pub.id, 0))
    assert group._get(pub.member, again) == 0
    for n in group.member_names():
        got = []
        while len(got) < len(sent):
            b = group.receive_many(timeout=10, member=n)
            assert b, f"{n}: messages stopped at {len(got)}"
            got += [m.payload for m in _ours(b, b"pub-")]
        assert got == sent, n
        assert not _ours(group.receive_many(timeout=0.3, member=n), b"pub-")  # no repeat


def test_send_many_takes_an_object_ref_and_frees_it(group):
    import ray

    from raygroups.actors.ray_compat import objects_held
    payloads = [b"ref-%d." % k + b"." * 2000 for k in range(300)]  # 600 KB: object store
    ref = ray.put(payloads)
    oid = ref.hex()
    assert group.send_many(ref) == 300
    del ref
    deadline = time.monotonic() + WAIT_S
    while oid in objects_held():
        assert time.monotonic() < deadline, "the payloads' object is still held"
        time.sleep(0.05)
    n, seen = group.member_names()[0], []
    while len(seen) < 300:
        b = group.receive_many(timeout=10, member=n)
        assert b, "messages stopped arriving"
        seen += [m.payload for m in _ours(b, b"ref-")]
    assert seen == payloads


def test_a_batch_read_lingers_for_more_but_returns_what_came(group):
    n = group.member_names()[1]
    while group.receive_many(timeout=0, member=n):
        pass
    group.send_many([b"linger-%d" % k for k in range(3)])
    b = group.receive_many(timeout=10, member=n, min_messages=100, linger_s=0.2)
    got = [m.payload for m in _ours(b, b"linger-")]
    while len(got) < 3:  # the first may have come alone, before the linger began
        got += [m.payload for m in _ours(group.receive_many(timeout=10, member=n), b"linger-")]
    assert got == [b"linger-%d" % k for k in range(3)]
    assert len(group.receive_many(timeout=0, member=n)) == 0


def test_batch_api_typed_errors(group):
    import ray
    with pytest.raises(TypeError):
        group.send_many(b"one payload, not a list")
    with pytest.raises(TypeError):  # raised by the member, unwrapped
        group.send_many(ray.put(b"one payload, not a list"))
    with pytest.raises(ValueError):
        group.receive_many(max_messages=0)
    with pytest.raises(ValueError):
        group.subscribe(max_messages=2, min_messages=5)
    with pytest.raises(NotMember):
        group.receive_many(member="nobody-by-that-name")
    with pytest.raises(ValueError):
        group.publisher(in_flight=0)


def test_second_launch_attaches(group):
    before = {m["name"]: m["uuid"] for m in group.members()}
    again = Group.launch(group.cluster, members=5, timeout=WAIT_S)
    assert {m["name"]: m["uuid"] for m in again.members()} == before


def test_a_member_with_other_agreed_settings_is_refused_and_removed(group):
    """Launching one more member whose agreed settings differ: JoinRejected naming them, the
    refused actor is removed, the group's view is unchanged."""
    before = group.view()
    with pytest.raises(JoinRejected, match="app.schema is None in the group, 2 here"):
        Group.launch(group.cluster, members=6, timeout=WAIT_S,
                     stack_options={"gms__agreed": {"app.schema": 2}})
    assert sorted(group.member_names()) == sorted(m.name for m in before.members)
    assert group.view().view_id == before.view_id


def test_a_launch_with_settings_no_stack_runs_is_refused_before_anything_is_made(group):
    """A bad stack option is a typed error (ConfigError) at once: no member actor, and no key
    ring left in Ray's KV for a group that never ran."""
    name = f"bad-settings-{os.getpid()}"
    with pytest.raises(ConfigError, match="expected_size is a number of members"):
        Group.launch(name, members=2, timeout=WAIT_S,
                     stack_options={"primary__expected_size": "abc"})
    assert name not in Group.list_groups()
    left = read_ring(group.namespace, name) is not None  # (a bool: no key in a failure)
    assert not left, "a key ring was left in Ray's KV"


def test_attach_from_a_second_driver(group, ray_session):
    code = (
        "import json, ray\n"
        "ray.init(address=__import__('os').environ['RAY_ADDRESS'], log_to_driver=False)\n"
        "from raygroups.actors import Group\n"
        f"g = Group.attach({group.cluster!r})\n"
        "v = g.view()\n"
        "print(json.dumps({'view_id': [v.view_id.coord.name, v.view_id.id],\n"
        "                  'uuids': [m.uuid_hex for m in v.members],\n"
        "                  'names': sorted(m['name'] for m in g.members())}))\n")
    out = ray_session.run_driver(code)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    v = group.view()
    assert got["view_id"] == [v.view_id.coord.name, v.view_id.id]
    assert got["uuids"] == [m.uuid_hex for m in v.members]
    assert got["names"] == sorted(group.member_names())


def test_async_forms(group):
    async def main():
        v = await group.view_async()
        ms = await group.members_async()
        await group.send_async(b"async-1")
        first = None
        async for w in group.views_async(timeout=1.0):
            first = w
            break
        return v, ms, first
    v, ms, first = asyncio.run(main())
    assert v == group.view() == first
    assert [m["uuid"] for m in ms] == [a.uuid_hex for a in v.members]


def test_typed_errors(group):
    with pytest.raises(NoSuchGroup):
        Group.attach(f"no-such-group-{os.getpid()}")
    assert issubclass(NoSuchGroup, GroupClosed)
    with pytest.raises(NotMember):
        group.send(b"x", dest="nobody-by-that-name")
    with pytest.raises(NotMember):
        group.info("nobody-by-that-name")
    with pytest.raises(RaygroupsError):
        group.view_history(member="nobody-by-that-name")


def test_leave_and_rejoin_seen_in_order_by_the_subscription(group):
    v0 = group.view()
    leaver = v0.members[-1]
    group.leave(leaver.name)
    assert group.info(leaver.name)["state"] == "left"
    with pytest.raises(NotMember):  # once what it delivered before leaving is read
        for _ in range(100):
            group.receive(max_messages=100_000, timeout=0.1, member=leaver.name)
    v1 = wait_for(group, lambda v: leaver not in v, after=v0.view_id)
    assert v1.view_id > v0.view_id
    group.rejoin(leaver.name)
    v2 = wait_for(group, lambda v: leaver.name in [m.name for m in v.members],
                  after=v1.view_id)
    back = next(m for m in v2.members if m.name == leaver.name)
    assert back.uid != leaver.uid  # a fresh UUID
    hist = [tuple(h["view_id"]) for h in group.view_history(member=v0.members[0].name)]
    i0, i1, i2 = (hist.index((x.view_id.coord.name, x.view_id.id)) for x in (v0, v1, v2))
    assert i0 < i1 < i2


def test_a_view_feed_closed_runs_no_callback_after_close_returns(group):
    """ViewFeed.close() waits for a callback that is running, and none starts after it."""
    from raygroups.integration import ViewFeed
    feed = ViewFeed(None, group.cluster)
    v0 = feed.wait_for(lambda v: len(v.members) == 5, WAIT_S)
    entered, release, calls = threading.Event(), threading.Event(), []

    def slow(old, new):
        calls.append(new)
        entered.set()
        release.wait(WAIT_S)
    feed.on_change(slow)
    leaver = v0.members[-1]
    group.leave(leaver)
    try:
        assert entered.wait(WAIT_S), "no view change reached the callback"
        closer = threading.Thread(target=feed.close)
        closer.start()
        closer.join(0.5)
        assert closer.is_alive()  # held by the running callback (cannot pass early)
        release.set()
        closer.join(WAIT_S)
        assert not closer.is_alive()
        seen = len(calls)
    finally:
        release.set()
        group.rejoin(leaver)
    wait_for(group, lambda v: leaver in [m.name for m in v.members] and len(v.members) == 5)
    assert len(calls) == seen  # the rejoin's views came after close(): no callback


def test_debug_pause_stops_and_resumes(group):
    name = group.view().members[-1].name
    group.pause(name, 0.5)
    info = next(i for i in group.probe() if i["name"] == name)
    assert info["state"] in ("paused", "member")  # "member" if the pause is already over
    while group.info(name)["state"] == "paused":
        pass
    assert group.info(name)["state"] == "member"


def test_metrics_and_figures(group):
    info = group.probe()[0]
    while info["metrics_exports"] == 0:  # the exporter runs every 0.5 s here
        info = group.probe()[0]
    f = info["figures"]
    assert f["views_installed"] >= 1 and f["messages_sent"] > 0 and f["bytes_received"] > 0
    assert set(f) >= {"views_installed", "suspicions", "messages_sent", "messages_received",
                      "messages_retransmitted", "bytes_sent", "bytes_received"}


def prometheus(name: str, cluster: str) -> dict:
    """member -> value of Ray's metric ``name`` for ``cluster``, read from every node's
    Prometheus endpoint (Ray prefixes ``ray_``; counters end in ``_total``)."""
    import ray
    out = {}
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        for m in re.finditer(r"^ray_" + name + r"\{([^}]*)\} (\S+)$", text, re.M):
            tags = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if tags.get("cluster") == cluster:
                out[tags["member"]] = float(m.group(2))
    return out


def test_metrics_values_read_back_from_rays_prometheus_endpoint(ray_session):
    """What the members export is what Ray serves: the members gauge is the view's size at
    every member, and each member's sent-messages counter climbs to (at least) what its
    channel counted before and never beyond what it counts after (a group of its own: a
    member that rejoined has a fresh channel, counting from zero, while Ray's counter goes
    on)."""
    g = Group.launch(f"t-metrics-{os.getpid()}", members=2, timeout=WAIT_S,
                     metrics_interval_s=0.5)
    try:
        names = sorted(g.member_names())
        for _ in range(3):
            g.send(b"counted")
        before = {i["name"]: i["figures"]["messages_sent"] for i in g.probe()}
        deadline = time.monotonic() + WAIT_S
        while True:
            gauge = prometheus("raygroups_members", g.cluster)
            sent = prometheus("raygroups_messages_sent_total", g.cluster)
            if sorted(gauge) == names and all(gauge[n] == 2 for n in names) and \
                    all(sent.get(n, 0) >= before[n] for n in names):
                break
            assert time.monotonic() < deadline, (gauge, sent, before)
            time.sleep(0.5)
        after = {i["name"]: i["figures"]["messages_sent"] for i in g.probe()}
        assert all(0 < sent[n] <= after[n] for n in names), (sent, after)
    finally:
        g.shutdown()


def test_ray_kill_excludes_the_member(group):
    v0 = group.view()
    victim = v0.members[2]
    group.kill(victim.name)
    v1 = wait_for(group, lambda v: victim not in v, after=v0.view_id)
    assert len(v1.members) == 4
    for info in group.probe():
        assert victim.uuid_hex not in info["view"]["uuids"]
    events = [s for i in group.probe() for s in i["suspicions"]
              if s["uuid"] == victim.uuid_hex and s["event"] == "RayDead"]
    assert events, "Ray's failure signal was not recorded"
    assert victim.name not in group.member_names()


def test_ray_restart_rejoins_with_a_new_uuid(group):
    v0 = group.view()
    victim = v0.members[-1]
    group.kill(victim.name, restart=True)
    v1 = wait_for(group, lambda v: victim not in v, after=v0.view_id)
    v2 = wait_for(group, lambda v: victim.name in [m.name for m in v.members],
                  after=v1.view_id)
    back = next(m for m in v2.members if m.name == victim.name)
    assert back.uid != victim.uid
    # the others may install the view before the restarted member's own join completes,
    # and a member tells its uuid only once it is one (CI saw None here once)
    wait_until(lambda: group.info(victim.name)["uuid"] is not None, "its uuid", WAIT_S)
    info = group.info(victim.name)
    assert info["uuid"] == back.uuid_hex and info["restarts"] >= 1


def test_a_first_primary_that_a_minority_may_start_is_warned_of_at_launch(ray_session):
    """``primary__expected_size`` set by hand below a majority of the members launched: the
    launch says, through ``progress`` (one line, as the CLI prints it) and the log, that two
    parts of the group could each start a primary component; the group still forms."""
    said: list = []
    g = Group.launch(f"t-expected-{os.getpid()}", members=3, timeout=WAIT_S,
                     stack_options={"primary__expected_size": 1}, progress=said.append)
    try:
        assert len(g.view().members) == 3
        warned = [s for s in said if "primary__expected_size=1 with 3 members" in s]
        assert len(warned) == 1 and "\n" not in warned[0], said
    finally:
        g.shutdown()
