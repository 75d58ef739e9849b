"""A deployable's set of watch caches: made with one typed options object, run as one.

The webhook's and the bridge's caches differ only in which resources they watch and how they
index them; how each cache talks to the API (resync period, page size, timeouts, backoff) is one
:class:`CacheOptions` for the whole set, which tests shorten. :meth:`CacheSet.add` returns the
typed cache; :meth:`CacheSet.running` runs every cache for a block, each as a supervised root
task when a :class:`kontinue.supervision.Supervisor` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any, Self, TypeVar

import pydantic
from opentelemetry import metrics

from kontinue import supervision
from kontinue.kube import api as kube_api
from kontinue.kube import backoff, watching
from kontinue.kube.resources import Resource

M = TypeVar("M", bound=pydantic.BaseModel)


@dataclasses.dataclass(frozen=True)
class CacheOptions:
    """How every cache of a set lists and watches (:class:`kontinue.kube.watching.WatchCache`).

    Production keeps the defaults except ``resync_seconds`` (a setting of each deployable);
    tests shorten ``backoff`` and fix ``rng``.
    """

    resync_seconds: float | None = 300.0
    page_size: int = 500
    watch_timeout_seconds: float = 300.0
    request_timeout_seconds: float = 60.0
    backoff: backoff.Backoff | None = None
    rng: random.Random | None = None


class CacheSet:
    def __init__(
        self,
        api: kube_api.Api,
        *,
        options: CacheOptions | None = None,
        meter: metrics.Meter | None = None,
    ) -> None:
        self._api = api
        self.options = options or CacheOptions()
        self._meter = meter
        self.all: list[watching.WatchCache[Any]] = []

    def add(
        self,
        resource: Resource,
        model: type[M],
        *,
        label_selector: Mapping[str, str] | str | None = None,
        transform: watching.Transform | None = None,
        packed: bool = False,
    ) -> watching.WatchCache[M]:
        """A new cache of ``resource`` as ``model``, run with the rest of the set (``transform``
        and ``packed``: :class:`kontinue.kube.watching.WatchCache`)."""
        o = self.options
        cache = watching.WatchCache(
            self._api,
            resource,
            model=model,
            label_selector=label_selector,
            resync_seconds=o.resync_seconds,
            meter=self._meter,
            page_size=o.page_size,
            watch_timeout_seconds=o.watch_timeout_seconds,
            request_timeout_seconds=o.request_timeout_seconds,
            backoff=o.backoff,
            rng=o.rng,
            transform=transform,
            packed=packed,
        )
        self.all.append(cache)
        return cache

    @property
    def synced(self) -> bool:
        return all(c.synced for c in self.all)

    async def wait_synced(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            for cache in self.all:
                await cache.wait_synced()

    @contextlib.asynccontextmanager
    async def running(
        self, supervisor: supervision.Supervisor | None = None
    ) -> AsyncIterator[None]:
        """Run every cache as a task for the duration of the block; stop and reap them after.

        With a ``supervisor`` each cache is a root task: one that ends before the block does
        ends the process instead of leaving a cache that no longer follows the cluster.
        """
        spawn = supervisor.spawn if supervisor is not None else _spawn
        tasks = [spawn(c.run(), name=f"watch:{c.resource}") for c in self.all]
        try:
            yield
        finally:
            if supervisor is not None:
                supervisor.retire(tasks)
            for cache in self.all:
                await cache.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _spawn(coro: Any, *, name: str) -> asyncio.Task[None]:
    return asyncio.create_task(coro, name=name)


class Backed:
    """Base of a deployable's caches object: everything about its :class:`CacheSet` as a whole.

    A subclass makes ``self.cache_set`` and its caches and indexes; this answers ``all``,
    ``synced``, ``wait_synced`` and ``running`` (yielding the subclass itself) for both
    deployables the same way.
    """

    cache_set: CacheSet

    @property
    def all(self) -> list[watching.WatchCache[Any]]:
        return self.cache_set.all

    @property
    def synced(self) -> bool:
        return self.cache_set.synced

    async def wait_synced(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self.cache_set.wait_synced(timeout)

    @contextlib.asynccontextmanager
    async def running(
        self, supervisor: supervision.Supervisor | None = None
    ) -> AsyncIterator[Self]:
        """Run every cache for the duration of the block (:meth:`CacheSet.running`)."""
        async with self.cache_set.running(supervisor):
            yield self
