"""The package as a user installs it: a wheel built from this checkout, installed (not
editable) into a fresh virtual environment. Without extras the core pulls no Spark; the
member actors, ``Group.launch`` and the CLI work from it on a Ray of its own; importing the
Spark integration says which extra it needs. With ``[spark]`` added to it the Spark tests of
the shared RayDP session (tests/integration/test_spark_views.py and test_spark_stream.py)
pass against the installed wheel: the whole suite runs them there, once, rather than from
the editable checkout (tests/conftest.py). Packaging mistakes (a module left out of the
wheel, an undeclared import, an extra that misses a dependency) fail here, not at a user's."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SMOKE = r"""
import importlib.util, os, sys
import raygroups
assert os.path.dirname(raygroups.__file__).startswith(sys.prefix), raygroups.__file__
assert importlib.util.find_spec("pyspark") is None and importlib.util.find_spec("raydp") is None
try:
    import raygroups.integration
    raise SystemExit("raygroups.integration imported without pyspark")
except ImportError as e:
    assert "raygroups[spark]" in str(e), e
from raygroups.actors.ray_compat import init_local
ray = init_local(num_cpus=2, _temp_dir=sys.argv[1], object_store_memory=100 * 1024 * 1024)
from raygroups.actors import Group
g = Group.launch("pkg", members=3)
assert len(g.view().members) == 3, g.view()
g.send(b"hello")
g.shutdown()
ray.shutdown()
print("OK", raygroups.__version__)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    REPO], check=True, capture_output=True, text=True, timeout=600)
    [whl] = glob.glob(str(out / "raygroups-*.whl"))
    return whl


def test_the_wheel_holds_every_package_and_declares_its_extras(wheel):
    import raygroups
    names = zipfile.ZipFile(wheel).namelist()
    assert os.path.basename(wheel).startswith(f"raygroups-{raygroups.__version__}-")
    for pkg in ("raygroups", "raygroups/stack", "raygroups/stack/discovery",
                "raygroups/stack/runtime", "raygroups/stack/workqueue", "raygroups/actors",
                "raygroups/integration"):
        assert f"{pkg}/__init__.py" in names, pkg
    assert "raygroups/py.typed" in names
    sources = [n for n in names if n.endswith(".py")]
    for top, pkg in (("stack", "raygroups/stack"), ("actors", "raygroups/actors"),
                     ("integration", "raygroups/integration")):
        for path in glob.glob(os.path.join(REPO, top, "**", "*.py"), recursive=True):
            rel = os.path.relpath(path, os.path.join(REPO, top)).replace(os.sep, "/")
            assert f"{pkg}/{rel}" in sources, f"{pkg}/{rel} is not in the wheel"
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    lines = zipfile.ZipFile(wheel).read(meta).decode().splitlines()
    requires = [x.split(":", 1)[1].strip() for x in lines if x.startswith("Requires-Dist:")]
    core = [r for r in requires if "extra ==" not in r]
    assert not any(r.startswith(("pyspark", "raydp", "boto3")) for r in core), core
    assert any(r.startswith("aiohttp") for r in core) and any(r.startswith("ray") for r in core)
    for extra, pkg in (("spark", "pyspark"), ("spark", "raydp"), ("s3", "boto3"),
                       ("fast", "uvloop")):
        assert any(r.startswith(pkg) and f'extra == "{extra}"' in r for r in requires), \
            (extra, pkg)


def fresh_venv(tmp_path, *requirements: str):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip_install(venv, *requirements)
    return venv


def pip_install(venv, *requirements: str) -> None:
    """``pip install`` without compiling every module to bytecode up front (Ray's and
    Spark's thousands of modules took pip 18 of its 43 s here); what runs compiles its own."""
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-compile",
                          *requirements],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-2000:]


SPARK_TESTS = ["tests/integration/test_spark_views.py",
               "tests/integration/test_spark_stream.py"]


def test_a_fresh_venv_runs_a_group_then_with_the_spark_extra_passes_the_spark_tests(
        wheel, tmp_path):
    """Without extras (``pip install raygroups``): the core pulls no Spark, a group runs on
    a Ray of its own, the CLI answers. Then ``pip install 'raygroups[spark]'`` (the wheel)
    and the test tools into the same environment, nothing else; the Spark tests run from a
    copy of tests/ outside the checkout, so that ``import raygroups`` (in the driver, the
    member actors and Spark's Python workers) can only find the wheel. One environment for
    both halves: installing Ray twice cost the suite a minute."""
    venv = fresh_venv(tmp_path, wheel)
    ray_tmp = tempfile.mkdtemp(prefix="rgpkg-", dir="/tmp")  # short: Ray's socket paths
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    run = subprocess.run([str(venv / "bin" / "python"), "-c", SMOKE, ray_tmp], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "OK" in run.stdout, (run.stdout[-2000:], run.stderr[-3000:])
    version = subprocess.run([str(venv / "bin" / "raygroups"), "--version"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=120)
    import raygroups
    assert version.stdout.strip() == f"raygroups {raygroups.__version__}", version

    pip_install(venv, f"{wheel}[spark]", "pytest", "hypothesis")
    python = str(venv / "bin" / "python")
    suite = tmp_path / "suite"
    shutil.copytree(os.path.join(REPO, "tests"), suite / "tests",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    where = subprocess.run([python, "-c", "import raygroups, sys; print(raygroups.__file__)"],
                           cwd=suite, env=env, capture_output=True, text=True, timeout=120)
    assert where.stdout.strip().startswith(str(venv)), where
    xml = tmp_path / "spark.xml"
    run = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SPARK_TESTS,
                          f"--junitxml={xml}"], cwd=suite, env=env, capture_output=True,
                         text=True, timeout=1200)
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-2000:])
    suites = ET.parse(xml).getroot()
    suites = suites if suites.tag == "testsuite" else suites.find("testsuite")
    ran = int(suites.get("tests")) - int(suites.get("skipped"))
    collected = sum(1 for path in SPARK_TESTS for line in open(os.path.join(REPO, path))
                    if line.startswith("def test_"))
    assert ran == collected and int(suites.get("failures")) == int(suites.get("errors")) == 0, \
        (ran, collected, run.stdout[-2000:])
