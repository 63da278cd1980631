"""The even-split tie-breaker's lease through the runtime's own path: the StoreClient a
channel opens for its discovery store (``prepare_channel``: the process's shared caching
store on the thread pool, results on the asyncio loop), here a directory store. Both halves
of one primary component race for its lease: exactly one create succeeds (an exclusive
create of a file in the directory), the other reads the winner back and loses; the winner's
members win again on a re-run."""
import asyncio
import json

from raygroups.stack.config import StackConfig
from raygroups.stack.message import INTERNAL, Message
from raygroups.stack.primary import LEASE
from raygroups.stack.runtime.stores import prepare_channel

from .test_primary import change, delivered_views, exchange, lease_sent, make


def half(client, seed):
    s = make(seed=seed, tie_breaker="store")
    s.host.store = client
    return s


async def outcome(s, *members):
    """A view of ``members``, their states (last primary: ``s.last``, id 4), then the
    LEASE its first member (this one) multicasts once the store answered, looped back."""
    v = change(s, *members)
    exchange(s, v, pids={m: 4 for m in members}, members={m: s.last for m in members})
    for _ in range(500):
        sent = [h for h in lease_sent(s) if h[1][1] == v.view_id.id]
        if sent:
            s.up(Message(None, b"", INTERNAL, {9: sent[0]}, s.local))
            return sent[0][2]
        await asyncio.sleep(0.01)
    raise AssertionError("no LEASE from the store")


def test_the_lease_is_an_exclusive_create_in_the_directory_store(tmp_path):
    cfg = StackConfig.local(discovery=f"file://{tmp_path}", primary__tie_breaker="store")

    async def main():
        _, _, _, client = await prepare_channel(cfg, "g", "m", False)
        ours, theirs = half(client, 0), half(client, 1)
        ours.ctx.cluster = theirs.ctx.cluster = "g"
        ours.last = theirs.last = [ours.local, ours.b, theirs.local, theirs.b]
        # both halves ask at once; the store decides
        results = await asyncio.gather(outcome(ours, ours.local, ours.b),
                                       outcome(theirs, theirs.local, theirs.b))
        assert sorted(results) == [False, True]
        winner = ours if results[0] else theirs
        assert delivered_views(winner)[-1].primary
        assert not delivered_views(theirs if winner is ours else ours)[-1].primary
        [lease] = [p for p in (tmp_path / "g").iterdir() if p.name.endswith(".lease")]
        assert lease.name.startswith("primary-4-")
        members = sorted(a.uid.hex() for a in delivered_views(winner)[-1].members)
        assert json.loads(lease.read_text())["members"] == members
        # the winning members again (a re-run of the exchange): the lease read back
        assert await outcome(winner, winner.local, winner.b) is True
        assert winner.layer.stats["leases_won"] == 2

    asyncio.run(main())
