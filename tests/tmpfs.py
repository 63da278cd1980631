"""A real tmpfs of a given size, mounted for one test (root only): full-disk tests."""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def small_tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` ("256k", "1m") at ``mnt`` (created) for the block. Skips
    the test when not root (the machine resource it needs); a mount refused as root fails
    it."""
    if os.geteuid() != 0:
        pytest.skip(f"mounting a tmpfs needs root (mount -t tmpfs -o size={size})")
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"mount -t tmpfs refused: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)
