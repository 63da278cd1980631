"""Sends outside a primary component, on real sockets (3 channels on loopback, the fault
layer cutting one off): MySQL Group Replication blocks writes outside the primary
component. A send there waits for the primary to come back and goes out in it; one that
waits longer than ``primary.send_timeout_s`` raises NotPrimary and is never sent; with
``primary__block_sends=False`` it raises at once. A message refused is never delivered
anywhere, even after the heal. A graceful leave nobody hears is reported unconfirmed."""
import asyncio
import itertools

import pytest

from raygroups.stack import Channel, NotPrimary, StackConfig
from raygroups.stack.runtime.ports import free_ports

from ..aio import until

_ids = itertools.count()


async def three(**options):
    ports = free_ports(3)
    cluster = f"np-{next(_ids)}-{ports[0]}"
    chans = []
    for i in range(3):
        cfg = StackConfig.local(transport__ip_multicast=False, port=ports[i],
                                initial_hosts=[("127.0.0.1", p) for p in ports],
                                primary__expected_size=3, faults__drop_up=0.0, **options)
        ch = Channel(cluster, name=f"m{i}", config=cfg)
        await ch.connect(timeout=20)
        chans.append(ch)
    await until(lambda: all(c.view is not None and len(c.view) == 3 and c.view.primary
                            for c in chans), 30, "a primary view of 3")
    return chans


async def cut_off(chans):
    """m2 alone (not primary), m0 and m1 primary."""
    lone = chans[2]
    lone.stack.layer("faults").isolate()
    await until(lambda: len(lone.view) == 1 and not lone.view.primary and
                all(len(c.view) == 2 and c.view.primary for c in chans[:2]), 30, "m2 cut off")
    return lone


async def received_until(chans, payload: bytes, timeout: float = 30.0) -> dict:
    """Each channel's received payloads, read until every one has seen ``payload``."""
    got = {c.name: [] for c in chans}
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not all(payload in got[c.name] for c in chans):
        assert loop.time() < end, got
        for c in chans:
            try:
                got[c.name].append((await asyncio.wait_for(c.receive(), 0.05)).payload)
            except asyncio.TimeoutError:
                pass
    return got


async def heal(chans):
    chans[2].stack.layer("faults").heal()
    await until(lambda: all(len(c.view) == 3 and c.view.primary for c in chans), 60,
                "one primary view again")


@pytest.mark.parametrize("block", [True, False], ids=["waits-then-raises", "raises-at-once"])
def test_a_send_outside_the_primary_component_raises_not_primary(block):
    async def main():
        chans = await three(primary__send_timeout_s=0.5, primary__block_sends=block)
        try:
            lone = await cut_off(chans)
            with pytest.raises(NotPrimary):
                await asyncio.wait_for(lone.send(b"refused"), 20)  # never hangs
            await heal(chans)
            await chans[0].send(b"after")
            got = await received_until(chans, b"after")
            assert all(b"refused" not in g for g in got.values()), got
        finally:
            for c in chans:
                await c.close(timeout=2)
    asyncio.run(main())


def test_a_leave_nobody_hears_is_unconfirmed():
    """A graceful leave nobody can hear, from a member just cut off (still in the view of
    three) or alone in its view: close() says nobody confirmed it (the others exclude the
    member as a crash)."""
    async def main():
        chans = await three()
        try:
            chans[1].stack.layer("faults").isolate()
            assert await chans[1].close(timeout=0.3) is False  # far below failure detection
            chans[2].stack.layer("faults").isolate()
            await until(lambda: len(chans[2].view) == 1, 30, "m2 alone")
            assert await chans[2].close(timeout=1.0) is False
        finally:
            for c in chans:
                await c.close(timeout=2)
    asyncio.run(main())


def test_a_waiting_send_goes_out_once_the_primary_component_is_back():
    async def main():
        chans = await three(primary__send_timeout_s=60.0)
        try:
            lone = await cut_off(chans)
            waiting = asyncio.ensure_future(lone.send(b"waited"))
            await asyncio.sleep(0)
            await heal(chans)
            await asyncio.wait_for(waiting, 30)
            got = await received_until(chans, b"waited")
            assert all(g.count(b"waited") == 1 for g in got.values()), got
        finally:
            for c in chans:
                await c.close(timeout=2)
    asyncio.run(main())
