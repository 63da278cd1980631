"""The simulator campaign runner (tests/campaign.py) on a tiny range: it runs the chunks it
plans, reports per test, and with a time box (``--minutes``) starts no chunk after it and
counts only what ran."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST = "tests/sim/test_frag_fc_sim.py::test_a_stalled_receiver_that_crashes_does_not_block_the_others"


def campaign(tmp_path, *extra):
    out = tmp_path / "c.txt"
    run = subprocess.run([sys.executable, "-m", "tests.campaign", "--seeds", "6", "--chunk",
                          "2", "--base", "1", "--jobs", "1", "--out", str(out), *extra, TEST],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return out.read_text()


def test_the_runner_counts_every_seed_it_planned(tmp_path):
    assert f"{TEST}: 6 seeds, 0 violations" in campaign(tmp_path)


def test_a_time_box_starts_no_chunk_after_it_and_counts_what_ran(tmp_path):
    text = campaign(tmp_path, "--minutes", "0")  # over before the first chunk starts
    assert f"{TEST}: 0 seeds, 0 violations" in text and "# total: 0 seeds" in text
