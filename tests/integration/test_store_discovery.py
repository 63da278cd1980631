"""Store discovery with real channels on loopback (no IP multicast anywhere: UDP unicast
fan-out or TCP), against a local directory, moto's S3 server (a real HTTP S3 API started on a
free loopback port) and Ray's internal KV (the run's shared Ray session): join (2 store
reads, 1 write), coordinator change, partition with two files and merge to one, the stale
file of a kill -9, concurrent joins with a conditional-write conflict (no member line lost),
and a hand-edited file with malformed lines. The store down for 10 s mid-run: the directory
(its share unmounted) and the S3 server (stopped); Ray's KV lives in the GCS of the run's one
Ray session, which cannot go away and come back under the other tests."""
import asyncio
import itertools
import logging
import os

import pytest

from raygroups.stack import Channel, StackConfig
from raygroups.stack.discovery import Entry, MembersFile
from raygroups.stack.discovery.members_file import file_name
from raygroups.stack.discovery.store import StoreConflict
from raygroups.stack.runtime.stores import open_store

from raygroups.stack.runtime.ports import free_port

from ..aio import until

pytest_plugins = ["tests.ray_fixtures"]  # the one Ray session of the run (ray-kv://)
_ids = itertools.count()
BUCKET = "raygroups-test"


@pytest.fixture(scope="module")
def s3_server():
    from moto.server import ThreadedMotoServer
    import boto3
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
                 aws_secret_access_key="x").create_bucket(Bucket=BUCKET)
    holder = {"server": server, "port": port, "endpoint": endpoint}
    yield holder
    holder["server"].stop()


class Store:
    """One store under test: its URL, a blocking handle for checks, an outage switch."""

    def __init__(self, kind, tmp_path, s3):
        self.kind = kind
        if kind == "dir":
            self.root = str(tmp_path / "store")
            self.url = "file://" + self.root + "?retry_s=0.5"
            self.transport = dict(transport__ip_multicast=False)  # UDP, one unicast per member
        elif kind == "ray-kv":
            self.url = f"ray-kv://rgsd{os.getpid()}x{next(_ids)}?retry_s=0.5"
            self.transport = dict(transport__ip_multicast=False)
        else:
            self.s3 = s3
            self.url = (f"s3://{BUCKET}/t{next(_ids)}?endpoint_url={s3['endpoint']}"
                        f"&aws_access_key_id=x&aws_secret_access_key=x&retry_s=0.5")
            self.transport = dict(transport="tcp")
        self.check = open_store(self.url)

    def config(self, **kw):
        transport = dict(self.transport)
        kind = transport.pop("transport", "udp")
        opts = dict(discovery=self.url, store__rendezvous_interval_s=0.5,
                    store__stale_after_s=60.0, **transport)
        opts.update(kw)
        return StackConfig.local(kind, **opts)

    def files(self, cluster) -> dict:
        out = {}
        for name in self.check.list(cluster):
            got = self.check.get(cluster, name)
            if got is not None:
                out[name] = MembersFile.parse(got[0], source=name)
        return out

    is_down = False

    def down(self):
        self.is_down = True
        if self.kind == "dir":
            os.rename(self.root, self.root + ".away")  # the share went away
        else:
            self.s3["server"].stop()

    def up(self):
        self.is_down = False
        if self.kind == "dir":
            os.rename(self.root + ".away", self.root)
        else:
            from moto.server import ThreadedMotoServer
            self.s3["server"] = ThreadedMotoServer(ip_address="127.0.0.1", port=self.s3["port"],
                                                   verbose=False)
            self.s3["server"].start()


def _store(request, tmp_path):
    s3 = request.getfixturevalue("s3_server") if request.param == "s3" else None
    if request.param == "ray-kv":
        request.getfixturevalue("ray_session")
        import raygroups.actors  # noqa: F401  (registers ray-kv://)
    return Store(request.param, tmp_path, s3)


@pytest.fixture(params=["dir", "s3", "ray-kv"])
def store(request, tmp_path):
    return _store(request, tmp_path)


@pytest.fixture(params=["dir", "s3"])
def outage_store(request, tmp_path):
    """A store the test can take down and bring back."""
    return _store(request, tmp_path)


def one_view(chans):
    if any(c.view is None for c in chans):
        return False
    uids = {c.address.uid for c in chans}
    return len({c.view.view_id for c in chans}) == 1 and \
        all({a.uid for a in c.view.members} == uids for c in chans)


def one_file(store, cluster, chans, extra=()):
    """Exactly one file, the coordinator's, marking it T, listing every channel (address
    included) and the ``extra`` uids."""
    if not one_view(chans):
        return False
    fs = store.files(cluster)
    coord = chans[0].view.members[0]
    mf = fs.get(file_name(coord.uid))
    if len(fs) != 1 or mf is None or mf.coordinator is None or mf.coordinator.uid != coord.uid:
        return False
    listed = mf.by_uid()
    for c in chans:
        e = listed.get(c.address.uid)
        if e is None or e.phys != tuple(c.physical_address) or e.name != c.name:
            return False
    return all(u in listed for u in extra)


