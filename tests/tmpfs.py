"""A real tmpfs of a given size, mounted for one test (root only): full-disk tests."""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def small_tmpfs(mnt: Path, size: str, skip_refused: bool = False) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` ("256k", "1m") at ``mnt`` (created) for the block. Skips
    the test when not root; a mount refused fails it (``skip_refused``: skips it)."""
    if os.geteuid() != 0:
        pytest.skip(f"mounting a tmpfs needs root (mount -t tmpfs -o size={size})")
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode:
        if skip_refused:
            pytest.skip(f"mount -t tmpfs refused: {r.stderr.strip()}")
        raise RuntimeError(f"mount -t tmpfs refused: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)
