"""Discovery stores without a network: the in-memory store, the directory store (atomic and
conditional writes, an unmounted root is an outage, bounded retries, no lost update among
concurrent conditional writers), the caching front (coalesced reads, cache while the store
is down), the asyncio thread-pool client, the URL registry, and the DiscoveryService."""
import asyncio
import os
import threading
import time

import pytest

from raygroups.stack.discovery.store import (MemoryStore, ScheduledStoreClient, StoreConflict,
                                             StoreUnavailable, content_etag)
from raygroups.stack.runtime.stores import (CachingStore, DirectoryStore, S3Store,
                                            ThreadedStoreClient, members_file_url, open_store,
                                            read_members_file, register_store,
                                            write_members_file)


@pytest.fixture(params=["memory", "dir"])
def store(request, tmp_path):
    return MemoryStore() if request.param == "memory" else DirectoryStore(str(tmp_path / "s"),
                                                                           retry_s=0.2)


def test_conditional_semantics(store):
    assert store.list("c") == {} and store.get("c", "1.list") is None
    e1 = store.put("c", "1.list", b"one", if_absent=True)
    assert e1 == content_etag(b"one")
    with pytest.raises(StoreConflict):
        store.put("c", "1.list", b"two", if_absent=True)
    with pytest.raises(StoreConflict):
        store.put("c", "1.list", b"two", if_match='"other"')
    with pytest.raises(StoreConflict):
        store.put("c", "2.list", b"two", if_match=e1)  # if_match on an absent object
    e2 = store.put("c", "1.list", b"two", if_match=e1)
    assert store.get("c", "1.list") == (b"two", e2)
    store.put("c", "3.list", b"three")
    assert store.list("c") == {"1.list": e2, "3.list": content_etag(b"three")}
    store.delete("c", "1.list")
    store.delete("c", "1.list")  # absent: fine
    assert list(store.list("c")) == ["3.list"]
    assert store.list("other") == {}
    assert store.calls["put"] == 6 and store.calls["delete"] == 2


def test_directory_store_files_and_outage(tmp_path):
    root = tmp_path / "share"
    s = DirectoryStore(str(root), retry_s=0.2)
    s.put("c", "1.list", b"A 1 10.0.0.1:7800 T\n", if_absent=True)
    assert sorted(os.listdir(root / "c")) == [".lock", "1.list"]  # no temporary files left
    assert (root / "c" / "1.list").read_bytes() == b"A 1 10.0.0.1:7800 T\n"
    s.put("c", "2.list", b"B 2 10.0.0.2:7800 F\n")
    for f in ("1.list", "2.list"):  # members' addresses: their owner's only
        assert (root / "c" / f).stat().st_mode & 0o777 == 0o600
    assert (root / "c").stat().st_mode & 0o777 == 0o700
    s.delete("c", "2.list")
    (root / "c" / "notes").write_text("a person's file")
    assert set(s.list("c")) == {"1.list", "notes"}
    os.rename(root, tmp_path / "away")  # the share is unmounted
    for op in (lambda: s.list("c"), lambda: s.get("c", "1.list"),
               lambda: s.put("c", "1.list", b"x"), lambda: s.delete("c", "1.list")):
        with pytest.raises(StoreUnavailable):
            op()
    assert s.attempts["list"] > s.calls["list"] == 2  # tenacity retried within its bound
    os.rename(tmp_path / "away", root)
    assert set(s.list("c")) == {"1.list", "notes"}


