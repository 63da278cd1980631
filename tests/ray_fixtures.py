"""One local Ray session per test run, shared by every test module that needs Ray.

Use it from a test module with

    pytest_plugins = ["tests.ray_fixtures"]

and ask for the ``ray_session`` fixture (session scoped): the first test that needs it starts
Ray (about 7 s), the end of the run shuts it down. Ray stays on loopback
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` before ray is imported, ``_node_ip_address=
"127.0.0.1"``), starts no dashboard, and ``address="local"`` makes sure it is a fresh cluster
of this run, never one somebody started with ``ray start`` on the machine.

``ray_session.address`` is the GCS address for second drivers: start them with
``ray_session.env()`` as their environment and ``ray.init(address=...)`` (see
``driver_subprocess``). The fixture module imports nothing from raygroups.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before ray is imported

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class RaySession:
    address: str
    """GCS address (``127.0.0.1:port``) for ``ray.init(address=...)`` in other processes."""
    node_id: str

    def env(self, **extra: str) -> dict:
        """An environment for a second driver or a CLI subprocess on this session."""
        env = dict(os.environ)
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        env["RAY_ADDRESS"] = self.address
        env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
        env.update(extra)
        return env

    def run_driver(self, code: str, timeout: float = 120.0,
                   args: Optional[list] = None) -> subprocess.CompletedProcess:
        """Run ``code`` as a second driver (a fresh Python process) on this session."""
        return subprocess.run([sys.executable, "-c", code, *(args or [])], env=self.env(),
                              capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.fixture(scope="session")
def ray_session():
    import ray
    # ray reads the variable when it is first imported; if a test module imported ray before
    # this module set it, set Ray's constant too (else Ray rewrites 127.0.0.1 to the host's
    # external address)
    from ray._private import ray_constants
    ray_constants.ENABLE_RAY_CLUSTER = False
    started = False
    if not ray.is_initialized():
        # 4 logical CPUs (on 2 cores): RayDP's two Spark executors hold one each for the
        # rest of the run (tests/spark_fixtures.py), member actors take none
        # metrics reach Ray's Prometheus endpoint every second (10 s by default), for the
        # test that reads them back
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 num_cpus=4, object_store_memory=200 * 1024 * 1024, log_to_driver=False,
                 configure_logging=False, logging_level="WARNING",
                 _system_config={"metrics_report_interval_ms": 1000})
        started = True
    ctx = ray.get_runtime_context()
    session = RaySession(address=ctx.gcs_address, node_id=ctx.get_node_id())
    yield session
    if started:
        ray.shutdown()
