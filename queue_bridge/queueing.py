"""A de-duplicating work queue with per-key serialization, the shape of client-go's workqueue.

Watch handlers only ``add(key)``; workers re-read current state for that key and act
(level-triggered). The guarantees that make that safe:

- a key waiting in the queue is queued once, however many events arrive for it;
- a key is never processed by two workers at once — an ``add`` while it is being processed
  marks it dirty and it runs again right after, so the last event is never lost;
- a failing key is retried with capped exponential backoff, without blocking other keys;
- the queue is bounded: past ``max_keys`` distinct waiting keys an ``add`` is dropped and
  counted (one log line with the count once it drains, not one per key). Memory stays bounded
  under an event storm, and nothing important lives only here (see docs/architecture.md);
- no key is dropped for good: with a sweep source (:meth:`WorkQueue.set_sweep`, every key the
  owner knows), a sweep adds keys in batches — as many as fit now, the next batch each time the
  queue drains to half — and a sweep that saw drops is followed by another one. A resync that
  enqueues in a fixed order can therefore no longer lose the same tail on every pass;
- keys the owner marks urgent (``urgent``; the bridge: the keys that create Checkpoints) are
  handed to workers before the others, each group in its own arrival order, so a burst of
  evictions is not queued behind the follow-ups of the first ones. Only the order changes: every
  key still runs, and handlers are level-triggered. Work that may wait can wait for the urgent
  keys to drain (:meth:`WorkQueue.urgent_drained`, bounded).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from typing import Generic, TypeVar

from kontinue.kube import errors

K = TypeVar("K", bound=Hashable)

logger = logging.getLogger("kontinue.bridge.queue")


class WorkQueue(Generic[K]):
    def __init__(
        self,
        *,
        max_keys: int = 100_000,
        base_delay: float = 0.05,
        max_delay: float = 30.0,
        urgent: Callable[[K], bool] | None = None,
    ) -> None:
        self._waiting: collections.OrderedDict[K, None] = collections.OrderedDict()
        self._first: collections.OrderedDict[K, None] = collections.OrderedDict()  # urgent
        self._urgent = urgent
        self._no_urgent = asyncio.Event()
        self._no_urgent.set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._delayed: dict[K, asyncio.TimerHandle] = {}
        self._has_work = asyncio.Event()
        self._max_keys = max_keys
        self._base_delay = base_delay
        self._max_delay = max_delay
        self.dropped = 0
        self._lost = 0  # drops since the current sweep started (or ever, without a sweep)
        self._source: Callable[[], Iterable[K]] | None = None
        self._sweep: Iterator[K] | None = None
        self.added = 0
        self.retried = 0
        """Counts for the bridge's metrics (queue_bridge/instruments.py): keys newly queued,
        refused because the queue was full, and re-queued after a failure."""
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return len(self._waiting) + len(self._first)

    def add(self, key: K) -> None:
        """Queue ``key`` (no-op if already waiting; re-run later if being processed now)."""
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._waiting or key in self._first:
            return
        if len(self) >= self._max_keys:
            self.dropped += 1
            self._lost += 1
            return
        if self._urgent is not None and self._urgent(key):
            self._first[key] = None
            self._no_urgent.clear()
        else:
            self._waiting[key] = None
        self.added += 1
        self._idle.clear()
        self._has_work.set()

    def set_sweep(self, source: Callable[[], Iterable[K]]) -> None:
        """Every key the owner knows, in any order: what :meth:`sweep` and overflow re-add."""
        self._source = source

    def sweep(self) -> None:
        """Queue every key of the sweep source, in batches as the queue drains (module doc)."""
        if self._source is None:
            raise RuntimeError("WorkQueue.sweep without a source (set_sweep)")
        self._sweep = iter(self._source())
        self._lost = 0
        self._fill()

    def _fill(self) -> None:
        """Add the next batch of the current sweep; after a sweep that saw drops, start one."""
        while True:
            if self._sweep is None:
                if not self._lost:
                    return
                if self._source is None:
                    logger.warning("work queue full: %d adds dropped", self._lost)
                    self._lost = 0
                    return
                logger.warning(
                    "work queue full: %d adds dropped; sweeping every key again", self._lost
                )
                self._sweep = iter(self._source())
                self._lost = 0
            while len(self) < self._max_keys:
                try:
                    key = next(self._sweep)
                except StopIteration:
                    self._sweep = None
                    break
                self.add(key)
            else:
                return  # full again: the next batch when it drains

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
        while not self._waiting and not self._first:
            self._has_work.clear()
            await self._has_work.wait()
        if self._first:
            key, _ = self._first.popitem(last=False)
            if not self._first:
                self._no_urgent.set()
        else:
            key, _ = self._waiting.popitem(last=False)
        self._processing.add(key)
        return key

    def _done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)
        self._refill()
        self._check_idle()

    def _refill(self) -> None:
        if (self._sweep is not None or self._lost) and len(self) <= self._max_keys // 2:
            self._fill()

    def _check_idle(self) -> None:
        if len(self) == 0 and not self._processing and not self._delayed:
            self._idle.set()

    async def urgent_drained(self, within: float) -> None:
        """Return once no urgent key is waiting, or after ``within`` seconds at most."""
        if self._no_urgent.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._no_urgent.wait()

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
            # One turn of the event loop per key. A key decided from the caches alone awaits
            # nothing, and `_get` does not wait while keys are queued, so without this a worker
            # ran a whole sweep (~2.5 s at 10,000 pods) without letting the health probes, the
            # watches or the Lease renewal run.
            await asyncio.sleep(0)
            key = await self._get()
            try:
                await handler(key)
            except asyncio.CancelledError:
                self._done(key)
                raise
            except Exception as exc:
                delay = self.backoff(key)
                self._failures[key] = self._failures.get(key, 0) + 1
                self.retried += 1
                if isinstance(exc, errors.ApiError):
                    # The API said no (a stale write's 409, a 429, a 5xx): expected now and
                    # then, retried; one line, no traceback to bury the real problems in.
                    logger.info("handling %r: %s; retrying in %.2fs", key, exc, delay)
                else:
                    logger.exception("handling %r failed; retrying in %.2fs", key, delay)
                self._processing.discard(key)
                self._dirty.discard(key)
                self.add_after(key, delay)
                self._refill()
                continue
            self._failures.pop(key, None)
            self._done(key)
