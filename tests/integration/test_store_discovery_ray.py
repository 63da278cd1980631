"""Store discovery on Ray, in one local Ray session shared by the run (tests/ray_fixtures.py):
``ray-kv://`` (Ray's internal KV) with real channels, the DiscoverySupervisor actor as the
only caller of the store (node affinity, caching, counting; restarted by Ray after a kill -9
while the group runs on), and the BootstrapSupervisor
generating a bootstrap file from ``ray.nodes()`` and starting members in file order."""
import asyncio
import itertools
from collections import Counter

import pytest
import ray

import raygroups.actors  # noqa: F401  (registers ray-kv://)
from raygroups.actors.kv_store import RayKVStore
from raygroups.actors.supervisors import (BootstrapSupervisor, SupervisorStoreClient,
                                          discovery_supervisor)
from raygroups.stack import Channel, StackConfig
from raygroups.stack.discovery import MembersFile, StoreConflict
from raygroups.stack.discovery.members_file import file_name
from raygroups.stack.runtime.ports import free_run

from ..aio import until

pytest_plugins = ["tests.ray_fixtures"]  # the one Ray session of the run
pytestmark = pytest.mark.usefixtures("ray_session")
_ids = itertools.count()


def kv_files(store, cluster):
    out = {}
    for n in store.list(cluster):
        got = store.get(cluster, n)
        if got is not None:
            out[n] = MembersFile.parse(got[0], source=n)
    return out


def one_file(store, cluster, chans):
    if any(c.view is None for c in chans) or len({c.view.view_id for c in chans}) != 1:
        return False
    fs = kv_files(store, cluster)
    coord = chans[0].view.members[0]
    mf = fs.get(file_name(coord.uid))
    return len(fs) == 1 and mf is not None and mf.coordinator.uid == coord.uid and \
        {c.address.uid for c in chans} <= set(mf.by_uid()) and len(chans[0].view) == len(chans)


def test_ray_kv_store_conditional_writes():
    store = RayKVStore(f"rgtest{next(_ids)}")
    tag = store.put("c", "1.list", b"A 1 127.0.0.1:1 T\n", if_absent=True)
    with pytest.raises(StoreConflict):
        store.put("c", "1.list", b"x", if_absent=True)
    with pytest.raises(StoreConflict):
        store.put("c", "1.list", b"x", if_match='"stale"')
    tag2 = store.put("c", "1.list", b"A 1 127.0.0.1:2 T\n", if_match=tag)
    assert store.get("c", "1.list") == (b"A 1 127.0.0.1:2 T\n", tag2)
    assert store.list("c") == {"1.list": tag2}
    store.delete("c", "1.list")
    assert store.list("c") == {} and store.get("c", "1.list") is None
    assert store.calls == {"put": 4, "get": 2, "list": 2, "delete": 1}


def test_channels_discover_through_ray_kv():
    async def main():
        url = f"ray-kv://rgtest{next(_ids)}"
        cluster = "kv"
        check = RayKVStore.from_url(url)
        cfg = StackConfig.local(discovery=url, transport__ip_multicast=False,
                                store__rendezvous_interval_s=3600.0)
        a = Channel(cluster, "A", cfg)
        await a.connect(30)
        await until(lambda: kv_files(check, cluster), what="founder's file")
        chans = [a]
        for n in "BC":
            ch = Channel(cluster, n, cfg)
            await ch.connect(30)
            chans.append(ch)
            await until(lambda: one_file(check, cluster, chans), what=f"{n} in the file")
            assert dict(ch.runtime.store.calls) == {"list": 1, "get": 1}
        await a.close()
        rest = chans[1:]
        await until(lambda: one_file(check, cluster, rest), what="coordinator change")
        await asyncio.gather(*(c.close() for c in rest))
        await until(lambda: not kv_files(check, cluster), what="files removed")

    asyncio.run(main())


def test_discovery_supervisor_is_the_only_store_caller():
    url = f"ray-kv://rgtest{next(_ids)}"
    sup = discovery_supervisor(url, ttl_s=30.0)
    assert ray.get(sup.node_id.remote()) == ray.get_runtime_context().get_node_id()
    assert discovery_supervisor(url, ttl_s=30.0)._actor_id == sup._actor_id  # one per node

    async def main():
        cluster = "sup"
        cfg = StackConfig.local(discovery=url, transport__ip_multicast=False)
        chans = []
        for n in "ABC":
            ch = Channel(cluster, n, cfg, store=SupervisorStoreClient(sup))
            await ch.connect(30)
            chans.append(ch)
            await until(lambda: one_file(RayKVStore.from_url(url), cluster, chans),
                           what=f"{n} joined")
        calls = sum((c.runtime.store.calls for c in chans), start=Counter())
        await asyncio.gather(*(c.close() for c in chans))
        return calls

    client_calls = asyncio.run(main())
    counts = ray.get(sup.counts.remote())
    # every client call went to the supervisor; it called the store at most as often
    for kind in ("list", "get", "put"):
        assert counts["requests"].get(kind, 0) >= client_calls.get(kind, 0) > 0, (kind, counts)
        assert counts["calls"].get(kind, 0) <= counts["requests"][kind]
    assert sum(counts["cached"].values()) > 0  # reads answered from its cache (ttl 30 s)
    ray.kill(sup)


