"""The watch cache against the project's API emulator, through kubernetes-asyncio over HTTP.

Issue 3's "Done when": the cache loses no event across a dropped connection and across a 410
(N objects changed while it was disconnected all arrive, exactly once, and its final state is the
server's list), bookmarks advance the version a watch resumes from, and selectors filter. The
emulator's store keeps one resourceVersion counter and a bounded history like etcd; ``compact()``
makes older versions 410, ``drop_watches()`` aborts every open stream, and a watch fault keeps
the cache disconnected while the objects change.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any, Generic, TypeVar

import pydantic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics import export as metrics_export

from emulator.apiserver import server
from kontinue.kube import api, client, resources, watching
from kontinue.models import core, kueue
from tests import fixtures
from tests.waiting import eventually

FAST = watching.Backoff(initial=0.01, factor=2.0, cap=0.05, jitter=0.5)
CQ = resources.CLUSTER_QUEUES
ENABLED = {"kontinue.dev/enabled": "true"}

M = TypeVar("M", bound=pydantic.BaseModel)


class Emulated:
    """One emulator with the ClusterQueue CRD installed, a remote ``Api`` and an admin client."""

    def __init__(self, emulator: server.ApiServer, kube: api.Api) -> None:
        self.emulator = emulator
        self.kube = kube
        self.admin = emulator.client()
        self.metrics = metrics_export.InMemoryMetricReader()
        self.meter = MeterProvider(metric_readers=[self.metrics]).get_meter("test")

    async def put_queue(self, name: str, *, labels: dict[str, str] | None = None) -> None:
        body = {
            "apiVersion": CQ.api_version,
            "kind": "ClusterQueue",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"cohortName": "team"},
        }
        await self.admin.create(CQ, body)

    async def relabel(self, resource: resources.Resource, name: str, **labels: str | None) -> None:
        await self.admin.patch(
            resource, name, {"metadata": {"labels": labels}}, content_type=api.MERGE_PATCH
        )

    async def state(
        self, resource: resources.Resource, **selectors: Any
    ) -> dict[tuple[str, str], str]:
        """The server's list: (namespace, name) -> resourceVersion."""
        listed = await self.admin.list(resource, **selectors)
        return {
            (o["metadata"].get("namespace", ""), o["metadata"]["name"]): o["metadata"][
                "resourceVersion"
            ]
            for o in listed["items"]
        }

    async def current_version(self) -> str:
        listed = await self.admin.list(resources.NAMESPACES)
        return str(listed["metadata"]["resourceVersion"])

    def counter(self, name: str, attribute: str) -> dict[str, int]:
        """One counter's totals by one attribute, e.g. relists by ``reason``."""
        totals: collections.Counter[str] = collections.Counter()
        data = self.metrics.get_metrics_data()
        assert data is not None
        for resource_metrics in data.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != name:
                        continue
                    for point in metric.data.data_points:
                        assert isinstance(point, metrics_export.NumberDataPoint)
                        totals[str((point.attributes or {}).get(attribute))] += int(point.value)
        return dict(totals)

    def cache(self, resource: resources.Resource, *, model: type[M], **kwargs: Any) -> Recorded[M]:
        cache = watching.WatchCache(
            self.kube,
            resource,
            model=model,
            backoff=FAST,
            rng=random.Random(3),
            meter=self.meter,
            **kwargs,
        )
        return Recorded(cache)


class Recorded(Generic[M]):
    """A cache running as a task, with every event it delivered."""

    def __init__(self, cache: watching.WatchCache[M]) -> None:
        self.cache = cache
        self.events: list[watching.Event[M]] = []
        cache.subscribe(self.events.append)
        self.task = asyncio.create_task(cache.run())

    def count(self, type_: str) -> dict[str, int]:
        return dict(collections.Counter(_name(e.obj) for e in self.events if e.type == type_))

    def state(self) -> dict[tuple[str, str], str]:
        return {_key(o): _meta(o).resource_version or "" for o in self.cache.items()}


def _meta(obj: pydantic.BaseModel) -> Any:
    return obj.metadata  # type: ignore[attr-defined]


