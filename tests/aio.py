"""Waiting for a condition inside an asyncio test: every wait is for a condition, with a
deadline that fails the test (never a wall-clock assertion)."""
from __future__ import annotations

import asyncio
from typing import Callable


async def until(pred: Callable[[], bool], timeout: float = 30.0, what: str = "condition",
                step: float = 0.01) -> None:
    """Until ``pred()``; an AssertionError naming ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, f"{what} not reached within {timeout}s"
        await asyncio.sleep(step)
