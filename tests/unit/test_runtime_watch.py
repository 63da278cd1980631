"""FD_SOCK's watch connections in the asyncio runtime (stack/runtime/watch.py) over real
sockets on 127.0.0.1: up once the member proved its uid, "eof" when its sockets close
without a goodbye, "left" after a BYE, "refused" where nobody or another member listens;
sealed hellos with a cluster key, so a stranger without it is refused."""
import asyncio

import msgpack
import pytest

from raygroups.stack.auth import Auth
from raygroups.stack.runtime import Runtime
from raygroups.stack.runtime.ports import free_port
from raygroups.stack.runtime.tcp import frame
from raygroups.stack.runtime.watch import WATCH
from raygroups.stack.transport import TransportConfig

from .test_runtime_sockets import close, until

KEY = b"k" * 32


class Local:
    def __init__(self, uid):
        self.uid = uid


class Stack:
    """The part of a Stack the runtime uses."""

    def __init__(self, uid):
        self.local = Local(uid)

    def receive(self, data, src):
        pass


async def member(uid: bytes, kind: str, key=None):
    cfg = TransportConfig(kind=kind, mcast_port=free_port(), cluster_key=key)
    rt = Runtime(cfg, use_mcast=False, watch=True)
    await rt.start()
    auth = Auth([key], local_uid=uid) if key else None
    rt.attach(Stack(uid), lambda ev: None, lambda batch: None, auth=auth)
    return rt


class Watcher:
    def __init__(self):
        self.events = []

    def up(self):
        self.events.append("up")

    def lost(self, reason):
        self.events.append(reason)


def watch(a, b, uid):
    w = Watcher()
    a.watch.open(b.local_phys, uid, w.up, w.lost)
    return w


A, B = b"A" * 16, b"B" * 16


@pytest.mark.parametrize("kind", ["udp", "tcp"])
@pytest.mark.parametrize("key", [None, KEY])
def test_up_then_eof_when_the_member_closes_without_a_goodbye(kind, key):
    async def main():
        a, b = await member(A, kind, key), await member(B, kind, key)
        w = watch(a, b, B)
        assert await until(lambda: w.events == ["up"])
        assert b.stats["watch_accepted"] == 1
        await b.close()  # its sockets close, no BYE: as the kernel does for a killed process
        assert await until(lambda: w.events == ["up", "eof"])
        await a.close()
    asyncio.run(main())


@pytest.mark.parametrize("kind", ["udp", "tcp"])
def test_left_after_a_goodbye(kind):
    async def main():
        a, b = await member(A, kind, KEY), await member(B, kind, KEY)
        w = watch(a, b, B)
        assert await until(lambda: w.events == ["up"])
        b.watch.leaving()
        await b.close()
        assert await until(lambda: w.events == ["up", "left"])
        await a.close()
    asyncio.run(main())


def test_refused_where_nobody_or_another_member_listens():
    async def main():
        a, b = await member(A, "udp"), await member(B, "udp")
        w = watch(a, b, b"C" * 16)  # b is not C: it closes, and it is no loss of an up C
        assert await until(lambda: w.events == ["refused"])
        port = b.local_phys
        await b.close()
        w2 = Watcher()
        a.watch.open(port, B, w2.up, w2.lost)
        assert await until(lambda: w2.events == ["refused"])
        await a.close()
    asyncio.run(main())


def test_a_stranger_without_the_key_is_refused_and_a_closed_watch_reports_nothing():
    async def main():
        b = await member(B, "udp", KEY)
        r, wr = await asyncio.open_connection(*b.local_phys)
        wr.write(frame(WATCH + msgpack.packb([A, B])))  # unsealed
        assert await r.read() == b""  # closed on us
        assert b.stats["watch_refused"] == 1 and not b.watch.accepted
        a = await member(A, "udp", KEY)
        w = watch(a, b, B)
        assert await until(lambda: w.events == ["up"])
        for conn in list(a.watch.conns):
            conn.close()  # the watcher re-picks: no report of its own close
        await asyncio.sleep(0.05)
        assert w.events == ["up"]
        await close(a, b)
    asyncio.run(main())


def test_a_watcher_that_comes_while_the_member_leaves_is_told_at_once():
    async def main():
        a, b = await member(A, "tcp", KEY), await member(B, "tcp", KEY)
        b.watch.leaving()
        w = watch(a, b, B)
        assert await until(lambda: w.events == ["up"])
        await b.close()
        assert await until(lambda: w.events == ["up", "left"])
        await a.close()
    asyncio.run(main())
