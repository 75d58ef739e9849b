"""The sooner-wins ``add_after`` the bridge's deadlines rely on (``/metrics``: test_telemetry)."""

from __future__ import annotations

import asyncio

from queue_bridge import queueing


async def test_a_sooner_add_after_replaces_a_later_one() -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    seen: list[str] = []

    async def handler(key: str) -> None:
        seen.append(key)

    queue.add_after("cp", 3600)  # a far deadline ...
    queue.add_after("cp", 0.01)  # ... must not postpone a retry
    queue.add_after("cp", 3600)  # and a later one does not replace the sooner
    worker = asyncio.create_task(queue.run(handler, workers=1))
    try:
        async with asyncio.timeout(5):
            await queue.join()
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert seen == ["cp"]
