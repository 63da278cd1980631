"""The pure helpers of bench/latency.py: the latency histogram, its percentiles (a missing
delivery counts as infinitely late) and the view change figures from 10 ms bins."""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import latency  # noqa: E402

MS = 1_000_000


def test_buckets_are_within_five_percent_and_ordered():
    for ns in (10_000, 12_345, 999_999, 7 * MS, 2_500 * MS):
        top = latency.bucket_top(latency.bucket(ns))
        assert ns <= top * 1.0000001 and top <= ns * latency.GROWTH * 1.0000001
    assert latency.bucket(5_000) == 0
    assert latency.bucket(MS) < latency.bucket(2 * MS) < latency.bucket(20 * MS)


def test_percentiles_pool_members_and_count_missing_as_infinitely_late():
    fast = [[latency.bucket(MS), 98]]
    slow = [[latency.bucket(50 * MS), 2]]
    h = latency.merge([fast, slow])
    assert sum(h.values()) == 100
    assert latency.percentile(h, 0.5) == latency.bucket_top(latency.bucket(MS)) / 1e6
    assert 50 <= latency.percentile(h, 0.99) <= 50 * latency.GROWTH
    assert latency.percentile(h, 0.99, missing=5) == math.inf  # 5 of 105 never came
    assert latency.percentile(h, 0.9, missing=5) < 1.1
    assert math.isnan(latency.percentile({}, 0.5))


def test_spike_takes_the_worst_member_per_bin_and_times_the_recovery():
    t0 = 1_000 * MS
    event = t0 + 1_000 * MS  # bin 100
    steady = [[k, 2 * MS, 10] for k in range(100)]
    calm = [[k, 2 * MS, 10] for k in range(100, 300)]
    a = steady + [[100, 40 * MS, 10], [101, 30 * MS, 10]] + [[k, 2 * MS, 10]
                                                               for k in range(102, 300)]
    b = steady + calm + [[104, 9 * MS, 1], [250, 9 * MS, 1]]
    s = latency.spike([a, b], event, t0)
    assert s["steady_p99_ms"] == 2.0
    assert s["max_after_ms"] == 40.0
    assert s["recovery_ms"] == 50.0  # from bin 105 on, 10 calm bins in a row; 250 is noise
    assert latency.spike([steady + calm], event, t0)["recovery_ms"] == 0.0
    stuck = steady + [[k, 50 * MS, 10] for k in range(100, 300)]
    assert latency.spike([stuck], event, t0)["recovery_ms"] == math.inf
