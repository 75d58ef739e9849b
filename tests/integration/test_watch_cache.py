"""The watch cache through the real kubernetes-asyncio client over real HTTP.

Until the project's API emulator is in, a small scripted aiohttp server plays one resource
(Kueue ClusterQueues): a store with a resourceVersion counter, an event history that can be
compacted (then a watch from an older version gets the apiserver's 410 ERROR event), label and
``metadata.name`` field selectors (an object leaving the selector is sent as DELETED, entering it
as ADDED, as the apiserver's watch cache does), bookmarks, server-side ``timeoutSeconds``, and
switches to fail or drop watches. Each test drives the cache and checks what it ends up holding
and which events it delivered.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics import export as metrics_export
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from kontinue.kube import api, client, resources, watching
from kontinue.models import kueue, pruning
from tests.waiting import eventually

FAST = watching.Backoff(initial=0.01, factor=2.0, cap=0.05, jitter=0.5)
API_VERSION = resources.CLUSTER_QUEUES.api_version

# (resourceVersion, type, object, the object before the change or None)
Change = tuple[int, str, dict[str, Any], dict[str, Any] | None]


def _status(code: int, reason: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": f"scripted {reason}",
    }


def _matches(obj: dict[str, Any], query: Any) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, query.get("labelSelector", "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    for term in filter(None, query.get("fieldSelector", "").split(",")):
        field, _, value = term.partition("=")
        assert field == "metadata.name", f"unsupported field selector {field}"
        if obj["metadata"]["name"] != value:
            return False
    return True


class FakeApiServer:
    """One cluster-scoped resource's list and watch, scripted."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.rv = 100
        self.history: list[Change] = []
        self.oldest = 0  # a watch from a resourceVersion below this gets 410 Gone
        self.list_status: int | None = None
        self.watch_status: int | None = None
        self.list_replies: list[web.Response] = []  # answered (once each) before anything else
        # continue token -> what changes in the cluster as that page fails (500, once)
        self.failing_pages: dict[str, Callable[[], None]] = {}
        self.watch_replies: list[web.Response] = []
        self.always_gone = False  # every watch, whatever its version, gets 410
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._wake = asyncio.Event()
        self._generation = 0
        self._abrupt: list[web.Request] = []

    # -- scripting ------------------------------------------------------------------------------

    def _notify(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    def put(
        self,
        name: str,
        *,
        cohort: Any = "team",
        labels: dict[str, str] | None = None,
        emit: bool = True,
    ) -> dict[str, Any]:
        """Create or change an object; ``emit=False`` changes it without a watch event (drift)."""
        self.rv += 1
        old = self.objects.get(name)
        obj = {
            "apiVersion": API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": name, "resourceVersion": str(self.rv), "labels": labels or {}},
            "spec": {"cohortName": cohort},
        }
        self.objects[name] = obj
        if emit:
            self.history.append((self.rv, "MODIFIED" if old else "ADDED", obj, old))
            self._notify()
        return obj

    def delete(self, name: str, *, emit: bool = True) -> None:
        self.rv += 1
        old = self.objects.pop(name)
        obj = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self.rv)}}
        if emit:
            self.history.append((self.rv, "DELETED", obj, old))
            self._notify()

    def bookmark(self) -> None:
        """Advance the version without a change to this resource (another one changed)."""
        self.rv += 1
        mark: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "ClusterQueue"}
        mark["metadata"] = {"resourceVersion": str(self.rv)}
        self.history.append((self.rv, "BOOKMARK", mark, None))
        self._notify()

    def compact(self) -> None:
        """Forget the history: every watch from an older version now gets 410 Gone."""
        self.history.clear()
        self.oldest = self.rv

    def drop_watches(self, *, abrupt: bool) -> None:
        """End every open watch: cleanly (end of stream) or abruptly (connection closed)."""
        self._generation += 1
        if abrupt:
            for request in self._abrupt:
                if request.transport is not None:
                    request.transport.close()
        self._notify()

    def watches(self) -> list[dict[str, str]]:
        return [query for kind, query in self.requests if kind == "watch"]

    def queries(self) -> list[dict[str, str]]:
        return [query for _, query in self.requests]

    def lists(self) -> list[dict[str, str]]:
        return [query for kind, query in self.requests if kind == "list"]

    def state(self) -> dict[str, str]:
        return {name: obj["metadata"]["resourceVersion"] for name, obj in self.objects.items()}

    # -- serving --------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert request.path == resources.CLUSTER_QUEUES.path(), request.path
        query = dict(request.query)
        if query.get("watch") == "true":
            self.requests.append(("watch", query))
            return await self._watch(request, query)
        self.requests.append(("list", query))
        if self.list_replies:
            return self.list_replies.pop(0)
        if self.list_status is not None:
            return web.json_response(_status(self.list_status, "Scripted"), status=self.list_status)
        if query.get("continue") in self.failing_pages:
            self.failing_pages.pop(query["continue"])()
            return web.json_response(_status(500, "Scripted"), status=500)
        names = sorted(n for n, o in self.objects.items() if _matches(o, query))
        start = names.index(query["continue"]) if "continue" in query else 0
        limit = int(query.get("limit", len(names) or 1))
        page = names[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if start + limit < len(names):
            meta["continue"] = names[start + limit]
        items = [
            {k: v for k, v in self.objects[n].items() if k not in ("apiVersion", "kind")}
            for n in page
        ]  # a real list's items carry no apiVersion/kind
        return web.json_response(
            {
                "apiVersion": API_VERSION,
                "kind": "ClusterQueueList",
                "metadata": meta,
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, query: dict[str, str]) -> web.StreamResponse:
        if self.watch_replies:
            return self.watch_replies.pop(0)
        if self.watch_status is not None:
            status = self.watch_status
            return web.json_response(_status(status, "Scripted"), status=status)
        sent = int(query.get("resourceVersion") or self.rv)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if sent < self.oldest or self.always_gone:
            error = {"type": "ERROR", "object": _status(410, "Expired")}
            await response.write(json.dumps(error).encode() + b"\n")
            return response
        bookmarks = query.get("allowWatchBookmarks") == "true"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(query.get("timeoutSeconds", 3600))
        generation = self._generation
        self._abrupt.append(request)
        try:
            while generation == self._generation:
                wake = self._wake
                for rv, kind, obj, old in list(self.history):
                    if rv <= sent:
                        continue
                    sent = rv
                    out = self._translate(kind, obj, old, query, bookmarks=bookmarks)
                    if out is not None:
                        await response.write(json.dumps({"type": out, "object": obj}).encode())
                        await response.write(b"\n")
                try:
                    async with asyncio.timeout(deadline - loop.time()):
                        await wake.wait()
                except TimeoutError:
                    break  # the server-side timeoutSeconds: end the stream cleanly
        finally:
            self._abrupt.remove(request)
        return response

    @staticmethod
    def _translate(
        kind: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        query: dict[str, str],
        *,
        bookmarks: bool,
    ) -> str | None:
        if kind == "BOOKMARK":
            return kind if bookmarks else None
        now_in = _matches(obj, query)
        was_in = old is not None and _matches(old, query)
        if kind == "DELETED":
            return kind if was_in else None
        if now_in:
            return "MODIFIED" if was_in else "ADDED"
        return "DELETED" if was_in else None


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeApiServer, api.Api]]:
    server = FakeApiServer()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", server.handle)
    http = TestServer(app, host="127.0.0.1")
    await http.start_server()
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "t", "cluster": {"server": str(http.make_url(""))}}],
        "users": [{"name": "t", "user": {"token": "t"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
        "current-context": "t",
    }
    api_client = await client.api_client_from_dict(kubeconfig)
    try:
        yield server, api.Api(api_client)
    finally:
        await api_client.close()
        await http.close()


Cache = watching.WatchCache[kueue.ClusterQueue]


class Recorded:
    """A cache running as a task, with every event it delivered."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.events: list[watching.Event[kueue.ClusterQueue]] = []
        cache.subscribe(self.events.append)
        self.task = asyncio.create_task(cache.run())

    def count(self, type_: str) -> collections.Counter[str]:
        return collections.Counter(e.obj.name for e in self.events if e.type == type_)

    def state(self) -> dict[str, str]:
        return {o.name: o.metadata.resource_version or "" for o in self.cache.items()}


_PACKED = {"on": False}


@pytest.fixture(autouse=True, params=["models", "packed"])
def storage(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test runs twice: the store holding models, and packed slim JSON (the bridge's
    pods, Jobs and Workloads: kontinue/kube/store.py, "Memory") — same events, same reads."""
    _PACKED["on"] = request.param == "packed"
    yield request.param
    _PACKED["on"] = False


def _cache(kube: api.Api, **kwargs: Any) -> Cache:
    kwargs.setdefault("backoff", FAST)
    kwargs.setdefault("rng", random.Random(7))
    if _PACKED["on"]:
        kwargs.setdefault("packed", True)
        kwargs.setdefault("transform", functools.partial(pruning.prune, kueue.ClusterQueue))
    return watching.WatchCache(kube, resources.CLUSTER_QUEUES, model=kueue.ClusterQueue, **kwargs)


@pytest.fixture
async def running() -> AsyncIterator[Callable[[Cache], Recorded]]:
    started: list[Recorded] = []

    def start(cache: Cache) -> Recorded:
        started.append(Recorded(cache))
        return started[-1]

    yield start
    for recorded in started:
        await recorded.cache.stop()
        await recorded.task  # run() returns normally after stop()


async def test_first_list_pages_through_everything_then_reports_synced(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    for name in "edcba":
        server.put(name)
    rec = running(_cache(kube, page_size=2))
    await rec.cache.wait_synced(timeout=10)

    assert rec.cache.synced
    assert [q.get("continue") for q in server.lists()] == [None, "c", "e"]
    assert all(q["limit"] == "2" for q in server.lists())
    assert [o.name for o in rec.cache.items()] == ["a", "b", "c", "d", "e"]
    assert [(e.type, e.obj.name) for e in rec.events] == [("ADDED", n) for n in "abcde"]
    queue = rec.cache.get("c")
    assert isinstance(queue, kueue.ClusterQueue)
    assert queue.spec.cohort_name == "team"
    assert queue.kind == "ClusterQueue"  # filled in for list items, as a watch event has it
    assert rec.cache.resource_version == str(server.rv)
    await eventually(lambda: len(server.watches()) == 1)
    assert server.watches()[0]["resourceVersion"] == str(server.rv)


async def test_a_first_list_is_told_page_by_page_and_parsed_once(
    fake: tuple[FakeApiServer, api.Api],
    running: Callable[[Cache], Recorded],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first list puts each page and tells its ADDED events with the models validation
    built (a packed cache parses no JSON again for them); a list that fails part-way leaves
    what it told, and the retry tells only the difference (kontinue/kube/watching.py)."""
    server, kube = fake
    for name in "abcde":
        server.put(name)
    parsed: list[Any] = []
    real = kueue.ClusterQueue.model_validate_json

    def counted(data: Any, *args: Any, **kwargs: Any) -> kueue.ClusterQueue:
        parsed.append(data)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(kueue.ClusterQueue, "model_validate_json", counted)
    clean = running(_cache(kube, page_size=2))
    await clean.cache.wait_synced(timeout=10)
    assert [(e.type, e.obj.name) for e in clean.events] == [("ADDED", n) for n in "abcde"]
    assert parsed == []  # every ADDED event carried the model its list page was validated into

    def cluster_changes() -> None:  # between the two attempts: "a" goes, "f" comes
        server.delete("a", emit=False)
        server.put("f", emit=False)

    server.failing_pages = {"c": cluster_changes}  # the second page fails once
    cache = _cache(kube, page_size=2)
    held_when_told: list[tuple[str, int]] = []
    cache.subscribe(lambda e: held_when_told.append((e.obj.name, len(cache))))
    rec = running(cache)
    await rec.cache.wait_synced(timeout=10)

    assert [(e.type, e.obj.name) for e in rec.events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
        ("ADDED", "c"),
        ("ADDED", "d"),
        ("ADDED", "e"),
        ("ADDED", "f"),
    ]
    assert held_when_told[:2] == [("a", 2), ("b", 2)]  # the page was put, then told
    assert [o.name for o in rec.cache.items()] == ["b", "c", "d", "e", "f"]
    assert rec.cache.resource_version == str(server.rv)


async def test_watch_events_keep_the_newest_object_per_key(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    server.put("a")
    server.put("b")
    rec = running(_cache(kube))
    await rec.cache.wait_synced(timeout=10)

    server.put("a", cohort="research")
    server.put("c")
    server.delete("b")
    await eventually(lambda: rec.state() == server.state())

    assert [(e.type, e.obj.name) for e in rec.events[2:]] == [
        ("MODIFIED", "a"),
        ("ADDED", "c"),
        ("DELETED", "b"),
    ]
    modified = rec.events[2]
    assert modified.old is not None
    assert modified.old.spec.cohort_name == "team"
    assert modified.obj.spec.cohort_name == "research"
    assert rec.cache.get("b") is None
    assert rec.cache.resource_version == str(server.rv)


async def _disconnect(server: FakeApiServer) -> None:
    """Drop the watch and refuse new ones until the cache has tried again at least once."""
    watches_before = len(server.watches())
    server.watch_status = 500
    server.drop_watches(abrupt=True)
    await eventually(lambda: len(server.watches()) > watches_before)


async def test_no_event_is_lost_across_a_dropped_connection(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    n = 25
    for i in range(n):
        server.put(f"q{i:02}")
    meter = MeterProvider(metric_readers=[reader := InMemoryMetricReader()]).get_meter("t")
    rec = running(_cache(kube, meter=meter))
    await rec.cache.wait_synced(timeout=10)
    await eventually(lambda: len(server.watches()) == 1)
    seen = rec.cache.resource_version

    await _disconnect(server)
    for i in range(n):  # every object changes while the cache cannot watch
        server.put(f"q{i:02}", cohort="while-away")
    server.delete("q00")
    server.put("new")
    server.watch_status = None
    await eventually(lambda: rec.state() == server.state())

    # the resumed stream replays every change, q00's change before its deletion included
    assert rec.count("MODIFIED") == {f"q{i:02}": 1 for i in range(n)}
    assert rec.count("DELETED") == {"q00": 1}
    assert rec.count("ADDED") == {**{f"q{i:02}": 1 for i in range(n)}, "new": 1}
    assert all(o.spec.cohort_name == "while-away" for o in rec.cache.items() if o.name != "new")
    assert len(server.lists()) == 1, "resumed from the last version, no re-list needed"
    assert server.watches()[-1]["resourceVersion"] == seen
    counts = _counter_values(reader)
    assert counts["kontinue.watch.events"] == len(rec.events) == n + n + 1 + 1
    assert counts["kontinue.watch.reconnects"] >= 2  # the drop and at least one refused watch


def _counter_values(reader: InMemoryMetricReader) -> dict[str, int]:
    data = reader.get_metrics_data()
    assert data is not None
    totals: dict[str, int] = collections.Counter()
    for resource_metrics in data.resource_metrics:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    assert isinstance(point, metrics_export.NumberDataPoint)
                    totals[metric.name] += int(point.value)
    return totals


async def test_no_event_is_lost_across_a_410_relist(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    n = 20
    for i in range(n):
        server.put(f"q{i:02}")
    rec = running(_cache(kube))
    await rec.cache.wait_synced(timeout=10)
    await eventually(lambda: len(server.watches()) == 1)

    await _disconnect(server)
    changed = {f"q{i:02}" for i in range(0, n, 2)}  # half change, half stay as they were
    for name in sorted(changed):
        server.put(name, cohort="while-away")
    server.delete("q01")
    server.put("new")
    server.compact()  # the cache's version is gone from history: only a re-list can catch up
    server.watch_status = None
    await eventually(lambda: rec.state() == server.state())

    assert len(server.lists()) == 2
    assert rec.count("MODIFIED") == dict.fromkeys(changed, 1)
    assert rec.count("DELETED") == {"q01": 1}
    assert rec.count("ADDED") == {**{f"q{i:02}": 1 for i in range(n)}, "new": 1}
    assert rec.count("SYNC") == {}
    assert rec.cache.resource_version == str(server.rv)
    await eventually(lambda: server.watches()[-1].get("resourceVersion") == str(server.rv))


async def test_bookmarks_advance_the_version_a_watch_resumes_from(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    server.put("a")
    rec = running(_cache(kube))
    await rec.cache.wait_synced(timeout=10)
    await eventually(lambda: len(server.watches()) == 1)
    assert server.watches()[0]["allowWatchBookmarks"] == "true"

    listed_at = rec.cache.resource_version
    server.bookmark()
    server.bookmark()
    await eventually(lambda: rec.cache.resource_version == str(server.rv))
    assert int(rec.cache.resource_version) == int(listed_at) + 2
    server.drop_watches(abrupt=False)
    await eventually(lambda: len(server.watches()) == 2)
    assert server.watches()[1]["resourceVersion"] == str(server.rv)
    assert [e.type for e in rec.events] == ["ADDED"]  # a bookmark is not an event


async def test_label_selector_filters_and_follows_objects_in_and_out(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    on = {"kontinue.dev/enabled": "true"}
    server.put("in", labels=on)
    server.put("out")
    server.put("leaving", labels=on)
    rec = running(_cache(kube, label_selector=on))
    await rec.cache.wait_synced(timeout=10)
    assert [o.name for o in rec.cache.items()] == ["in", "leaving"]

    server.put("out", labels=on)  # enters the selector
    server.put("leaving")  # leaves it
    await eventually(lambda: [o.name for o in rec.cache.items()] == ["in", "out"])
    assert [(e.type, e.obj.name) for e in rec.events[2:]] == [
        ("ADDED", "out"),
        ("DELETED", "leaving"),
    ]
    assert {q["labelSelector"] for q in server.queries()} == {"kontinue.dev/enabled=true"}


async def test_field_selector_is_passed_to_list_and_watch(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    server.put("a")
    server.put("b")
    rec = running(_cache(kube, field_selector="metadata.name=b"))
    await rec.cache.wait_synced(timeout=10)
    server.put("a", cohort="x")
    server.put("b", cohort="y")
    await eventually(lambda: (o := rec.cache.get("b")) is not None and o.spec.cohort_name == "y")
    assert [o.name for o in rec.cache.items()] == ["b"]
    assert {q["fieldSelector"] for q in server.queries()} == {"metadata.name=b"}


async def test_an_invalid_object_is_logged_with_its_field_and_skipped(
    fake: tuple[FakeApiServer, api.Api],
    running: Callable[[Cache], Recorded],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, kube = fake
    server.put("good")
    server.put("broken", cohort=5)
    caplog.set_level(logging.INFO, logger="kontinue.watch")
    rec = running(_cache(kube))
    await rec.cache.wait_synced(timeout=10)
    assert [o.name for o in rec.cache.items()] == ["good"]
    assert "object=broken" in caplog.text
    assert "spec.cohortName: Input should be a valid string" in caplog.text

    server.put("good", cohort=["not", "a", "string"])  # an update that fails validation
    server.put("later")
    await eventually(lambda: rec.cache.get("later") is not None)
    good = rec.cache.get("good")
    assert good is not None
    assert good.spec.cohort_name == "team"  # the last valid copy stays
    assert caplog.text.count("skipping invalid object") == 2  # once per bad version
    server.delete("good")
    await eventually(lambda: rec.cache.get("good") is None)
    assert caplog.text.count("skipping invalid object") == 2  # a deletion is not re-reported
    assert [(e.type, e.obj.name) for e in rec.events] == [
        ("ADDED", "good"),
        ("ADDED", "later"),
        ("DELETED", "good"),
    ]


async def test_periodic_resync_repairs_drift_and_redelivers_unchanged_objects(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    server.put("steady")
    server.put("drifted")
    server.put("vanished")
    rec = running(_cache(kube, resync_seconds=0.3))
    await rec.cache.wait_synced(timeout=10)

    server.put("drifted", cohort="silently", emit=False)  # a change whose event never came
    server.delete("vanished", emit=False)
    await eventually(lambda: rec.state() == server.state())

    assert rec.count("MODIFIED") == {"drifted": 1}
    assert rec.count("DELETED") == {"vanished": 1}
    assert rec.count("SYNC")["steady"] >= 1
    assert len(server.lists()) >= 2


async def test_failing_watches_back_off_and_recover(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    server.put("a")
    server.watch_status = 503
    rec = running(_cache(kube))
    await rec.cache.wait_synced(timeout=10)
    await eventually(lambda: len(server.watches()) >= 4)  # refused, retried with backoff
    server.watch_status = None
    server.put("a", cohort="after")
    await eventually(lambda: rec.state() == server.state())
    assert rec.count("MODIFIED") == {"a": 1}
    assert len(server.lists()) == 1  # errors are retried from the same version


async def test_a_stream_the_server_ends_is_resumed_with_a_fresh_timeout(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    server.put("a")
    rec = running(_cache(kube, watch_timeout_seconds=1))
    await rec.cache.wait_synced(timeout=10)
    await eventually(lambda: len(server.watches()) >= 2)  # the first stream timed out server-side
    assert all(1 <= int(q["timeoutSeconds"]) < 2 for q in server.watches())
    server.put("a", cohort="later")
    await eventually(lambda: rec.state() == server.state())
    assert len(server.lists()) == 1


async def test_wait_synced_times_out_then_fails_once_stopped(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    server.list_status = 403
    rec = running(_cache(kube))
    with pytest.raises(TimeoutError):
        await rec.cache.wait_synced(timeout=0.2)
    assert not rec.cache.synced
    assert len(server.lists()) >= 2  # a 403 is retried, RBAC may be fixed later
    await rec.cache.stop()
    with pytest.raises(RuntimeError, match="stopped before its first list"):
        await rec.cache.wait_synced(timeout=1)
    await asyncio.wait_for(rec.task, timeout=5)


async def test_a_failing_subscriber_does_not_stop_the_cache(
    fake: tuple[FakeApiServer, api.Api],
    running: Callable[[Cache], Recorded],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, kube = fake
    cache = _cache(kube)

    def broken(event: watching.Event[kueue.ClusterQueue]) -> None:
        raise RuntimeError("handler bug")

    cache.subscribe(broken)
    rec = running(cache)
    server.put("a")
    await rec.cache.wait_synced(timeout=10)
    server.put("b")
    await eventually(lambda: rec.state() == server.state())
    assert "watch subscriber failed" in caplog.text
    assert [(e.type, e.obj.name) for e in rec.events] == [("ADDED", "a"), ("ADDED", "b")]


async def test_an_unexpected_response_is_logged_with_a_traceback_and_retried(
    fake: tuple[FakeApiServer, api.Api],
    running: Callable[[Cache], Recorded],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, kube = fake
    server.put("a")
    server.list_replies.append(web.json_response(["not", "a", "list", "object"]))
    rec = running(_cache(kube))
    await rec.cache.wait_synced(timeout=10)
    assert [o.name for o in rec.cache.items()] == ["a"]
    assert len(server.lists()) == 2
    (failure,) = [r for r in caplog.records if "list failed, retrying" in r.getMessage()]
    assert failure.levelno == logging.ERROR
    assert failure.exc_info is not None  # the traceback is in the log


async def test_a_410_right_after_a_fresh_list_backs_off_instead_of_spinning(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    server.put("a")
    server.always_gone = True
    slow = watching.Backoff(initial=30.0, cap=30.0, jitter=0.0)
    rec = running(_cache(kube, backoff=slow))
    await rec.cache.wait_synced(timeout=10)
    await eventually(lambda: len(server.lists()) == 2)  # the first 410 re-lists at once
    await eventually(lambda: len(server.watches()) == 2)
    await asyncio.sleep(0.5)  # the second 410 in a row waits out the backoff
    assert (len(server.lists()), len(server.watches())) == (2, 2)
    assert [(e.type, e.obj.name) for e in rec.events] == [("ADDED", "a")]


async def test_too_many_requests_waits_at_least_retry_after(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded]
) -> None:
    server, kube = fake
    server.put("a")
    server.watch_replies.append(
        web.json_response(
            _status(429, "TooManyRequests"), status=429, headers={"Retry-After": "30"}
        )
    )
    rec = running(_cache(kube))  # FAST backoff: without Retry-After it would retry in <50ms
    await rec.cache.wait_synced(timeout=10)
    await eventually(lambda: len(server.watches()) == 1)
    await asyncio.sleep(0.5)
    assert len(server.watches()) == 1


async def test_a_packed_cache_keeps_only_the_named_fields_and_reads_stay_stable(
    fake: tuple[FakeApiServer, api.Api], running: Callable[[Cache], Recorded], storage: str
) -> None:
    server, kube = fake
    managed = [{"manager": "kueue", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]
    for name in ("a", "b"):
        obj = server.put(name)
        obj["metadata"]["managedFields"] = managed
        obj["spec"]["futureField"] = {"x": 1}  # a field the model does not name
    rec = running(_cache(kube))
    await rec.cache.wait_synced(timeout=10)

    a = rec.cache.get("a")
    assert a is not None
    assert a.spec.cohort_name == "team"
    extras = {**(a.metadata.model_extra or {}), **(a.spec.model_extra or {})}
    if storage == "packed":
        assert extras == {}  # pruned before it was stored
        assert rec.events[0].obj.metadata.model_extra == {}  # subscribers got the slim view
    else:
        assert set(extras) == {"managedFields", "futureField"}
    assert rec.cache.get("a") is a  # read twice, parsed once
    assert [q.name for q in rec.cache.each()] == ["a", "b"]
    assert len(rec.cache) == 2

    server.put("a", cohort="research")
    await eventually(
        lambda: (q := rec.cache.get("a")) is not None and q.spec.cohort_name == "research"
    )
    assert a.spec.cohort_name == "team"  # a model read earlier is not changed under its reader
    walk = rec.cache.each()
    assert next(walk).name == "a"
    server.delete("b")
    await eventually(lambda: rec.cache.get("b") is None)
    assert list(walk) == []  # b went away while the walk was paused: skipped, no error
