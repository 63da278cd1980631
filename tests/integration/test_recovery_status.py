"""The recovery status on real sockets (MySQL Group Replication's design): while state
transfer runs, the joiner is RECOVERING and its donor DONOR, in the same answer at both members;
once the state is in, both are ONLINE. A joiner whose donor goes before the state came is
ERROR at the members that stay, and leaves with the reason. The state is held up by the
donor's fault layer, which drops its packets to the joiner for a moment from inside
``get_state`` (the retransmission brings it after)."""
import asyncio
import itertools

from raygroups.stack import Channel, StackConfig
from raygroups.stack.runtime.ports import free_ports
from raygroups.stack.state_transfer import StateTransferFailed

from ..aio import until

_ids = itertools.count()
STATE = b"s" * 100_000


def config(ports: list, i: int, **options) -> StackConfig:
    return StackConfig.local(transport__ip_multicast=False, port=ports[i],
                             initial_hosts=[("127.0.0.1", p) for p in ports],
                             faults__drop_up=0.0, **options)


def statuses(ch: Channel) -> dict:
    return {a.name: attrs.get("status") for a, attrs in ch.member_attributes().items()}


def distinct(seen: list) -> list:
    """The answers seen, each once, in the order first seen."""
    return [pair for i, pair in enumerate(seen) if pair not in seen[:i]]


def test_recovering_and_donor_while_the_state_travels_then_online_at_both():
    asyncio.run(_recovering_then_online())


async def _recovering_then_online() -> None:
    ports = free_ports(2)
    cluster = f"rs-{next(_ids)}-{ports[0]}"
    loop = asyncio.get_running_loop()
    got: list = []
    holder: dict = {}

    def get_state() -> bytes:
        faults = holder["a"].stack.layer("faults")
        faults.drop_to(holder["b"].address)
        loop.call_later(1.5, faults.heal)
        return STATE
    a = Channel(cluster, "a", config(ports, 0, primary__expected_size=1),
                get_state=get_state, set_state=lambda s: None)
    await a.connect(timeout=20)
    holder["a"] = a
    b = Channel(cluster, "b", config(ports, 1), get_state=lambda: b"",
                set_state=got.append)
    holder["b"] = b
    seen: list = []
    try:
        connect = asyncio.ensure_future(b.connect(timeout=20))
        # b's own view is delivered to it only once the state is in: wait at the donor
        await until(lambda: a.view is not None and len(a.view) == 2, 20, "b in a's view")

        def both(want: dict) -> bool:
            sa, sb = statuses(a), statuses(b)
            seen.append((sa, sb))
            return sa == sb == want
        try:
            await until(lambda: both({"a": "DONOR", "b": "RECOVERING"}), 10,
                        "a DONOR and b RECOVERING at both members")
        except AssertionError as e:
            raise AssertionError(f"{e}; answers seen: {distinct(seen)}") from None
        assert not got, "the joiner had the state while it was RECOVERING"
        await until(lambda: both({"a": "ONLINE", "b": "ONLINE"}), 20, "both ONLINE")
        assert got == [STATE]
        await connect
    finally:
        await b.close()
        await a.close()


def test_a_joiner_whose_donor_goes_is_error_and_leaves_with_the_reason():
    asyncio.run(_donor_gone())


async def _donor_gone() -> None:
    ports = free_ports(3)
    cluster = f"rs-{next(_ids)}-{ports[0]}"
    cut = {"on": False}
    chans: dict = {}

    def get_state() -> bytes:  # once cut is on, the donor is cut off before the state leaves
        if cut["on"]:
            chans["a"].stack.layer("faults").isolate()
        return STATE
    a = chans["a"] = Channel(cluster, "a", config(ports, 0, primary__expected_size=1),
                             get_state=get_state, set_state=lambda s: None)
    await a.connect(timeout=20)
    c = Channel(cluster, "c", config(ports, 2), get_state=lambda: b"",
                set_state=lambda s: None)
    await c.connect(timeout=20)
    await until(lambda: statuses(a) == statuses(c) == {"a": "ONLINE", "c": "ONLINE"}, 20,
                "a and c ONLINE")
    cut["on"] = True
    b = Channel(cluster, "b", config(ports, 1), get_state=lambda: b"",
                set_state=lambda s: None)
    events: list = []
    at_c: list = []
    try:
        await b.connect(timeout=20)

        async def collect() -> None:
            while True:
                at_c.append(statuses(c).get("b"))
                try:
                    evs = await b.events_many(timeout=0.05)
                except asyncio.TimeoutError:
                    continue
                except Exception:  # closed (GroupClosed)
                    return
                events.extend(evs)
        await asyncio.wait_for(collect(), 60)
        failed = [e for e in events if isinstance(e, StateTransferFailed)]
        assert failed, "; ".join(map(repr, events))
        assert b.left is not None and b.left.reason.startswith("recovery failed"), b.left
        assert "ERROR" in at_c, f"c never answered b ERROR: {sorted(set(map(str, at_c)))}"
        await until(lambda: "b" not in statuses(c), 30, "b gone from c's answer")
    finally:
        for ch in (b, c, a):
            try:
                await ch.close()
            except Exception:  # a, cut off, cannot leave gracefully
                pass
