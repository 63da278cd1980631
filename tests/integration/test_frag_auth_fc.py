"""Real sockets on loopback: large messages, authenticated groups and flow control.

- A 64 MiB payload multicast between 3 channels arrives intact everywhere (UDP, TCP).
- An authenticated group (HMAC over UDP multicast, AES-GCM over TCP) works; a channel with a
  wrong key cannot join it, and its packets are counted as dropped.
- Memory bound: a receiver process whose application stops consuming while a sender
  multicasts far more than ``max_credits``: the sender blocks (a send does not complete), the
  receiver's RSS stays bounded, and once it consumes again everything arrives exactly once.
"""
import asyncio
import hashlib
import itertools
import json
import os
import random
import sys

import pytest

from raygroups.stack import Channel, StackConfig

from raygroups.stack.runtime.ports import free_ports

from ..aio import until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1024 * 1024
_ids = itertools.count()


def static(kind, ports, i, **opts):
    return StackConfig.local(kind, initial_hosts=[("127.0.0.1", p) for p in ports],
                             port=ports[i], **opts)


async def group(kind, n, ports=None, cluster=None, **opts):
    ports = ports or free_ports(n)
    cluster = cluster or f"fa-{kind}-{next(_ids)}-{ports[0]}"
    chans = []
    for i in range(n):
        ch = Channel(cluster, name=f"m{i}", config=static(kind, ports, i, **opts))
        await ch.connect(timeout=20)
        chans.append(ch)
    await until(lambda: all(c.view is not None and len(c.view) == n for c in chans), 20)
    return chans


async def close_all(chans):
    for c in reversed(chans):  # one at a time: concurrent leaves wait for leave timeouts
        await c.close()


@pytest.mark.parametrize("kind", ["udp", "tcp"])
def test_a_64_mib_multicast_arrives_intact_at_three_members(kind):
    async def main():
        chans = await group(kind, 3)
        payload = random.Random(64).randbytes(64 * MiB)
        digest = hashlib.sha256(payload).digest()

        async def collect(ch):
            m = await ch.receive(timeout=60)
            return len(m.payload), hashlib.sha256(m.payload).digest(), m.sender

        receivers = [asyncio.create_task(collect(c)) for c in chans]
        await chans[0].send(payload)
        del payload
        results = await asyncio.wait_for(asyncio.gather(*receivers), 90)
        for size, h, sender in results:
            assert size == 64 * MiB and h == digest and sender == chans[0].address
        for c in chans:
            assert c.stack.errors == 0
            assert c.stats()["frag"]["reassembled"] == 1
        await close_all(chans)
    asyncio.run(main())


