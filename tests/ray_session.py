"""One local Ray session per test run, shared by every module that uses it:

    from ..ray_session import ray_session  # noqa: F401
    pytestmark = pytest.mark.usefixtures("ray_session")

``ray.init`` takes several seconds, so it happens once (``address="local"``: a fresh local
instance on 127.0.0.1 even if another Ray cluster runs on this machine); the fixture is
idempotent when several modules import it, and the session is shut down at the end of the
run by whoever started it. Import this module before ``ray`` (see below); tests/conftest.py
may import it to make that hold for every module.
"""
import os
import sys

import pytest

# Must be set before ray is first imported in the process (else the local node takes the
# host's external address instead of 127.0.0.1): import this module before ray.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
RAY_IMPORTED_EARLY = "ray" in sys.modules


@pytest.fixture(scope="session")
def ray_session():
    import ray
    started = False
    if not ray.is_initialized():
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 num_cpus=2, log_to_driver=False)
        started = True
    yield ray
    if started:
        ray.shutdown()
