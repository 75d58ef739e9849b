"""The suite's one waiting helper: poll a condition until it holds, within a bound.

A bound, not a timing: ``within`` only limits how long a broken run waits before it fails with
``what`` in the message. ``check`` may be a plain function or a coroutine function.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest


async def eventually(
    check: Callable[[], object],
    *,
    within: float = 10.0,
    what: str = "condition",
    every: float = 0.02,
) -> Any:
    """Poll ``check`` every ``every`` seconds until it returns (or awaits to) something truthy,
    and return that."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            pytest.fail(f"{what} not met within {within}s")
        await asyncio.sleep(every)
