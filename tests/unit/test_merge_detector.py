"""MERGE (stack/merge.py) in a sandwich: INFO announcements of the member's view, and none
while GMS holds merges (``HoldMerges``)."""
from raygroups.stack.events import DiscoveryTargets, EmitTo, HoldMerges, ViewInstalled
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
