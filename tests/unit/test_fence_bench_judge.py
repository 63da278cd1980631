"""bench/fence.py's judge of a witness's view history: an exclusion during the group's
formation, before the raylet is frozen, is not the fence's doing and is kept apart; every
exclusion from the freeze on counts, and so does a comeback after Ray's verdict."""
import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("fence_bench", os.path.join(REPO, "bench",
                                                                           "fence.py"))
fence_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fence_bench)


def _h(*views):
    return [{"installed_at": t, "members": m} for t, m in views]


def test_an_exclusion_before_the_freeze_is_kept_apart_and_the_one_after_counts():
    h = _h((0.0, ["w"]), (1.0, ["w", "v"]), (2.0, ["w"]), (3.0, ["w", "v"]), (20.0, ["w"]))
    r = fence_bench._judge(h, "v", "u", t_stop=10.0, verdict=19.9)
    assert r["exclusions"] == 1 and r["exclusions_before_freeze_s"] == [-8.0]
    assert r["comebacks_after_verdict"] == 0 and r["out_after_verdict_s"] == 0.1


def test_an_exclusion_before_the_verdict_and_a_comeback_after_it_both_count():
    h = _h((0.0, ["w", "v"]), (12.0, ["w"]), (13.0, ["w", "v"]), (20.0, ["w"]),
           (21.0, ["w", "v"]))
    r = fence_bench._judge(h, "v", "u", t_stop=10.0, verdict=19.0)
    assert r["exclusions"] == 2 and r["exclusions_before_freeze_s"] == []
    assert r["comebacks_after_verdict"] == 1 and r["out_after_verdict_s"] == -7.0
