"""The asyncio runtime over real sockets on 127.0.0.1, fed into a recording fake stack."""
import asyncio
import struct

import msgpack
import pytest

from raygroups.stack.auth import Auth
from raygroups.stack.layer import MCAST
from raygroups.stack.runtime import Runtime
from raygroups.stack.runtime.ports import free_port
from raygroups.stack.runtime.tcp import HELLO
from raygroups.stack.transport import TransportConfig

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

GROUP = "239.8.8.8"


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request):
    if request.param == "asyncio":
        return asyncio.run
    if uvloop is None:
        pytest.skip("uvloop not installed")
    return uvloop.run


class Sink:
    """The part of a Stack the runtime uses."""

    def __init__(self):
        self.got = []

    def receive(self, data, src):
        self.got.append((data, src))


async def until(cond, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.002)
    return True


async def runtime(kind="udp", use_mcast=False, mcast_port=None, auth=None, **kw):
    cfg = TransportConfig(kind=kind, mcast_addr=GROUP, mcast_port=mcast_port or free_port(),
                          **kw)
    rt = Runtime(cfg, use_mcast)
    await rt.start()
    sink = Sink()
    rt.attach(sink, lambda ev: None, lambda batch: None, auth=auth)
    return rt, sink


async def close(*rts):
    for rt in rts:
        await rt.close()


def test_udp_unicast_both_directions(run):
    async def main():
        (a, sa), (b, sb) = await runtime(), await runtime()
        assert a.local_phys[0] == "127.0.0.1" and a.local_phys[1] > 0
        a.emit(b.local_phys, b"a->b")
        b.emit(a.local_phys, b"b->a")
        assert await until(lambda: sa.got and sb.got)
        assert sb.got == [(b"a->b", a.local_phys)]
        assert sa.got == [(b"b->a", b.local_phys)]
        await close(a, b)
    run(main())


def test_udp_packets_before_attach_are_dropped(run):
    async def main():
        a, sa = await runtime()
        b = Runtime(TransportConfig(), use_mcast=False)
        await b.start()
        a.emit(b.local_phys, b"early")
        assert await until(lambda: b.stats["dropped_unattached"] == 1)
        sb = Sink()
        b.attach(sb, print, print)
        a.emit(b.local_phys, b"late")
        assert await until(lambda: sb.got)
        assert sb.got == [(b"late", a.local_phys)]
        await close(a, b)
    run(main())


def test_ip_multicast_reaches_every_runtime_in_the_process(run):
    async def main():
        port = free_port()
        rts = [await runtime(use_mcast=True, mcast_port=port) for _ in range(3)]
        sender = rts[0][0]
        sender.emit(MCAST, b"to all")
        assert await until(lambda: all(sink.got for _, sink in rts))
        for _, sink in rts:  # the sender too: IP_MULTICAST_LOOP
            assert sink.got == [(b"to all", sender.local_phys)]
        await close(*(rt for rt, _ in rts))
    run(main())


def test_tcp_multicast_pings_come_from_the_listen_address(run):
    async def main():
        port = free_port()
        (a, sa), (b, sb) = [await runtime("tcp", True, port) for _ in range(2)]
        a.emit(MCAST, b"ping")
        assert await until(lambda: sb.got)
        assert sb.got == [(b"ping", a.local_phys)]
        b.emit(sb.got[0][1], b"pong")  # answered over TCP at the ping's source
        assert await until(lambda: len(sa.got) == 2)
        assert (b"pong", b.local_phys) in sa.got
        await close(a, b)
    run(main())


def test_tcp_both_directions_share_one_connection(run):
    async def main():
        (a, sa), (b, sb) = await runtime("tcp"), await runtime("tcp")
        a.emit(b.local_phys, b"a->b")
        assert await until(lambda: sb.got)
        b.emit(a.local_phys, b"b->a")
        assert await until(lambda: sa.got)
        assert sb.got == [(b"a->b", a.local_phys)]
        assert sa.got == [(b"b->a", b.local_phys)]
        assert len(a.tcp.open) == len(b.tcp.open) == 1
        await close(a, b)
    run(main())


def test_tcp_simultaneous_connect_keeps_one_connection(run):
    async def main():
        (a, sa), (b, sb) = await runtime("tcp"), await runtime("tcp")
        for i in range(3):  # both connect before either hello arrives
            a.emit(b.local_phys, b"a%d" % i)
            b.emit(a.local_phys, b"b%d" % i)
        assert await until(lambda: len(sa.got) == len(sb.got) == 3)
        assert await until(lambda: len(a.tcp.open) == len(b.tcp.open) == 1)
        assert sa.got == [(b"b%d" % i, b.local_phys) for i in range(3)]
        assert sb.got == [(b"a%d" % i, a.local_phys) for i in range(3)]
        a.emit(b.local_phys, b"again")
        b.emit(a.local_phys, b"again")
        assert await until(lambda: len(sa.got) == len(sb.got) == 4)
        assert len(a.tcp.open) == len(b.tcp.open) == 1
        assert a.tcp.conns[b.local_phys].outgoing == (a.local_phys < b.local_phys)
        await close(a, b)
    run(main())


