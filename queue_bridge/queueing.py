"""A de-duplicating work queue with per-key serialization, the shape of client-go's workqueue.

Watch handlers only ``add(key)``; workers re-read current state for that key and act
(level-triggered). The guarantees that make that safe:

- a key waiting in the queue is queued once, however many events arrive for it;
- a key is never processed by two workers at once — an ``add`` while it is being processed
  marks it dirty and it runs again right after, so the last event is never lost;
- a failing key is retried with capped exponential backoff, without blocking other keys;
- the queue is bounded: past ``max_keys`` distinct waiting keys an ``add`` is dropped and
  counted, and the periodic resync picks the key up again. Memory stays bounded under an event
  storm, and nothing important lives only here (see docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from kontinue.kube import errors

K = TypeVar("K", bound=Hashable)

logger = logging.getLogger("kontinue.queue")


class WorkQueue(Generic[K]):
    def __init__(
        self,
        *,
        max_keys: int = 100_000,
        base_delay: float = 0.05,
        max_delay: float = 30.0,
    ) -> None:
        self._waiting: collections.OrderedDict[K, None] = collections.OrderedDict()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._delayed: dict[K, asyncio.TimerHandle] = {}
        self._has_work = asyncio.Event()
        self._max_keys = max_keys
        self._base_delay = base_delay
        self._max_delay = max_delay
        self.dropped = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, key: K) -> None:
        """Queue ``key`` (no-op if already waiting; re-run later if being processed now)."""
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._waiting:
            return
        if len(self._waiting) >= self._max_keys:
            self.dropped += 1
            logger.warning(
                "work queue full (%d keys): dropped %r until resync", self._max_keys, key
            )
            return
        self._waiting[key] = None
        self._idle.clear()
        self._has_work.set()

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds; of two pending delays the sooner one wins.

        As client-go's delaying queue: a far deadline already scheduled must not postpone a
        retry after a failure (which would lose the key until that deadline).
        """
        loop = asyncio.get_running_loop()
        pending = self._delayed.get(key)
        if pending is not None:
            if pending.when() <= loop.time() + delay:
                return
            pending.cancel()
            del self._delayed[key]
        self._idle.clear()

        def fire() -> None:
            self._delayed.pop(key, None)
            self.add(key)
            self._check_idle()

        self._delayed[key] = loop.call_later(delay, fire)

    def backoff(self, key: K) -> float:
        """The delay before the next retry of ``key``: base * 2^failures, capped."""
        return float(min(self._max_delay, self._base_delay * 2 ** self._failures.get(key, 0)))

    async def _get(self) -> K:
        while not self._waiting:
            self._has_work.clear()
            await self._has_work.wait()
        key, _ = self._waiting.popitem(last=False)
        self._processing.add(key)
        return key

    def _done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)
        self._check_idle()

    def _check_idle(self) -> None:
        if not self._waiting and not self._processing and not self._delayed:
            self._idle.set()

    async def join(self) -> None:
        """Wait until nothing is waiting, processing or scheduled for later (tests, shutdown)."""
        await self._idle.wait()

    async def run(self, handler: Callable[[K], Awaitable[None]], *, workers: int = 4) -> None:
        """Process keys with ``workers`` concurrent workers until cancelled."""
        async with asyncio.TaskGroup() as group:
            for index in range(workers):
                group.create_task(self._work(handler), name=f"worker-{index}")

    async def _work(self, handler: Callable[[K], Awaitable[None]]) -> None:
        while True:
            key = await self._get()
            try:
                await handler(key)
            except asyncio.CancelledError:
                self._done(key)
                raise
            except Exception as exc:
                delay = self.backoff(key)
                self._failures[key] = self._failures.get(key, 0) + 1
                if isinstance(exc, errors.ApiError):
                    # The API said no (a stale write's 409, a 429, a 5xx): expected now and
                    # then, retried; one line, no traceback to bury the real problems in.
                    logger.info("handling %r: %s; retrying in %.2fs", key, exc, delay)
                else:
                    logger.exception("handling %r failed; retrying in %.2fs", key, delay)
                self._processing.discard(key)
                self._dirty.discard(key)
                self.add_after(key, delay)
                continue
            self._failures.pop(key, None)
            self._done(key)
