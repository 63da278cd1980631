"""Real sockets on loopback: 5 channels in one process, over UDP (IP multicast and unicast
fan-out) and TCP. Three senders multicast 2,000 messages each; every receiver gets every
message exactly once, in per-sender order. The same suite runs on every transport."""
import asyncio
import itertools
import socket

import pytest

from raygroups.stack import (Channel, GroupClosed, JoinRejected, NotConnected, StackConfig,
                             ViewChange)

from raygroups.stack.runtime.ports import free_port, free_ports

_ids = itertools.count()


def configs():
    """(id, factory(i) -> StackConfig) per transport variant."""
    return {
        "udp-multicast": lambda mp, ports: StackConfig.local(mcast_port=mp),
        "udp-unicast-static": lambda mp, ports: StackConfig.local(
            transport__ip_multicast=False, initial_hosts=[("127.0.0.1", p) for p in ports]),
        "tcp-multicast-discovery": lambda mp, ports: StackConfig.local("tcp", mcast_port=mp),
        "tcp-static": lambda mp, ports: StackConfig.local(
            "tcp", initial_hosts=[("127.0.0.1", p) for p in ports]),
    }


async def start_group(variant: str, n: int):
    mp, ports = free_port(), free_ports(n)
    make = configs()[variant]
    cluster = f"test-{variant}-{next(_ids)}-{mp}"
    chans = []
    for i in range(n):
        cfg = make(mp, ports).with_options(port=ports[i])
        ch = Channel(cluster, name=f"m{i}", config=cfg)
        await ch.connect(timeout=20)
        chans.append(ch)
    deadline = asyncio.get_running_loop().time() + 20
    while not all(c.view is not None and len(c.view) == n for c in chans):
        assert asyncio.get_running_loop().time() < deadline, [c.view for c in chans]
        await asyncio.sleep(0.01)
    return chans


@pytest.mark.parametrize("variant", list(configs()))
def test_three_senders_reach_five_members(variant):
    async def main():
        chans = await start_group(variant, 5)
        views = {c.view.view_id for c in chans}
        assert len(views) == 1, views
        assert [a.name for a in chans[0].view.members] == [f"m{i}" for i in range(5)]
        senders, per_sender = chans[:3], 2000

        async def send(ch):
            await ch.send_many(f"{ch.name}:{k}".encode() for k in range(per_sender))

        async def collect(ch):
            got = {s.name: [] for s in senders}
            total = len(senders) * per_sender
            n = 0
            while n < total:
                msg = await ch.receive(timeout=30)
                name, k = msg.payload.decode().split(":")
                got[name].append(int(k))
                n += 1
            return got

        receivers = [asyncio.create_task(collect(c)) for c in chans]
        await asyncio.gather(*(send(s) for s in senders))
        results = await asyncio.gather(*receivers)
        for got in results:
            for name, ks in got.items():
                assert ks == list(range(per_sender)), (name, ks[:10], len(ks))
        for c in chans:
            assert c.stack.errors == 0
        await asyncio.gather(*(c.close() for c in chans))

    asyncio.run(main())


@pytest.mark.parametrize("variant", ["udp-multicast", "tcp-static"])
def test_unicast_and_graceful_leave(variant):
    async def main():
        a, b, c = await start_group(variant, 3)
        for k in range(500):
            await a.send(f"u{k}".encode(), dest=b.address)
        got = [(await b.receive(timeout=10)).payload for _ in range(500)]
        assert got == [f"u{k}".encode() for k in range(500)]
        # unicast is not seen by the third member
        await a.send(b"to-all")
        assert (await c.receive(timeout=10)).payload == b"to-all"
        # graceful leave of the coordinator: the others install a view without it, and
        # acknowledge it (close() says the group confirmed the leave)
        old = a.view
        assert await a.close() is True
        assert await a.close() is False  # closed already: nothing more to confirm
        for ch in (b, c):
            while ch.view.view_id == old.view_id or a.address in ch.view:
                await asyncio.sleep(0.01)
            assert [m.name for m in ch.view.members] == ["m1", "m2"]
        with pytest.raises(GroupClosed):
            await a.send(b"after close")
        events = []
        await b.send(b"last")
        async for ev in c.events():
            events.append(ev)
            if not isinstance(ev, ViewChange) and ev.payload == b"last":
                break
        assert any(isinstance(e, ViewChange) and a.address in e.left for e in events)
        assert await c.close() is True  # a member leaving: its coordinator confirms it
        await b.close()

    asyncio.run(main())


