"""Run a test scenario script in a process of its own (its own Ray: a driver holds one Ray
connection) and read the JSON it writes.

    r = run_json("tests.spark_session_run", tmp_path, "--jobs", "10")
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(module: str, tmp_path, *args: str, timeout: float = 600) -> dict:
    """``python -m module --json <file> *args`` from the repository, without the test run's
    ``RAY_ADDRESS``; the JSON it wrote. Fails with the script's output tails if it failed."""
    out = tmp_path / "run.json"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = subprocess.run([sys.executable, "-m", module, "--json", str(out), *args], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    print(run.stdout[-3000:])
    return json.loads(out.read_text())
