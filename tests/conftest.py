"""Suite-wide guards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest


@pytest.fixture(autouse=True)
async def _cancel_leftover_tasks() -> AsyncIterator[None]:
    """After each test, cancel what it left running, re-cancelling until it really ends.

    On Python 3.11 ``asyncio.wait_for`` can swallow a cancellation that races its inner
    future's completion (CPython gh-86296); a task that lost its cancel that way keeps running,
    and pytest-asyncio's loop teardown then waits for it forever — one failed test would hang
    the whole run. Re-cancelling (as ``emulator.informer.stop`` does) ends such tasks. Bounded:
    after 10 s the test errors, naming what would not stop.
    """
    yield
    current = asyncio.current_task()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        pending = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
        if not pending:
            return
        if loop.time() > deadline:
            pytest.fail(f"tasks would not stop after cancellation: {pending!r}"[:2000])
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.1)
