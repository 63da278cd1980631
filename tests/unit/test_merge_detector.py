"""MERGE (stack/merge.py) in a sandwich: INFO announcements of the member's view, and none
while GMS holds merges (``HoldMerges``)."""
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


def test_only_the_coordinator_announces_to_the_members_that_left_its_view():
    """Without multicast: the static hosts hear every member; the members that left our view
    (the other side of a partition) hear our coordinator only: its INFO is the one that
    starts a merge there, and a member left behind learns from it that it was dropped.
    Every member announcing to every departed one cost N x N/2 datagrams an interval."""
    seed_host = ("10.0.0.1", 7800)
    for coordinator in (True, False):
        s = Sandwich(MergeDetector(MergeConfig(info_interval_s=0.1)),
                     answers={DiscoveryTargets: [seed_host],
                              GetPhysical: lambda ev: ("10.9.9.9", hash(ev.addr) % 60000)})
        other, gone1, gone2 = s.addr("other"), s.addr("gone1"), s.addr("gone2")
        members = (s.local, other) if coordinator else (other, s.local)
        v1 = View(ViewId(members[0], 1), members + (gone1, gone2))
        s.down_event(ViewInstalled(v1))
        s.down_event(ViewInstalled(View(ViewId(members[0], 2), members), v1))
        s.advance(0.35)
        to = {e.phys for e in infos(s)}
        departed = {("10.9.9.9", hash(a) % 60000) for a in (gone1, gone2)}
        assert seed_host in to
        if coordinator:
            assert departed <= to, to
        else:
            assert not departed & to, to