def test_concurrent_conditional_writers_lose_nothing(tmp_path):
    s = DirectoryStore(str(tmp_path / "s"))
    s.put("c", "f", b"", if_absent=True)

    def add(tag: str) -> None:
        for k in range(10):
            while True:
                data, etag = s.get("c", "f")
                try:
                    s.put("c", "f", data + f"{tag}{k}\n".encode(), if_match=etag)
                    break
                except StoreConflict:
                    continue

    threads = [threading.Thread(target=add, args=(t,)) for t in "abcdef"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = s.get("c", "f")[0].decode().split()
    assert sorted(lines) == sorted(f"{t}{k}" for t in "abcdef" for k in range(10))


class Slow(MemoryStore):
    def __init__(self):
        super().__init__()
        self.gate = threading.Event()

    def get(self, cluster, name):
        self.gate.wait(5)
        return super().get(cluster, name)


def test_caching_store_coalesces_concurrent_reads():
    inner = Slow()
    inner.gate.set()
    inner.put("c", "1.list", b"x")
    inner.gate.clear()
    front = CachingStore(inner)
    results = []
    threads = [threading.Thread(target=lambda: results.append(front.get("c", "1.list")))
               for _ in range(8)]
    for t in threads:
        t.start()
    while sum(front.requests.values()) < 8:
        time.sleep(0.001)
    inner.gate.set()
    for t in threads:
        t.join()
    assert results == [(b"x", content_etag(b"x"))] * 8
    assert inner.calls["get"] == 1 and front.coalesced["get"] == 7


def test_caching_store_serves_the_last_copy_while_the_store_is_down():
    inner = MemoryStore()
    front = CachingStore(inner)
    front.put("c", "1.list", b"x", if_absent=True)
    assert front.list("c") == {"1.list": content_etag(b"x")}
    inner.unavailable = True
    assert front.get("c", "1.list") == (b"x", content_etag(b"x"))  # written through us
    assert front.list("c") == {"1.list": content_etag(b"x")}
    assert front.stale["list"] == 1 and front.down
    with pytest.raises(StoreUnavailable):
        front.get("c", "never-read")
    with pytest.raises(StoreUnavailable):
        front.put("c", "1.list", b"y")
    inner.unavailable = False
    front.put("c", "2.list", b"y")
    assert not front.down and set(front.list("c")) == {"1.list", "2.list"}


def test_caching_store_ttl():
    inner = MemoryStore()
    front = CachingStore(inner, ttl_s=60)
    inner.put("c", "1.list", b"x")
    front.get("c", "1.list")
    front.get("c", "1.list")
    assert inner.calls["get"] == 1 and front.cached["get"] == 1
    with pytest.raises(StoreConflict):
        front.put("c", "1.list", b"y", if_absent=True)
    front.get("c", "1.list")  # a conflict drops the cached copy
    assert inner.calls["get"] == 2


def test_threaded_client_calls_back_on_the_loop():
    async def main():
        loop = asyncio.get_running_loop()
        client = ThreadedStoreClient(MemoryStore(), loop)
        got = []

        def cb(result, error):
            got.append((result, error, threading.get_ident()))
        client.put("c", "1.list", b"x", cb, if_absent=True)
        client.put("c", "2.list", b"x", cb, if_match='"nope"')
        client.list("c", cb)
        await client.drain()
        await asyncio.sleep(0)
        assert len(got) == 3
        assert {g[2] for g in got} == {threading.get_ident()}
        kinds = sorted(type(g[1]).__name__ for g in got)
        assert kinds == ["NoneType", "NoneType", "StoreConflict"]
        assert client.calls == {"put": 2, "list": 1}
    asyncio.run(main())


def test_scheduled_client_runs_on_the_given_scheduler():
    queue = []
    client = ScheduledStoreClient(MemoryStore(), lambda d, fn: queue.append((d, fn)),
                                  delay=lambda: 0.25)
    got = []
    client.get("c", "x", lambda r, e: got.append((r, e)))
    assert got == [] and queue[0][0] == 0.25
    queue.pop()[1]()
    assert got == [(None, None)] and client.calls == {"get": 1}


def test_registry_and_urls(tmp_path, monkeypatch):
    from raygroups.stack.runtime import stores
    monkeypatch.delitem(stores._factories, "ray-kv", raising=False)  # actors not imported
    with pytest.raises(ValueError, match="raygroups.actors"):
        open_store("ray-kv://")
    register_store("test-mem", lambda url: MemoryStore())
    assert isinstance(open_store("test-mem://x"), MemoryStore)
    d = open_store(f"file://{tmp_path}/a?retry_s=1")
    assert isinstance(d, DirectoryStore) and d.root == f"{tmp_path}/a" and d.retry_s == 1.0
    assert isinstance(open_store(str(tmp_path / "b")), DirectoryStore)  # a plain path
    s3 = open_store("s3://bkt/some/prefix?endpoint_url=http://127.0.0.1:9&region=eu-west-1"
                    "&aws_access_key_id=x&aws_secret_access_key=y&retry_s=2")
    assert isinstance(s3, S3Store) and (s3.bucket, s3.prefix, s3.retry_s) == ("bkt", "some/prefix", 2.0)
    assert s3._key("c", "1.list") == "some/prefix/c/1.list"
    assert s3.client.meta.endpoint_url == "http://127.0.0.1:9"
    assert members_file_url("s3://b/p?endpoint_url=http://h:1", "c", "1.list") == \
        "s3://b/p/c/1.list?endpoint_url=http://h:1"
    assert members_file_url("ray-kv://", "c", "1.list") == "ray-kv:///c/1.list"
    assert members_file_url(f"file://{tmp_path}", "c", "1.list") == f"file://{tmp_path}/c/1.list"
    assert stores._split_object_url("ray-kv:///c/1.list") == ("ray-kv:///c", "1.list")


def test_members_files_by_path_and_url(tmp_path):
    from raygroups.stack.discovery import Entry, MembersFile
    mf = MembersFile([Entry("A", (1).to_bytes(16, "big"), "10.0.0.1", 7800, True)])
    path = str(tmp_path / "boot" / "1.list")
    write_members_file(path, mf)
    assert read_members_file(path).entries == mf.entries
    assert os.stat(path).st_mode & 0o777 == 0o600
    url = members_file_url(f"file://{tmp_path}/store", "c", "1.list")
    write_members_file(url, mf)
    assert read_members_file(url).entries == mf.entries
    assert open_store(f"file://{tmp_path}/store").list("c") == {"1.list": content_etag(mf.encode())}
    with pytest.raises(FileNotFoundError):
        read_members_file(members_file_url(f"file://{tmp_path}/store", "c", "2.list"))


def test_discovery_service_answers_plain_data():
    from raygroups.actors.supervisors import DiscoveryService
    svc = DiscoveryService("memory://svc", store=MemoryStore())
    assert svc.call("put", "c", "1.list", b"x", if_absent=True)[0] == "ok"
    assert svc.call("put", "c", "1.list", b"x", if_absent=True)[0] == "conflict"
    assert svc.call("get", "c", "1.list") == ("ok", (b"x", content_etag(b"x")))
    assert svc.call("rm", "c")[0] == "unavailable"
    svc.store.inner.unavailable = True
    assert svc.call("list", "c")[0] == "unavailable"
    assert svc.counts()["calls"] == {"put": 2, "get": 1, "list": 1}
