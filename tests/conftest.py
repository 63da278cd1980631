"""Shared test options: simulator seeds, deterministic property tests, and the lock that
keeps two heavy tests of ``make test``'s streams from running at once.

Every simulated test takes a ``sim_seed`` parameter: ``--sim-seeds=N`` runs N seeds (a
long campaign), ``--sim-seed=S`` replays one seed, ``--sim-seed-base=B`` shifts the range.
Each failing run prints ``reproduce with --sim-seed=S``. Seeds that once found a bug stay
as regression tests: ``@pytest.mark.regressions(S, ...)`` runs them besides the range (not
with ``--sim-seed``).
"""
import fcntl
import os
import time

import pytest


def pytest_addoption(parser):
    parser.addoption("--sim-seed", type=int, default=None, help="replay one simulator seed")
    parser.addoption("--sim-seeds", type=int, default=None,
                     help="simulator seeds per campaign test (default: the test's own)")
    parser.addoption("--sim-seed-base", type=int, default=0, help="first seed of a campaign")
    parser.addoption("--sim-no-regressions", action="store_true",
                     help="only the seed range, without the regression seeds (campaign runs)")
    parser.addoption("--sim-buggify", choices=("test", "on", "off"), default="test",
                     help="simulator perturbations (stack/sim_buggify.py): as each test asks "
                          "(default), on for every simulation, or off (does a failure need them?)")


def pytest_generate_tests(metafunc):
    if "sim_seed" in metafunc.fixturenames:
        opt = metafunc.config.getoption
        if opt("sim_seed") is not None:
            seeds = [opt("sim_seed")]
        else:
            marker = metafunc.definition.get_closest_marker("seeds")
            count = opt("sim_seeds") or (marker.args[0] if marker else 20)
            seeds = list(range(opt("sim_seed_base"), opt("sim_seed_base") + count))
            regressions = metafunc.definition.get_closest_marker("regressions")
            if regressions is not None and not opt("sim_no_regressions"):
                seeds += [s for s in regressions.args if s not in seeds]
        metafunc.parametrize("sim_seed", list(seeds), ids=lambda s: f"seed{s}")


WHEEL_SPARK = ("tests/integration/test_packaging.py::"
               "test_a_fresh_venv_runs_a_group_then_with_the_spark_extra_passes_the_spark_tests")
SPARK_TESTS = ("tests/integration/test_spark_views.py::",
               "tests/integration/test_spark_stream.py::")


def pytest_collection_modifyitems(config, items):
    """A run that includes the packaging test of the ``[spark]`` extra (the whole suite)
    runs the Spark tests of the shared RayDP session there, once, against the installed
    wheel, instead of here from the checkout as well (one RayDP session costs about 20 s, the tests about a minute). Run on
    their own, they run here."""
    if any(i.nodeid.startswith(WHEEL_SPARK) for i in items):
        spark = [i for i in items if i.nodeid.startswith(SPARK_TESTS)]
        if spark:
            config.hook.pytest_deselected(items=spark)
            items[:] = [i for i in items if not i.nodeid.startswith(SPARK_TESTS)]


HEAVY_WAITS: list = []  # (test id, seconds it waited for the heavy lock), this run's


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """``make test`` runs the integration tests in two streams side by side, and names in
    ``RAYGROUPS_HEAVY`` the files whose tests each keep more than a core busy: such a test
    holds the lock file ``RAYGROUPS_HEAVY_LOCK`` while it runs (its fixtures' set-up and
    tear-down too), so that two of them never run at once whichever stream reaches its own
    first. The seconds each waited for the lock are listed at the end of the run's
    summary."""
    path, heavy = os.environ.get("RAYGROUPS_HEAVY_LOCK"), os.environ.get("RAYGROUPS_HEAVY")
    if not (path and heavy and item.path.name in
            {f"test_{name}.py" for name in heavy.split()}):
        yield
        return
    with open(path, "a") as lock:
        t0 = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        HEAVY_WAITS.append((item.nodeid, round(time.monotonic() - t0, 1)))
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_terminal_summary(terminalreporter):
    for nodeid, waited in HEAVY_WAITS:
        terminalreporter.write_line(f"heavy lock: {nodeid} waited {waited} s")


def pytest_report_header(config):
    return ("hypothesis: derandomized (each property test draws from a fixed seed of its own; "
            "a failure prints its example)")


def pytest_configure(config):
    from raygroups.stack.sim import Simulation
    Simulation.force_buggify = {"test": None, "on": True, "off": False}[
        config.getoption("sim_buggify")]
    config.addinivalue_line("markers", "seeds(n): default number of simulator seeds")
    config.addinivalue_line("markers", "regressions(*seeds): seeds that once failed, always run")
    config.addinivalue_line("markers", "scale: figures at scale; campaigns leave them out")
    config.addinivalue_line("markers", "root: needs root (network namespaces, nftables)")


try:  # property tests draw the same examples on every run (no example database either)
    from hypothesis import settings as _hsettings
    _hsettings.register_profile("raygroups", derandomize=True, database=None)
    _hsettings.load_profile("raygroups")
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    pass
