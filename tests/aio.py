"""Waiting for a condition inside a test: every wait is for a condition, with a deadline that
fails the test (never a wall-clock assertion). ``until`` in asyncio tests, ``wait_until`` in
blocking ones (Ray calls, Spark)."""
from __future__ import annotations

import asyncio
import time
from typing import Callable


async def until(pred: Callable[[], bool], timeout: float = 30.0, what: str = "condition",
                step: float = 0.01) -> None:
    """Until ``pred()``; an AssertionError naming ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, f"{what} not reached within {timeout}s"
        await asyncio.sleep(step)


def wait_until(pred: Callable[[], bool], what: str = "condition", timeout: float = 30.0,
               step: float = 0.05) -> None:
    """``until`` for blocking tests: polls ``pred()`` every ``step`` seconds."""
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"{what} not reached within {timeout}s"
        time.sleep(step)