@pytest.mark.parametrize("kind,mode", [("udp", "hmac"), ("tcp", "aesgcm")])
def test_an_authenticated_group_works_and_a_wrong_key_cannot_join(kind, mode):
    async def main():
        ports = free_ports(4)
        cluster = f"auth-{kind}-{next(_ids)}-{ports[0]}"
        key = os.urandom(32)
        chans = await group(kind, 3, ports, cluster, cluster_key=key, auth_mode=mode)
        per = 300

        async def collect(ch):
            got = []
            while len(got) < 2 * per:
                got.append((await ch.receive(timeout=20)).payload)
            return got

        async def send(ch):
            await ch.send_many(b"%s:%d" % (ch.name.encode(), k) for k in range(per))

        tasks = [asyncio.create_task(collect(c)) for c in chans]
        await asyncio.gather(*(send(c) for c in chans[:2]))
        for got in await asyncio.gather(*tasks):
            for name in (b"m0", b"m1"):
                assert [p for p in got if p.startswith(name + b":")] == \
                    [b"%s:%d" % (name, k) for k in range(per)]
        # an intruder with another key: it never hears the group, founds its own
        intruder = Channel(cluster, name="x", config=static(kind, ports, 3, cluster_key=b"nope",
                                                            auth_mode=mode))
        await intruder.connect(timeout=20)
        await asyncio.sleep(1.0)  # discovery, merge attempts: all refused
        assert [a.name for a in intruder.view.members] == ["x"]
        for c in chans:
            assert len(c.view) == 3 and intruder.address not in c.view
        def refused(ch) -> int:
            # UDP: its packets fail authentication; TCP: its connections already do (the
            # hello is sealed), so no packet of it gets as far as the stack
            st = ch.stats()
            return st["transport"].get("dropped_auth", 0) + st["runtime"].get("tcp_bad_hello", 0)
        assert sum(refused(c) for c in chans) > 0
        assert refused(intruder) > 0
        for c in chans + [intruder]:
            assert c.stack.errors == 0
        await intruder.close()
        await close_all(chans)
    asyncio.run(main())


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def event(proc, timeout=30):
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    assert line, "receiver process exited"
    return json.loads(line)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_a_stalled_receiver_blocks_the_sender_and_its_memory_stays_bounded():
    credits, size, count, max_queued = 2 * MiB, 16 * 1024, 4096, 32  # 64 MiB in all

    async def main():
        ports = free_ports(2)
        cluster = f"fcmem-{next(_ids)}-{ports[0]}"
        args = {"cluster": cluster, "ports": ports, "index": 0, "members": 2,
                "transport": "udp", "credits": credits, "max_queued": max_queued,
                "count": count, "size": size}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.integration.fc_receiver", json.dumps(args), cwd=REPO,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        ch = None
        try:
            await asyncio.sleep(0.3)  # the receiver founds the group
            ch = Channel(cluster, name="sender",
                         config=static("udp", ports, 1, flow_control__max_credits=credits))
            await ch.connect(timeout=20)
            assert (await event(proc))["event"] == "ready"
            before = rss(proc.pid)

            async def own():  # the sender's application does consume its own multicasts
                while True:
                    await ch.receive()
            drain = asyncio.create_task(own())

            def msg(k):
                return k.to_bytes(8, "big") + b"\xab" * (size - 8)
            sent = 0
            with pytest.raises(asyncio.TimeoutError):
                while sent < count:
                    await asyncio.wait_for(ch.send(msg(sent)), 1.0)
                    sent += 1
            # blocked by flow control long before all was sent
            assert not ch.stack.writable and "flow_control" in ch.stack.blocked
            assert sent * size <= credits + (max_queued + 8) * size
            await asyncio.sleep(1.0)
            grown = rss(proc.pid) - before
            assert grown < 3 * credits + 50 * MiB, f"receiver grew {grown / MiB:.1f} MiB"
            with pytest.raises(asyncio.TimeoutError):  # still blocked
                await asyncio.wait_for(ch.send(msg(sent)), 0.5)
            # probes and acks kept flowing: the stalled member was not suspected or excluded
            assert len(ch.view) == 2

            proc.stdin.write(b"consume\n")
            await proc.stdin.drain()
            await asyncio.wait_for(ch.send_many(msg(k) for k in range(sent, count)), 60)
            done = await event(proc, 60)
            assert done["event"] == "done" and done["count"] == count, done
            assert done["ok"], done
            assert done["fc"].get("dropped_over_credit", 0) == 0
            assert done["fc"].get("app_blocked", 0) >= 1
            drain.cancel()
            proc.stdin.write(b"close\n")
            await proc.stdin.drain()
            await asyncio.wait_for(proc.wait(), 20)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            if ch is not None:
                await ch.close()
    asyncio.run(main())


def test_unicasts_to_a_stalled_member_wait_alone_other_sends_go_on():
    """JGroups' UFC beside MFC: m1's application stops consuming; m0's unicasts to it block
    once its unicast credit is spent, while m0's unicasts to m2 and its multicasts (whose
    credit at m1 is untouched) still go. Once m1 consumes again, every unicast arrives, in
    order. (With one account and one queue per sender, as before, the waiting unicast
    blocked every send of m0.)"""
    credits, size = 256 * 1024, 32 * 1024

    async def main():
        chans = await group("udp", 3, flow_control__max_credits=credits)
        m0, m1, m2 = chans
        assert m1.stack.set_app_blocked(True)
        sent = 0
        with pytest.raises(asyncio.TimeoutError):
            while sent < 64:
                await asyncio.wait_for(m0.send(sent.to_bytes(4, "big") * (size // 4),
                                               dest=m1.address), 1.0)
                sent += 1
        assert sent * size <= 2 * credits and not m0.stack.writable_to(m1.address)
        assert m0.stack.writable and m0.stack.writable_to(m2.address)
        await asyncio.wait_for(m0.send(b"to m2", dest=m2.address), 5)
        await asyncio.wait_for(m0.send(b"to all"), 5)
        got = [(await m2.receive(timeout=5)).payload for _ in range(2)]
        assert sorted(got) == [b"to all", b"to m2"]
        assert m1.stack.set_app_blocked(False) is True
        await asyncio.wait_for(m0.send((sent).to_bytes(4, "big") * (size // 4),
                                       dest=m1.address), 10)
        seen = []
        while len(seen) < sent + 1:
            m = await m1.receive(timeout=10)
            if m.sender == m0.address and len(m.payload) == size:
                seen.append(int.from_bytes(m.payload[:4], "big"))
        assert seen == list(range(sent + 1))
        await close_all(chans)
    asyncio.run(main())
