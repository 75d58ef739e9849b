"""A background watch that records every pod event (the order of writes is what tests assert)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from emulator import informer
from emulator.apiserver import server
from kontinue.kube import resources

Object = dict[str, Any]


class PodEvents:
    """``async with PodEvents(api) as events``; ``events.of(name)`` lists that pod's versions."""

    def __init__(self, api: server.ApiServer, namespace: str = "default") -> None:
        self.client = api.client("admin")
        self.namespace = namespace
        self.events: list[tuple[str, Object]] = []
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def _run(self) -> None:
        listed = await self.client.list(resources.PODS, namespace=self.namespace)
        version = listed["metadata"]["resourceVersion"]
        self._ready.set()
        async for event in self.client.watch(
            resources.PODS, namespace=self.namespace, resource_version=version
        ):
            if event["type"] != "BOOKMARK":
                self.events.append((event["type"], event["object"]))

    async def __aenter__(self) -> PodEvents:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self._ready.wait(), timeout=10)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            await informer.stop([self._task])  # re-cancels: 3.11 wait_for may swallow one

    def of(self, name: str) -> list[tuple[str, Object]]:
        return [(kind, obj) for kind, obj in self.events if obj["metadata"]["name"] == name]