def tcp_sockets_open_on(port: int) -> list:
    """This namespace's TCP sockets whose local port is ``port``, in any state but TIME_WAIT
    (``/proc/net/tcp``: the fourth column is the state, 06 is TIME_WAIT)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] != "06":
                    found.append(line.strip())
    return found


def holders(port: int) -> str:
    """The sockets on ``port`` with their processes and states (``ss``), for a failure."""
    import subprocess
    return subprocess.run(["ss", "-tuanp", f"sport = :{port}"], capture_output=True,
                          text=True, timeout=10).stdout


@pytest.mark.parametrize("variant", ["udp-multicast", "tcp-static"])
def test_a_joiner_with_other_agreed_settings_is_refused(variant):
    """A joiner whose agreed settings (a layer's, or the application's own) differ from the
    group's gets JoinRejected naming each one; the group's view stays; the same settings
    join."""
    async def main():
        mp, ports = free_port(), free_ports(3)
        make = configs()[variant]
        cluster = f"test-agreed-{variant}-{next(_ids)}-{mp}"

        def config(i, **opts):
            return make(mp, ports).with_options(port=ports[i], **opts)
        a = Channel(cluster, name="a", config=config(0, gms__agreed={"app.schema": 1}))
        await a.connect(timeout=20)
        b = Channel(cluster, name="b", config=config(
            1, primary__relay_above=64, gms__agreed={"app.schema": 2}))
        with pytest.raises(JoinRejected) as refused:
            await b.connect(timeout=20)
        text = str(refused.value)
        assert "primary.relay_above is 32 in the group, 64 here" in text, text
        assert "app.schema is 1 in the group, 2 here" in text, text
        assert [m.name for m in a.view.members] == ["a"]
        with pytest.raises(NotConnected):  # never joined, and its sockets are released
            await b.send(b"x")
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            with socket.socket(socket.AF_INET, kind) as s:
                # as any server binds: a TCP connection we closed first waits out TIME_WAIT
                # on the port (the kernel's, no socket of ours); a listener still fails
                reuse = int(kind == socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, reuse)
                try:
                    s.bind(("127.0.0.1", ports[1]))
                except OSError as e:  # say who holds it: a socket of ours, or another's
                    raise AssertionError(f"{kind.name} port {ports[1]}: {e}\n"
                                         f"{holders(ports[1])}") from None
        assert not tcp_sockets_open_on(ports[1]), holders(ports[1])  # connections closed too
        assert a.stack.layer("gms").stats["joins_denied"] >= 1
        c = Channel(cluster, name="c", config=config(2, gms__agreed={"app.schema": 1}))
        await c.connect(timeout=20)
        while len(a.view) != 2:
            await asyncio.sleep(0.01)
        assert [m.name for m in c.view.members] == ["a", "c"]
        await asyncio.gather(a.close(), c.close())

    asyncio.run(main())


def test_batch_reads_keep_delivery_order_and_views():
    """events_many() hands over every event waiting, view changes included, in delivery
    order; receive_many() the same without the views. Nothing lost, nothing repeated."""
    async def main():
        a, b = await start_group("udp-multicast", 2)
        c = None
        try:
            for k in range(300):
                await a.send(f"e{k}".encode())
            events = []
            while sum(1 for e in events if not isinstance(e, ViewChange)) < 300:
                events += await b.events_many(max_items=64, timeout=10)
            assert [e.payload for e in events if not isinstance(e, ViewChange)] == \
                [f"e{k}".encode() for k in range(300)]
            assert isinstance(events[0], ViewChange)  # b's own join came first
            c = Channel(a.cluster, "m2", a.config.with_options(port=free_port()))
            await c.connect(timeout=20)
            for k in range(100):
                await a.send(f"r{k}".encode())
            views, got = 0, []
            while len(got) < 100:
                batch = await b.events_many(timeout=10)
                views += sum(1 for e in batch if isinstance(e, ViewChange))
                got += [e.payload for e in batch if not isinstance(e, ViewChange)]
            assert views == 1 and got == [f"r{k}".encode() for k in range(100)]
            for k in range(50):
                await a.send(f"m{k}".encode())
            msgs = []  # c, which joined before the r's: every r, then every m, no views
            while b"m49" not in msgs:
                msgs += [m.payload for m in await c.receive_many(max_items=7, timeout=10)]
            assert msgs == [f"r{k}".encode() for k in range(100)] + \
                [f"m{k}".encode() for k in range(50)]
        finally:
            await asyncio.gather(*(ch.close() for ch in (a, b, c) if ch is not None))

    asyncio.run(main())
