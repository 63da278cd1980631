"""Transport fragmentation on real sockets: 12 channels over loopback UDP (IP multicast) with
700-byte datagrams, so that the group's own VIEW, JOIN_RSP and flush messages each take
several: the group forms one view, every member gets every multicast, a member leaves and
the others agree again."""
import asyncio

from raygroups.stack import Channel, StackConfig

from raygroups.stack.runtime.ports import free_port
from ..aio import until
from .test_store_discovery import one_view

N = 12


def test_views_larger_than_a_datagram_on_real_sockets():
    async def main():
        mp = free_port()
        cfg = StackConfig.local(mcast_port=mp, transport__max_bundle_size=700)
        chans = []
        try:
            for i in range(N):
                ch = Channel(f"frag-real-{mp}", f"m{i}", cfg)
                await ch.connect(timeout=20)
                chans.append(ch)
            await until(lambda: one_view(chans), 30, f"{N} members in one view")
            got = {c.name: [] for c in chans}

            async def collect(c):
                async for ev in c.events():
                    if getattr(ev, "payload", None) is not None and ev.payload.startswith(b"x"):
                        got[c.name].append(ev.payload)
                        if len(got[c.name]) == 20:
                            return
            tasks = [asyncio.ensure_future(collect(c)) for c in chans]
            for k in range(20):
                await chans[k % 3].send(b"x%d" % k)
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
            assert all(sorted(v) == sorted(b"x%d" % k for k in range(20)) for v in got.values())
            leaver = chans.pop(5)
            await leaver.close()
            await until(lambda: one_view(chans), 30, "a view without the leaver")
            st = [c.stack.layer("transport").stats for c in chans]
            assert sum(s["frag_messages"] for s in st) > 0
            assert sum(s["frag_reassembled"] for s in st) > 0
            assert all(c.stack.errors == 0 for c in chans)
        finally:
            await asyncio.gather(*(c.close() for c in chans))
    asyncio.run(main())
