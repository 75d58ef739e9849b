"""A keyed work queue: level-triggered controllers process each key one at a time.

Like client-go's workqueue (staging/src/k8s.io/client-go/util/workqueue/queue.go): a key added
while queued is queued once; a key added while being processed is processed again afterwards,
never concurrently; different keys run in parallel up to ``workers``. A failing handler is logged
and the key retried after ``retry_seconds`` (the rate limiter, simplified to a fixed delay).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

log = logging.getLogger("emulator.workqueue")


class WorkQueue(Generic[K]):
    def __init__(
        self,
        handler: Callable[[K], Awaitable[None]],
        *,
        workers: int = 4,
        retry_seconds: float = 0.2,
        name: str = "queue",
    ) -> None:
        self.handler = handler
        self.retry_seconds = retry_seconds
        self.name = name
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._active: set[K] = set()
        self._dirty: set[K] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: set[asyncio.Task[None]] = set()
        self._workers = workers

    def add(self, key: K) -> None:
        if key in self._active:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: K, seconds: float) -> None:
        async def later() -> None:
            await asyncio.sleep(seconds)
            self.add(key)

        timer = asyncio.create_task(later())
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self._workers)]

    async def stop(self) -> None:
        for task in [*self._tasks, *self._timers]:
            while not task.done():  # see emulator.informer.stop: a cancel can be swallowed
                task.cancel()
                await asyncio.wait({task}, timeout=0.1)

    @property
    def idle(self) -> bool:
        return not self._queued and not self._active and not self._dirty

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            try:
                await self.handler(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: sync of %s failed; retrying", self.name, key)
                self.add_after(key, self.retry_seconds)
            finally:
                self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)