def test_tcp_many_frames_arrive_complete_and_in_order(run):
    async def main():
        (a, _), (b, sb) = await runtime("tcp"), await runtime("tcp")
        n, pad = 20_000, b"x" * 1020
        for i in range(n):
            a.emit(b.local_phys, struct.pack(">I", i) + pad)
        assert await until(lambda: len(sb.got) >= n)
        assert [struct.unpack_from(">I", d)[0] for d, _ in sb.got] == list(range(n))
        assert all(len(d) == 1024 and src == a.local_phys for d, src in sb.got)
        await close(a, b)
    run(main())


def test_tcp_queue_bound_drops_and_counts(run):
    async def main():
        (a, _), (b, sb) = await runtime("tcp", tcp_max_queued=10_000), await runtime("tcp")
        for _ in range(20):  # queued while connecting
            a.emit(b.local_phys, b"x" * 1000)
        assert a.stats["tcp_dropped_queue_full"] == 11
        assert await until(lambda: len(sb.got) == 9)
        await close(a, b)
    run(main())


async def raw_connect(rt, first: bytes):
    reader, writer = await asyncio.open_connection(*rt.local_phys)
    writer.write(first)
    return reader, writer


def test_tcp_oversized_frame_closes_the_connection(run):
    async def main():
        (a, _), (b, sb) = await runtime("tcp"), await runtime("tcp")
        hello = HELLO + msgpack.packb(["127.0.0.9", 5000])
        reader, writer = await raw_connect(b, struct.pack(">I", len(hello)) + hello
                                           + struct.pack(">I", 0xFFFFFFFF) + b"junk")
        assert await reader.read() == b""  # closed by b
        writer.close()
        assert b.stats["tcp_oversized_frame"] == 1
        a.emit(b.local_phys, b"still works")
        assert await until(lambda: sb.got)
        assert sb.got == [(b"still works", a.local_phys)]
        await close(a, b)
    run(main())


def test_tcp_bad_hello_closes_the_connection(run):
    async def main():
        b, sb = await runtime("tcp")
        reader, writer = await raw_connect(b, struct.pack(">I", 5) + b"hello")
        assert await reader.read() == b""
        writer.close()
        assert b.stats["tcp_bad_hello"] == 1 and not sb.got
        await close(b)
    run(main())


def test_tcp_hellos_are_sealed_with_a_cluster_key(run):
    """With a key, a connection whose hello is not sealed with it (plain, wrong key, or a
    replay of a real one) is closed before it can name itself after a member; members
    holding the key connect as usual."""
    key = b"k" * 32

    def auth(uid):
        return Auth(key, "hmac", uid)

    async def main():
        (a, sa) = await runtime("tcp", cluster_key=key, auth=auth(b"A" * 16))
        (b, sb) = await runtime("tcp", cluster_key=key, auth=auth(b"B" * 16))
        a.emit(b.local_phys, b"a->b")
        assert await until(lambda: sb.got)
        assert sb.got == [(b"a->b", a.local_phys)] and b.stats["tcp_bad_hello"] == 0
        plain = HELLO + msgpack.packb(list(a.local_phys))  # claims to be a
        wrong = Auth(b"x" * 32, "hmac", b"X" * 16).seal(plain)
        replayed = auth(b"A" * 16).seal(plain)  # counter 1 of A: b has seen A's counter 1
        for n, body in enumerate((plain, wrong, replayed), 1):
            reader, writer = await raw_connect(b, struct.pack(">I", len(body)) + body)
            assert await reader.read() == b""  # closed by b
            writer.close()
            assert b.stats["tcp_bad_hello"] == n
        b.emit(a.local_phys, b"b->a")  # the route to a is still a's own connection
        assert await until(lambda: sa.got)
        assert sa.got == [(b"b->a", b.local_phys)]
        await close(a, b)
    run(main())


def test_emit_to_a_dead_port_is_dropped_and_counted(run):
    async def main():
        t, st = await runtime("tcp")
        u, su = await runtime("udp")
        dead = ("127.0.0.1", free_port())
        t.emit(dead, b"lost")
        t.emit(dead, b"lost too")
        u.emit(("127.0.0.1", free_port()), b"lost")
        assert await until(lambda: t.stats["tcp_connect_ECONNREFUSED"] == 1)
        assert t.stats["tcp_dropped_connect"] == 2
        t.emit(u.local_phys, b"tcp to a udp port")  # refused again: a new attempt
        assert await until(lambda: t.stats["tcp_connect_ECONNREFUSED"] == 2)
        u.emit(t.local_phys, b"udp to a tcp port")
        await asyncio.sleep(0.05)  # any ICMP error would be read (and counted) meanwhile
        await close(t, u)
    run(main())


@pytest.mark.parametrize("kind", ["udp", "tcp"])
def test_pause_reading_holds_packets_until_resumed(run, kind):
    async def main():
        (a, _), (b, sb) = await runtime(kind), await runtime(kind)
        a.emit(b.local_phys, b"first")  # TCP: the connection exists before the pause
        assert await until(lambda: sb.got)
        b.pause_reading()
        a.emit(b.local_phys, b"held")
        await asyncio.sleep(0.05)
        assert len(sb.got) == 1
        b.resume_reading()
        assert await until(lambda: len(sb.got) == 2)
        assert sb.got[1] == (b"held", a.local_phys)
        await close(a, b)
    run(main())