def _name(obj: pydantic.BaseModel) -> str:
    return str(_meta(obj).name)


def _key(obj: pydantic.BaseModel) -> tuple[str, str]:
    return (_meta(obj).namespace or "", _name(obj))


@contextlib.asynccontextmanager
async def _emulated(*, bookmark_interval: float) -> AsyncIterator[Emulated]:
    async with server.ApiServer(bookmark_interval=bookmark_interval) as emulator:
        crd = fixtures.load_one(fixtures.UPSTREAM / "kueue/crds/kueue.x-k8s.io_clusterqueues.yaml")
        emulator.install_crd(crd)
        api_client = await client.api_client_from_dict(emulator.kubeconfig())
        try:
            yield Emulated(emulator, api.Api(api_client))
        finally:
            await api_client.close()


@pytest.fixture
async def emulated(request: pytest.FixtureRequest) -> AsyncIterator[Emulated]:
    """Bookmarks every minute, as upstream, unless the test asks (indirect param) for sooner.

    Only the bookmark test wants them often: elsewhere they would only add noise to the
    streams whose events the tests count.
    """
    interval = float(getattr(request, "param", 60.0))
    async with _emulated(bookmark_interval=interval) as env:
        yield env


@pytest.fixture
async def caches(emulated: Emulated) -> AsyncIterator[list[Recorded[Any]]]:
    """Caches a test starts; each is stopped, and must return cleanly, at the end."""
    started: list[Recorded[Any]] = []
    yield started
    for recorded in started:
        await recorded.cache.stop()
        await recorded.task


async def _changed_while_disconnected(
    env: Emulated, rec: Recorded[kueue.ClusterQueue], *, n: int, compact: bool
) -> dict[tuple[str, str], str]:
    """Cut the watch, keep it refused while objects change, then let the cache back in."""
    refused = env.emulator.faults.add(verb="watch", resource="clusterqueues", count=None)
    env.emulator.drop_watches()
    await eventually(lambda: refused.fired >= 1)  # the cache tried, and is now disconnected
    for i in range(0, n, 2):  # half of them change, half stay as they were
        await env.relabel(CQ, f"q{i:02}", round="2")
    await env.admin.delete(CQ, "q01")
    await env.put_queue("new")
    if compact:
        env.emulator.compact()
    expected = await env.state(CQ)
    env.emulator.faults.remove(refused)
    await eventually(lambda: rec.state() == expected)
    return expected


@pytest.mark.parametrize("compact", [False, True], ids=["dropped", "410"])
async def test_no_event_is_lost_while_disconnected(
    emulated: Emulated, caches: list[Recorded[Any]], compact: bool
) -> None:
    n = 30
    for i in range(n):
        await emulated.put_queue(f"q{i:02}")
    rec = emulated.cache(CQ, model=kueue.ClusterQueue)
    caches.append(rec)
    await rec.cache.wait_synced(timeout=10)

    expected = await _changed_while_disconnected(emulated, rec, n=n, compact=compact)

    changed = {f"q{i:02}" for i in range(0, n, 2)}
    assert rec.state() == expected
    assert rec.count("MODIFIED") == dict.fromkeys(changed, 1)
    assert rec.count("DELETED") == {"q01": 1}
    assert rec.count("ADDED") == {**{f"q{i:02}": 1 for i in range(n)}, "new": 1}
    assert rec.count("SYNC") == {}
    assert all(q.metadata.label("round") == "2" for q in rec.cache.items() if q.name in changed)
    relists = emulated.counter("kontinue.watch.relists", "reason")
    # A dropped stream resumes from the last version; a 410 is the only thing that re-lists.
    assert relists == ({"initial": 1, "gone": 1} if compact else {"initial": 1})
    assert rec.cache.resource_version == await emulated.current_version()


