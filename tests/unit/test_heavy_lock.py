"""``make test``'s lock for heavy tests (tests/conftest.py): a test of a file named in
``RAYGROUPS_HEAVY`` runs holding ``RAYGROUPS_HEAVY_LOCK``, any other test without it."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE = '''
import fcntl, os

def held() -> bool:
    with open(os.environ["RAYGROUPS_HEAVY_LOCK"], "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False

def test_probe():
    assert held() is {heavy}
'''


def test_a_heavy_file_s_test_holds_the_lock_and_another_does_not(tmp_path):
    (tmp_path / "test_big.py").write_text(PROBE.format(heavy=True))
    (tmp_path / "test_small.py").write_text(PROBE.format(heavy=False))
    env = dict(os.environ, RAYGROUPS_HEAVY="other big",
               RAYGROUPS_HEAVY_LOCK=str(tmp_path / "heavy.lock"))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "tests.conftest", "--rootdir", str(tmp_path),
                          str(tmp_path / "test_big.py"), str(tmp_path / "test_small.py")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "2 passed" in run.stdout, run.stdout[-3000:]
