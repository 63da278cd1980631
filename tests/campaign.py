"""Simulator campaigns over a seed range nobody ran before, in parallel processes.

    python -m tests.campaign --seeds 1000 --base 3000000 [--jobs 2] [--out FILE]
                             [--minutes M] [--exclude TEST_ID_PREFIX ...] [TEST ...]

runs every simulator test that takes a ``sim_seed`` (under ``tests/sim`` unless TESTs name
files or test ids) over seeds ``base .. base+seeds-1``, in chunks, ``--jobs`` pytest processes
at a time. Each failing seed is written to ``--out`` as it is found, one line each: the test,
``--sim-seed=N`` to replay it, and the checker's message. At the end it prints, and appends to
the file, one line per test: seeds run, violations, CPU seconds; and the commit and date.
Tests marked ``scale`` (figures at 1,000 members and more) are left out unless named.
``--minutes``: a time box; no chunk starts after it, and the totals say what ran.
``make campaign SEEDS=... BASE=...`` calls it.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--sim-no-regressions"]


def collect(targets: list[str], named: bool) -> list[str]:
    """The test functions (ids without the seed) that take a sim_seed."""
    cmd = PYTEST + ["--collect-only", "--sim-seeds=1", *targets]
    if not named:
        cmd += ["-m", "not scale"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    tests = []
    for line in out.stdout.splitlines():
        if "[seed" in line and "::" in line:
            test = line.split("[seed")[0]
            if test not in tests:
                tests.append(test)
    if not tests:
        raise SystemExit(f"no simulator tests found in {targets}: {out.stdout[-500:]}")
    return tests


def run_chunk(test: str, base: int, count: int, extra: list[str]) -> tuple:
    """(test, seeds run, [(seed, message)], cpu seconds) of one pytest process."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "r.xml")
        log = os.path.join(tmp, "out.txt")
        with open(log, "w") as out:
            proc = subprocess.Popen(PYTEST + [test, f"--sim-seed-base={base}",
                                              f"--sim-seeds={count}", f"--junitxml={xml}",
                                              *extra],
                                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            # this process's own CPU (with --jobs > 1, os.times() would also count the
            # other chunks that ended meanwhile)
            _, status, usage = os.wait4(proc.pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
        if not os.path.exists(xml):
            with open(log) as f:
                tail = f.read()[-300:]
            code = os.waitstatus_to_exitcode(status)
            return test, 0, [(base, f"pytest did not run (exit {code}): {tail}")], cpu
        ran, failures = 0, []
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = case.get("name", "")
            if "[seed" not in name:
                continue
            # the seed, then any other parameter of the test ("[seed7-store]")
            seed = int(re.match(r"\d+", name.split("[seed")[1]).group())
            ran += 1
            bad = case.find("failure")
            if bad is None:
                bad = case.find("error")
            if bad is not None:
                text = (bad.get("message") or bad.text or "").strip().replace("\n", " ")
                failures.append((seed, text[:400]))
        return test, ran, failures, cpu


def code_root() -> Path:
    """The checkout whose code the campaign's pytest processes import. An editable install
    maps raygroups' packages to the checkout it was installed from, whatever the working
    directory: a worktree sharing another checkout's venv would test that checkout's code,
    as it stands, under this one's commit."""
    out = subprocess.run([sys.executable, "-c", "import raygroups.stack as s; print(s.__file__)"],
                         cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"raygroups does not import here: {out.stderr.strip()[-300:]}")
    return Path(out.stdout.strip()).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tests", nargs="*", help="test files or ids (default: tests/sim)")
    ap.add_argument("--seeds", type=int, default=1000, help="seeds per test (default 1000)")
    ap.add_argument("--base", type=int, required=True, help="first seed: one never run before")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="pytest processes")
    ap.add_argument("--chunk", type=int, default=100, help="seeds per pytest process")
    ap.add_argument("--minutes", type=float, default=None,
                    help="start no chunk after this long (the totals count what ran; chunks "
                         "go base by base, every test at each base, so counts stay even)")
    ap.add_argument("--out", default=None, help="failing seeds go here (default "
                    "campaign-results/<base>-<seeds>.txt)")
    ap.add_argument("--buggify", choices=("test", "on", "off"), default="test",
                    help="simulator perturbations: as each test asks (default), on, off")
    ap.add_argument("--exclude", action="append", default=[],
                    help="leave out tests whose id starts with this (repeatable)")
    a = ap.parse_args(argv)
    if code_root() != ROOT:
        raise SystemExit(f"this campaign would test the code in {code_root()}, not in {ROOT}: "
                         f"give {ROOT} a venv of its own (python3 -m venv .venv; "
                         f".venv/bin/pip install -e '.[test,fast]')")
    tests = [t for t in collect(a.tests or ["tests/sim"], named=bool(a.tests))
             if not any(t.startswith(x) for x in a.exclude)]
    out = Path(a.out or ROOT / "campaign-results" / f"{a.base}-{a.seeds}.txt")
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    header = (f"# campaign {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
              f"commit {commit}{' (with uncommitted changes)' if dirty else ''}, seeds "
              f"{a.base}..{a.base + a.seeds - 1}, buggify {a.buggify}, {len(tests)} tests\n")
    print(header, end="", flush=True)
    with out.open("a") as f:
        f.write(header)
    work = [(t, b, min(a.chunk, a.base + a.seeds - b))
            for b in range(a.base, a.base + a.seeds, a.chunk) for t in tests]
    totals = {t: [0, 0, 0.0] for t in tests}
    t0 = time.monotonic()
    extra = [f"--sim-buggify={a.buggify}"]
    deadline = None if a.minutes is None else t0 + 60 * a.minutes

    def chunk(test: str, base: int, count: int) -> Optional[tuple]:
        if deadline is not None and time.monotonic() > deadline:
            return None  # the time is up: this chunk does not start
        return run_chunk(test, base, count, extra)
    with ThreadPoolExecutor(a.jobs) as pool:
        futures = {pool.submit(chunk, t, b, n): b for t, b, n in work}
        for done, fut in enumerate(as_completed(futures), 1):
            if fut.result() is None:
                continue
            test, ran, failures, cpu = fut.result()
            tot = totals[test]
            tot[0] += ran
            tot[1] += len(failures)
            tot[2] += cpu
            with out.open("a") as f:  # each chunk on record: a stopped campaign still counts
                for seed, text in failures:
                    line = f"{test} --sim-seed={seed}: {text}\n"
                    f.write(line)
                    print("VIOLATION", line, end="", flush=True)
                f.write(f"# chunk {test} from {futures[fut]}: {ran} seeds, "
                        f"{len(failures)} violations, {cpu:.0f} CPU s\n")
            if done % max(1, len(work) // 20) == 0 or done == len(work):
                print(f"[{done}/{len(work)} chunks, {time.monotonic() - t0:.0f} s]", flush=True)
    lines = [f"{t}: {n} seeds, {v} violations, {cpu:.0f} CPU s\n"
             for t, (n, v, cpu) in totals.items()]
    seeds, bad = sum(x[0] for x in totals.values()), sum(x[1] for x in totals.values())
    lines.append(f"# total: {seeds} seeds over {len(tests)} tests, {bad} violations, "
                 f"{time.monotonic() - t0:.0f} s wall\n")
    with out.open("a") as f:
        f.writelines(lines)
    print("".join(lines), end="")
    print(f"results in {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