@pytest.mark.parametrize("emulated", [0.2], indirect=True, ids=["bookmarks-every-200ms"])
async def test_bookmarks_move_the_resume_point_past_a_compaction(
    emulated: Emulated, caches: list[Recorded[Any]]
) -> None:
    await emulated.put_queue("a")
    rec = emulated.cache(CQ, model=kueue.ClusterQueue)
    caches.append(rec)
    await rec.cache.wait_synced(timeout=10)
    listed_at = rec.cache.resource_version

    for name in ("x", "y", "z"):  # writes elsewhere move the global version, not our objects
        await emulated.admin.create(resources.NAMESPACES, {"metadata": {"name": name}})
    now = await emulated.current_version()
    assert int(now) > int(listed_at)
    await eventually(lambda: rec.cache.resource_version == now)  # only a BOOKMARK can carry it

    # Without the bookmark the cache would resume from ``listed_at``, now too old: 410, re-list.
    emulated.emulator.compact()
    emulated.emulator.drop_watches()
    await emulated.put_queue("b")
    await eventually(lambda: rec.cache.get("b") is not None)
    assert emulated.counter("kontinue.watch.relists", "reason") == {"initial": 1}
    assert [(e.type, _name(e.obj)) for e in rec.events] == [("ADDED", "a"), ("ADDED", "b")]


async def test_label_selector_filters_and_follows_objects_in_and_out(
    emulated: Emulated, caches: list[Recorded[Any]]
) -> None:
    await emulated.put_queue("in", labels=ENABLED)
    await emulated.put_queue("out")
    await emulated.put_queue("leaving", labels=ENABLED)
    rec = emulated.cache(CQ, model=kueue.ClusterQueue, label_selector=ENABLED)
    caches.append(rec)
    await rec.cache.wait_synced(timeout=10)
    assert [q.name for q in rec.cache.items()] == ["in", "leaving"]

    await emulated.relabel(CQ, "out", **ENABLED)
    await emulated.relabel(CQ, "leaving", **{"kontinue.dev/enabled": None})
    expected = await emulated.state(CQ, label_selector=ENABLED)
    await eventually(lambda: rec.state() == expected)
    assert [q.name for q in rec.cache.items()] == ["in", "out"]
    assert [(e.type, _name(e.obj)) for e in rec.events[2:]] == [
        ("ADDED", "out"),
        ("DELETED", "leaving"),
    ]


async def test_field_selector_and_namespace_scope_pods(
    emulated: Emulated, caches: list[Recorded[Any]]
) -> None:
    for namespace in ("team", "other"):
        await emulated.admin.create(resources.NAMESPACES, {"metadata": {"name": namespace}})

    async def pod(name: str, namespace: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
        }
        await emulated.admin.create(resources.PODS, body)

    await pod("on-n1", "team", "n1")
    await pod("on-n2", "team", "n2")
    await pod("elsewhere", "other", "n1")
    rec = emulated.cache(
        resources.PODS, model=core.Pod, namespace="team", field_selector="spec.nodeName=n1"
    )
    caches.append(rec)
    await rec.cache.wait_synced(timeout=10)
    await pod("later-n1", "team", "n1")
    await pod("later-n2", "team", "n2")
    expected = await emulated.state(
        resources.PODS, namespace="team", field_selector="spec.nodeName=n1"
    )
    assert set(expected) == {("team", "on-n1"), ("team", "later-n1")}
    await eventually(lambda: rec.state() == expected)
    found = rec.cache.get("later-n1")  # the cache's namespace is the default
    assert isinstance(found, core.Pod)
    assert found.spec.node_name == "n1"


async def test_a_hung_list_times_out_and_is_retried(
    emulated: Emulated, caches: list[Recorded[Any]]
) -> None:
    await emulated.put_queue("a")
    hung = emulated.emulator.faults.add(
        verb="list", resource="clusterqueues", hang=True, hang_seconds=5.0
    )
    rec = emulated.cache(CQ, model=kueue.ClusterQueue, request_timeout_seconds=0.3)
    caches.append(rec)
    await rec.cache.wait_synced(timeout=10)
    assert hung.fired == 1
    assert [q.name for q in rec.cache.items()] == ["a"]
    assert emulated.counter("kontinue.watch.reconnects", "reason") == {"TimeoutError": 1}