async def connect(cluster, name, cfg):
    ch = Channel(cluster, name, cfg)
    await ch.connect(timeout=30)
    return ch


async def start(store, cluster, names, cfg):
    """Members joining one after the other (the founder's file written first: members that
    start before it is in the store found groups of their own, which the rendezvous merges)."""
    chans = [await connect(cluster, names[0], cfg)]
    await until(lambda: store.files(cluster), what="the founder's file")
    for n in names[1:]:
        chans.append(await connect(cluster, n, cfg))
    await until(lambda: one_file(store, cluster, chans), what=f"{len(names)} members")
    return chans


async def kill(ch):
    """kill -9: the stack and sockets stop; no leave, no goodbye to the store."""
    ch.stack.stop()
    await ch.runtime.close()


async def close_all(chans):
    await asyncio.gather(*(c.close() for c in chans if c.stack is not None and c.stack.running))


def test_join_and_coordinator_change(store):
    async def main():
        cluster = f"join-{next(_ids)}"
        cfg = store.config(store__rendezvous_interval_s=3600.0)  # count join calls only
        a = await connect(cluster, "A", cfg)
        await until(lambda: store.files(cluster), what="the founder's file")
        # no file: it listed twice (two empty rounds), founded, wrote its own file once
        assert dict(a.runtime.store.calls) == {"list": 2, "put": 1}
        chans = [a]
        for name in "BCD":
            puts = a.runtime.store.calls["put"]
            ch = await connect(cluster, name, cfg)
            chans.append(ch)
            await until(lambda: one_file(store, cluster, chans), what=f"{name} in the file")
            assert dict(ch.runtime.store.calls) == {"list": 1, "get": 1}  # <= 2 reads per join
            assert a.runtime.store.calls["put"] - puts == 1                # 1 write per join
        # the file the members wrote: random UUIDs in 16 characters (22 for the one in 64
        # whose 16 would start with "-"), lines within 40 bytes with these one-letter names
        # and loopback endpoints but for those 6 (seed 000: ~35 B per member)
        (mf,) = store.files(cluster).values()
        for e in mf:
            short = len(e.uuid_text) == 16
            assert short or e.uuid_text.startswith("A") and len(e.uuid_text) == 22, e
            assert len(e.render()) + 1 <= (40 if short else 46), mf.render()
        # the coordinator leaves: the next one writes its file, the old one deletes its own
        await a.close()
        rest = chans[1:]
        await until(lambda: one_file(store, cluster, rest), what="the new coordinator's file")
        assert file_name(rest[0].address.uid) in store.files(cluster)
        # a member that leaves is not written out (saves a write)
        d = chans[3]
        puts = rest[0].runtime.store.calls["put"]
        await d.close()
        await until(lambda: one_view(rest[:2]), what="view without D")
        await asyncio.sleep(0.3)
        assert rest[0].runtime.store.calls["put"] == puts
        await close_all(rest[:2])
        await until(lambda: not store.files(cluster), what="the last member removed the file")

    asyncio.run(main())


def test_partition_two_files_then_merge_to_one(store):
    async def main():
        cluster = f"part-{next(_ids)}"
        cfg = store.config(faults__drop_up=0.0)
        chans = await start(store, cluster, "ABCD", cfg)
        left, right = chans[:2], chans[2:]
        for side, other in ((left, right), (right, left)):
            for c in side:
                c.stack.layer("faults").drop_from(*(o.address for o in other))
        await until(lambda: one_view(left) and one_view(right), what="two partitions")
        coords = {left[0].view.members[0], right[0].view.members[0]}
        await until(lambda: set(store.files(cluster)) == {file_name(c.uid) for c in coords},
                       what="one file per coordinator")
        mf = store.files(cluster)[file_name(right[0].view.members[0].uid)]
        assert {c.address.uid for c in right} <= set(mf.by_uid())
        for c in chans:
            c.stack.layer("faults").heal()
        # nobody multicasts to the other side: the files bring the coordinators together
        await until(lambda: one_view(chans), what="merged view")
        await until(lambda: one_file(store, cluster, chans), what="one file after the merge")
        assert sum(c.stack.layer("discovery").stats["merge_infos"] for c in chans) > 0
        await close_all(chans)

    asyncio.run(main())


def test_stale_file_of_a_killed_coordinator_is_removed(store):
    async def main():
        cluster = f"stale-{next(_ids)}"
        cfg = store.config(store__stale_after_s=1.5)
        chans = await start(store, cluster, "ABC", cfg)
        old = file_name(chans[0].address.uid)
        await kill(chans[0])
        rest = chans[1:]
        await until(lambda: one_view(rest), what="survivors' view")
        await until(lambda: file_name(rest[0].address.uid) in store.files(cluster),
                       what="the new coordinator's file")
        await until(lambda: one_file(store, cluster, rest), what="stale file removed")
        assert old not in store.files(cluster)
        assert rest[0].stack.layer("discovery").stats["files_deleted_stale"] == 1
        await close_all(rest)

    asyncio.run(main())


