"""MERGE (stack/merge.py) in a sandwich: INFO announcements of the member's view, and none
while GMS holds merges (``HoldMerges``)."""
import random

from raygroups.stack.events import (DiscoveryTargets, EmitTo, GetPhysical, HoldMerges,
                                    ViewInstalled)
from raygroups.stack.layer import MCAST
from raygroups.stack.merge import INFO, MergeConfig, MergeDetector
from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich


def infos(s) -> list:
    return [e for e in s.below.events_of(EmitTo) if e.msg.headers.get(6, [None])[0] == INFO]


def test_infos_stop_while_merges_are_held_and_resume_after():
    s = Sandwich(MergeDetector(MergeConfig(info_interval_s=0.1)),
                 answers={DiscoveryTargets: [MCAST]})
    s.down_event(ViewInstalled(View(ViewId(s.local, 3), (s.local,))))
    s.advance(0.5)
    before = len(infos(s))
    assert before >= 3 and all(e.phys == MCAST for e in infos(s))
    assert s.down_event(HoldMerges(True)) is True
    s.advance(1.0)
    assert len(infos(s)) == before  # nobody learns of our view: nobody tries to merge
    s.down_event(HoldMerges(False))
    s.advance(0.5)
    assert len(infos(s)) > before


def phys_of(addr) -> tuple:
    return ("10.9.9.9", int.from_bytes(addr.uid[-2:], "big"))


def announced_to(coordinator: bool, senders: int = 1) -> tuple:
    """Our INFOs' destinations after a view change that dropped x, y and z from
    (c, x, me, b, y, z) (or (me, x, c, b, y, z) when we coordinate)."""
    seed_host = ("10.0.0.1", 7800)
    s = Sandwich(MergeDetector(MergeConfig(info_interval_s=0.1, info_senders=senders)),
                 answers={DiscoveryTargets: [seed_host],
                          GetPhysical: lambda ev: phys_of(ev.addr)})
    c, x, b, y, z = (s.addr(n) for n in "cxbyz")
    first, third = (s.local, c) if coordinator else (c, s.local)
    v1 = View(ViewId(first, 1), (first, x, third, b, y, z))
    s.down_event(ViewInstalled(v1))
    s.down_event(ViewInstalled(View(ViewId(first, 2), (first, third, b)), v1))
    s.advance(0.35)
    to = {e.phys for e in infos(s)}
    assert seed_host in to  # every member announces to the discovery targets
    return {n for n, a in zip("xyz", (x, y, z)) if phys_of(a) in to}, s


def test_the_coordinator_announces_to_every_departed_member():
    assert announced_to(coordinator=True)[0] == {"x", "y", "z"}


def test_another_member_announces_only_to_the_departed_it_followed_in_their_last_view():
    """Without multicast, every member announcing to every departed one cost N x N/2
    datagrams an interval across a partition of N. A member takes the departed members it
    followed (within info_senders members that stayed) in the view they left: a member
    excluded while alive hears a newer view from members of its own stale view, whether
    they coordinate or not."""
    assert announced_to(coordinator=False)[0] == {"x"}  # y and z: followed by c, wrapping
    assert announced_to(coordinator=False, senders=2)[0] == {"x", "y", "z"}
    _, s = announced_to(coordinator=False)
    x = s.layer.ctx.book.get(next(a.uid for a in s.layer.gone if a.name == "x"))
    s.down_event(ViewInstalled(View(ViewId(s.layer.view.coordinator, 3),
                                    s.layer.view.members + (x,)), s.layer.view))
    assert x not in s.layer.mine and x not in s.layer.gone  # it came back


def test_the_departed_a_member_takes_are_those_it_follows_within_info_senders():
    """MergeDetector._ours against a direct reading of its rule, on random views."""
    rng = random.Random(20261204)
    print("seed 20261204")
    for _ in range(300):
        k = rng.randint(1, 4)
        s = Sandwich(MergeDetector(MergeConfig(info_senders=k)))
        others = [s.addr(f"m{i}") for i in range(rng.randint(1, 12))]
        previous = others + [s.local]
        rng.shuffle(previous)
        stayed = {a for a in previous if a == s.local or rng.random() < 0.5}
        want = []
        n = len(previous)
        for i, a in enumerate(previous):
            if a in stayed:
                continue
            after = [previous[(i + j) % n] for j in range(1, n)]
            if s.local in [b for b in after if b in stayed][:k]:
                want.append(a)
        assert sorted(s.layer._ours(previous, frozenset(stayed)), key=previous.index) == want
