"""SWIM's time-frame anti-entropy (the gossip design): received rumors by creation time.

Every rumor carries its creation time: the wall clock (``Host.wall``) of the member that made
it, read when it made it. A member passing a rumor on keeps that time, so every holder files
a rumor under the same time. Each PING offers a summary of one time frame: its start, its
end, and how many rumors created in [start, end] its sender holds. The frame ends
log2(2N)+1 rounds before now by the sender's clock (rumors created in it have finished
travelling) and is ``FRAME_ROUNDS`` rounds long, as the gossip design chooses it. A member
holding more rumors of that frame answers with every one of them, in creation order, in
pages of at most ``sync_page`` rumors (one message each, within one datagram); the asker
applies those it lacks. Two members can make the same rumor (two suspicion timeouts both
declare a member dead); a holder keeps the earliest creation time it has seen of it.

Clock skew: creation times are only compared with each other, never with the receiver's
clock, so every holder counts a rumor in the same frame whatever the clocks say; skew only
shifts the moment that frame comes up for a sync. A rumor made by a member whose clock runs
ahead is synced later; one made by a member whose clock runs behind by more than the frame's
age (about ``(rounds + FRAME_ROUNDS) * probe_interval_s``) is already older than every frame
asked about from then on: only its rounds of gossip and, in gossip mode, push-pull carry it.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

FRAME_ROUNDS = 4
"""Length of a sync frame in probe intervals (the gossip design: a 4 s frame at 3 s rounds
is about this at our shorter rounds)."""


def frame(wall: float, rounds: int, interval: float) -> tuple[float, float]:
    """(start, end) of the frame a member asks about at wall-clock time ``wall``."""
    end = wall - rounds * interval
    return end - FRAME_ROUNDS * interval, end


class RumorLog:
    """Received rumors sorted by creation time, bounded: beyond twice ``capacity`` the
    oldest ``capacity`` go, in one cut (filing a rumor shifts no more than the rumors created
    after it, which are few: most arrive in creation order).

    A rumor is filed as its key (kind, uid, incarnation, and the extra of a doubt), its
    creation time and the extra its key lacks (an ADD's or ALIVE's member info, else None),
    and made whole again only for a sync answer: a whole tuple per rumor held was 88 bytes
    more per rumor and member, a tenth of a 1,000-member gossip group's peak memory after a
    partition."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.times: list[float] = []
        self.keys: list[tuple] = []
        self.extras: list = []

    def __len__(self) -> int:
        return len(self.times)

    def add(self, key: tuple, ctime: float, extra=None) -> None:
        i = bisect_right(self.times, ctime)
        self.times.insert(i, ctime)
        self.keys.insert(i, key)
        self.extras.insert(i, extra)
        if len(self.times) > 2 * self.capacity:
            cut = self.capacity
            del self.times[:cut], self.keys[:cut], self.extras[:cut]

    def restamp(self, key: tuple, old: float, ctime: float) -> None:
        """The rumor ``key`` filed at ``old`` was also made earlier, at ``ctime``: file it
        there (nothing if it is no longer kept)."""
        times, keys = self.times, self.keys
        i = bisect_left(times, old)
        while i < len(times) and times[i] == old:
            if keys[i] == key:
                extra = self.extras[i]
                del times[i], keys[i], self.extras[i]
                self.add(key, ctime, extra)
                return
            i += 1

    def span(self, start: float, end: float) -> tuple[int, int]:
        """Indexes of the rumors created in [start, end]."""
        return bisect_left(self.times, start), bisect_right(self.times, end)

    def count(self, start: float, end: float) -> int:
        lo, hi = self.span(start, end)
        return hi - lo

    def pages(self, lo: int, hi: int, size: int) -> list[list]:
        """The rumors lo..hi in creation order, ``size`` at most per page, each (kind, uid,
        incarnation, extra, 0 rounds left, creation time)."""
        rumors = [(k[0], k[1], k[2], k[3] if x is None else x, 0, t) for k, x, t in
                  zip(self.keys[lo:hi], self.extras[lo:hi], self.times[lo:hi])]
        return [rumors[k:k + size] for k in range(0, len(rumors), size)]
