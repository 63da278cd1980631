"""The order of a rolling upgrade (actors/upgrade.py): the view's coordinator last, so that the
group changes coordinator once; a member the view does not hold (yet) first."""
from raygroups.actors.upgrade import upgrade_order


def test_the_coordinator_goes_last_and_the_others_in_view_order():
    assert upgrade_order(["m2", "m0", "m1"], ["m0", "m1", "m2"]) == ["m0", "m1", "m2"]
    assert upgrade_order(["m2", "m0", "m1"], ["m1", "m2", "m0"])[-1] == "m2"


def test_a_member_outside_the_view_goes_first():
    assert upgrade_order(["m0", "m1"], ["m0", "m1", "m9"]) == ["m9", "m1", "m0"]
