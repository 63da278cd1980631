"""The README's demo (for now): a few members over loopback sockets.

Four channels join the group "demo", each multicasts 5,000 messages; the demo prints the
views as they change and the delivery figures, then one member leaves gracefully and the
others install the view without it.
"""
from __future__ import annotations

import asyncio
import os
import time

from ..config import StackConfig
from ..view import ViewChange
from .channel import Channel

MEMBERS, PER_SENDER = 4, 5_000


async def main() -> None:
    cluster = f"demo-{os.getpid()}"
    print(f"raygroups demo: {MEMBERS} members of {cluster!r} over loopback (UDP, IP multicast)")
    chans = []
    for i in range(MEMBERS):
        ch = Channel(cluster, name=f"member-{i}", config=StackConfig.local())
        t0 = time.perf_counter()
        view = await ch.connect()
        print(f"  {ch.name} joined in {1000 * (time.perf_counter() - t0):6.1f} ms  "
              f"at {ch.physical_address}  view {view}")
        chans.append(ch)
    while any(len(c.view) < MEMBERS for c in chans):
        await asyncio.sleep(0.01)
    print(f"agreed view: {chans[0].view}")

    async def drain(ch: Channel, expect: int) -> float:
        n = 0
        while n < expect:
            await ch.receive(timeout=30)
            n += 1
        return time.perf_counter()

    total = MEMBERS * PER_SENDER
    t0 = time.perf_counter()
    receivers = [asyncio.create_task(drain(c, total)) for c in chans]
    await asyncio.gather(*(c.send_many(f"{c.name}:{k}".encode() for k in range(PER_SENDER))
                           for c in chans))
    done = await asyncio.gather(*receivers)
    elapsed = max(done) - t0
    print(f"every member delivered all {total:,} multicasts in {elapsed * 1000:.0f} ms "
          f"({total / elapsed:,.0f} msg/s per member, all four in one process)")
    retrans = sum(c.stats()["nakack"].get("retransmitted", 0) for c in chans)
    print(f"retransmissions: {retrans}")

    leaver = chans.pop(1)
    print(f"{leaver.name} leaves gracefully ...")
    await leaver.close()
    async for ev in chans[0].events():
        if isinstance(ev, ViewChange):
            print(f"new view: {ev.view}  (left: {ev.left})")
            break
    for c in chans:
        await c.close()
    print("all members closed")


if __name__ == "__main__":
    asyncio.run(main())
