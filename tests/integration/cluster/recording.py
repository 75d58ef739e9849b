"""Test helpers: a background watch recording every pod event (the order of writes is what the
tests assert) and a wait for a Job pod that is really running."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from emulator import cluster, informer
from emulator.apiserver import server
from kontinue import keys
from kontinue.kube import resources

Object = dict[str, Any]


class PodEvents:
    """``async with PodEvents(api) as events``; ``events.of(name)`` lists that pod's versions."""

    def __init__(
        self,
        api: server.ApiServer,
        namespace: str = "default",
        *,
        resource: resources.Resource = resources.PODS,
    ) -> None:
        self.client = api.client("admin")
        self.namespace = namespace
        self.resource = resource
        self.events: list[tuple[str, Object]] = []
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def _run(self) -> None:
        listed = await self.client.list(self.resource, namespace=self.namespace)
        version = listed["metadata"]["resourceVersion"]
        self._ready.set()
        async for event in self.client.watch(
            self.resource, namespace=self.namespace, resource_version=version
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


async def running_pod(c: cluster.Cluster, job: str, *, progress: int = 3) -> Object:
    """Wait until one pod of ``job`` is Running and has printed ``progress`` steps."""

    def progressed(pod: Object | None) -> bool:
        if pod is None or not cluster.pod_phase("Running")(pod):
            return False
        container = c.container(pod, "trainer")
        if container is None or not container.spec.log_path.exists():
            return False
        return container.spec.log_path.read_text().count("PROGRESS ") >= progress

    for _ in range(500):
        pods = await c.pods(labels={keys.JOB_NAME_LABEL: job})
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if live:
            found = await c.wait_for(
                resources.PODS, live[0]["metadata"]["name"], "default", progressed, timeout=30
            )
            assert found is not None
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"no pod of {job} appeared")
