"""The pure helpers of bench/workqueue.py: counting the fsyncs in strace's output, fsyncs
per message, and the durable targets' verdicts."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import workqueue  # noqa: E402

STRACE = """\
101 1700000000.100000 fdatasync(12) = 0
102 1700000000.200000 fsync(7)       = 0
101 1700000001.000000 fdatasync(12 <unfinished ...>
103 1700000001.100000 openat(AT_FDCWD, "/x", O_RDONLY) = 5
101 1700000001.300000 <... fdatasync resumed>) = 0
104 1700000002.000000 fdatasync(3) = 0
garbage line
104 notatime fsync(3) = 0
"""


def test_strace_syncs_counts_calls_in_the_window_once():
    lines = STRACE.splitlines()
    assert workqueue.strace_syncs(lines, 0, 1e12) == 4       # the resumed half not again
    assert workqueue.strace_syncs(lines, 1700000000.0, 1700000001.0) == 2   # [t0, t1)
    assert workqueue.strace_syncs(lines, 1700000001.0, 1700000002.0) == 1
    assert workqueue.strace_syncs(lines, 1700000003.0, 1700000004.0) == 0
    assert workqueue.strace_syncs([], 0, 1e12) == 0


def test_per_message():
    assert workqueue.per_message(300, 600) == 0.5
    assert workqueue.per_message(None, 600) is None
    assert workqueue.per_message(5, 0) is None


def test_durable_verdicts():
    rabbit = {"rate": 1000.0, "p50": 4.0}
    v = workqueue.durable_verdicts({"rate": 1000.0, "p50": 4.0}, rabbit)
    assert [(w, r, t, ok) for w, r, t, ok in v] == [
        ("throughput", 1.0, ">= 1.0x", "met"), ("p50 latency", 1.0, "<= 1.0x", "met")]
    v = workqueue.durable_verdicts({"rate": 900.0, "p50": 5.0}, rabbit)
    assert [x[3] for x in v] == ["NOT met", "NOT met"]
    assert v[0][1] == 0.9 and v[1][1] == 1.25
    v = workqueue.durable_verdicts({"rate": 900.0, "p50": 5.0}, {"rate": 0, "p50": None})
    assert [x[1] for x in v] == [None, None] and all(x[3].startswith("n/a") for x in v)


def test_fmt_syncs():
    assert workqueue.fmt_syncs(None) == "n/a" and workqueue.fmt_syncs(0.125) == "0.12"