def test_a_crashed_discovery_supervisor_is_restarted_and_discovery_resumes():
    """kill -9 of the supervisor's process: the group runs on, Ray restarts the actor, and
    through the same handles a new member joins and is written."""
    import os
    import signal
    url = f"ray-kv://rgtest{next(_ids)}"
    sup = discovery_supervisor(url, ttl_s=0.0)
    check = RayKVStore.from_url(url)

    async def main():
        cluster = "crash"
        cfg = StackConfig.local(discovery=url, transport__ip_multicast=False,
                                store__rendezvous_interval_s=0.5)
        chans = []
        for n in "AB":
            chans.append(Channel(cluster, n, cfg, store=SupervisorStoreClient(sup)))
            await chans[-1].connect(30)
            await until(lambda: one_file(check, cluster, chans), what=f"{n} joined")
        old_pid = await asyncio.to_thread(ray.get, sup.pid.remote())
        os.kill(old_pid, signal.SIGKILL)
        # the group keeps working while the supervisor is gone
        for k in range(20):
            await chans[1].send(f"m{k}".encode())
        for c in chans:
            got = [(await c.receive(timeout=10)).payload for _ in range(20)]
            assert got == [f"m{k}".encode() for k in range(20)]

        def answers():
            try:
                return ray.get(sup.pid.remote(), timeout=5)
            except Exception:
                return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while (new_pid := await asyncio.to_thread(answers)) in (None, old_pid):
            assert loop.time() < deadline, "the supervisor was not restarted"
        c = Channel(cluster, "C", cfg, store=SupervisorStoreClient(sup))
        await c.connect(30)
        chans.append(c)
        await until(lambda: one_file(check, cluster, chans), what="C joined and written")
        assert new_pid != old_pid
        # (whether A's or B's rendezvous hit the store while it was down depends on how fast
        # Ray restarts it: a restart within one rendezvous interval shows no store error)
        await asyncio.gather(*(ch.close() for ch in chans))

    asyncio.run(main())
    ray.kill(sup)


def test_bootstrap_supervisor_starts_members_in_file_order():
    cluster = f"boot{next(_ids)}"
    url = f"ray-kv://rgtest{next(_ids)}"
    base = free_run(3)
    sup = BootstrapSupervisor.remote(cluster, discovery=url,
                                     options={"transport__ip_multicast": False})
    text = ray.get(sup.generate.remote(port=base, per_node=3))
    mf = MembersFile.parse(text)
    assert [(e.name, int.from_bytes(e.uid, "big"), e.host, e.port, e.coord) for e in mf] == [
        ("A", 1, "127.0.0.1", base, True), ("B", 2, "127.0.0.1", base + 1, False),
        ("C", 3, "127.0.0.1", base + 2, False)]
    location = ray.get(sup.write.remote())
    assert location == f"{url}/{cluster}/1.list"
    check = RayKVStore.from_url(url)
    assert check.get(cluster, "1.list")[0].decode() == text
    assert ray.get(sup.start_all.remote(), timeout=60) == ["A", "B", "C"]

    def views():
        return ray.get(sup.views.remote())

    deadline = 200
    while not (len(views()) == 3 and all(sorted(u) == [1, 2, 3] for u, _ in views().values())):
        deadline -= 1
        assert deadline, views()
        ray.get(sup.views.remote())  # a round trip paces the loop
    # seeded UUIDs, no discovery round: B and C neither read the store nor probed
    for name in "BC":
        st = ray.get(sup.stats.remote(name))["discovery"]
        assert st.get("bootstrap_joins") == 1 and not st.get("store_list") and \
            not st.get("probes_sent"), st
    # the first coordinator's file is the bootstrap file: nothing to write
    assert ray.get(sup.stats.remote("A"))["discovery"].get("files_written", 0) == 0
    # a crashed member comes back with a fresh random UUID (UUIDs are never reused)
    fresh = ray.get(sup.restart.remote("C"), timeout=60)
    assert int(fresh.replace("-", ""), 16) > 1 << 32
    deadline = 300
    while True:
        v = views()
        if len(v) == 3 and all(len(u) == 3 and 3 not in u and 1 in u and 2 in u
                               for u, _ in v.values()):
            break
        deadline -= 1
        assert deadline, v
    deadline = 300
    while True:
        mf = kv_files(check, cluster).get("1.list")
        if mf is not None and any(int.from_bytes(e.uid, "big") > 1 << 32 for e in mf):
            break
        deadline -= 1
        assert deadline, mf
    ray.get(sup.close_all.remote(), timeout=60)
    ray.kill(sup)
