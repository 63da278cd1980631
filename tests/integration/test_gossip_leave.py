"""Gossip membership on real sockets (loopback UDP, a directory store): Channel.close() of
the nominal coordinator announces the leave (UNSUBSCRIPTION, then a REMOVE rumor), so the
others drop it although failure detection would take 30 s here, and its members file is
deleted (the Leave reaches store discovery)."""
import asyncio
import itertools

from raygroups.stack import Channel, StackConfig
from raygroups.stack.discovery.members_file import MembersFile, file_name

from ..aio import until

_ids = itertools.count()


def test_close_in_gossip_mode_announces_the_leave(tmp_path):
    store = tmp_path / "store"
    cluster = f"gossip-leave-{next(_ids)}"
    cfg = StackConfig.local(membership="gossip", discovery=f"file://{store}",
                            transport__ip_multicast=False, swim__suspicion_min_s=30.0,
                            swim__suspicion_max_factor=1.0)

    def files():
        d = store / cluster
        return {p.name: MembersFile.parse(p.read_text()) for p in d.glob("*.list")} \
            if d.exists() else {}

    async def main():
        chans = [Channel(cluster, "n0", cfg)]
        await chans[0].connect(timeout=20)
        await until(lambda: files(), 20, "the founder's file")
        for i in range(1, 4):
            ch = Channel(cluster, f"n{i}", cfg)
            await ch.connect(timeout=20)
            chans.append(ch)
        uids = {c.address.uid for c in chans}
        await until(lambda: all(c.view is not None and {a.uid for a in c.view.members} == uids
                                   for c in chans), 20, "4 members in every list")
        leaver = min(chans, key=lambda c: c.address)
        own = file_name(leaver.address.uid)
        await until(lambda: own in files(), 20, "the coordinator's members file")
        rest = [c for c in chans if c is not leaver]
        try:
            await leaver.close()
            # well inside the 30 s failure detection would need
            await until(lambda: all(leaver.address not in c.view for c in rest), 10,
                           "the others dropped the leaver")
            await until(lambda: own not in files(), 10, "the leaver's file deleted")
        finally:
            await asyncio.gather(*(c.close() for c in rest))
    asyncio.run(main())