def test_concurrent_joins_lose_no_member_line(store):
    async def main():
        cluster = f"conc-{next(_ids)}"
        # no rendezvous listing: it would notice the hand edit (the file's etag changed) and
        # re-read it before the next write, when the coordinator's loop is late enough; the
        # conditional write's conflict is the path this test is about
        cfg = store.config(store__rendezvous_interval_s=3600.0)
        a = await connect(cluster, "A", cfg)
        await until(lambda: store.files(cluster), what="the founder's file")
        # a person adds a line behind the coordinator's back (a careful tool: if_match)
        hand = Entry("Z", (4242).to_bytes(16, "big"), "10.9.9.9", 7800)
        name = file_name(a.address.uid)
        while True:
            data, etag = store.check.get(cluster, name)
            mf = MembersFile.parse(data)
            try:
                store.check.put(cluster, name, MembersFile(mf.entries + [hand], mf.view_id).encode(),
                                if_match=etag)
                break
            except StoreConflict:
                continue
        joiners = await asyncio.gather(*(connect(cluster, f"J{i}", cfg) for i in range(6)))
        chans = [a, *joiners]
        await until(lambda: one_view(chans), what="all joined")
        await until(lambda: one_file(store, cluster, chans, [hand.uid]),
                       what="every member line and the hand-added one")
        assert a.stack.layer("discovery").stats["write_conflicts"] >= 1
        assert len(store.files(cluster)[name]) == 8
        await close_all(chans)

    asyncio.run(main())


def test_store_down_for_10s_the_group_runs_on_and_the_file_catches_up(outage_store, caplog):
    store = outage_store

    async def main():
        cluster = f"down-{next(_ids)}"
        cfg = store.config(store__retry_max_s=1.0)
        chans = await start(store, cluster, "ABC", cfg)
        loop = asyncio.get_running_loop()
        store.down()
        t_up = loop.time() + 10.0
        # a member joins from the cached file, another is killed: views change without the store
        d = await connect(cluster, "D", cfg)
        await kill(chans[2])
        live = [chans[0], chans[1], d]
        await until(lambda: one_view(live), what="views change during the outage")
        for k in range(100):
            await chans[1].send(f"m{k}".encode())
        for c in live:
            got = []
            while len(got) < 100:
                msg = await c.receive(timeout=10)
                if msg.sender == chans[1].address:
                    got.append(msg.payload)
            assert got == [f"m{k}".encode() for k in range(100)]
        await asyncio.sleep(max(0.0, t_up - loop.time()))
        store.up()
        await until(lambda: one_file(store, cluster, live), what="the file caught up")
        assert chans[0].stack.layer("discovery").stats["store_errors"] > 0
        await close_all(live)

    with caplog.at_level(logging.WARNING, logger="raygroups.discovery"):
        try:
            asyncio.run(main())
        finally:
            if store.is_down:  # a failure mid-outage: leave the store up for the next tests
                store.up()
    warnings = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert warnings, "no warning about the store being down"
    assert len([w for w in warnings if "[" in w and "A]" in w]) <= 1  # once per member


def test_hand_edited_file_with_malformed_lines(store, caplog):
    async def main():
        cluster = f"hand-{next(_ids)}"
        cfg = store.config()
        a = await connect(cluster, "A", cfg)
        await until(lambda: store.files(cluster), what="the founder's file")
        b = await connect(cluster, "B", cfg)
        await until(lambda: one_file(store, cluster, [a, b]), what="2 members")
        name = file_name(a.view.members[0].uid)
        data, etag = store.check.get(cluster, name)
        edited = data.decode() + ("this line is not a member\n"
                                  "Y 77 10.0.0.77 F\n"
                                  "X 4343 10.9.9.8:7800 F\n")
        store.check.put(cluster, name, edited.encode(), if_match=etag)
        c = await connect(cluster, "C", cfg)  # reads the edited file: the good lines load
        chans = [a, b, c]
        x_uid = (4343).to_bytes(16, "big")
        await until(lambda: one_file(store, cluster, chans, [x_uid]), what="C written, X kept")
        assert c.stack.layer("discovery").stats["malformed_lines"] == 2
        await close_all(chans)

    with caplog.at_level(logging.WARNING, logger="raygroups.discovery"):
        asyncio.run(main())
    skipped = [r.getMessage() for r in caplog.records if "line skipped" in r.getMessage()]
    assert any(":4: expected 4 fields" in m for m in skipped), skipped
    assert any(":5: no port" in m for m in skipped), skipped
