"""A small list+watch cache of raw objects over the emulator's in-process client.

The emulated controllers (scheduler, job controller, kubelet agents) read cluster state the way
client-go informers do (staging/src/k8s.io/client-go/tools/cache/reflector.go): list, then watch
from the list's resourceVersion; a 410 or a dropped stream re-lists and reconciles (vanished
objects are reported as deleted). ``on_change`` is called synchronously for every change and must
only enqueue work.

:meth:`Informer.observe` is the write-through a controller uses for its own writes (client-go's
"expectations" serve the same purpose): the object a create/patch returned is cached at once, so
the next sync of the same key does not act twice on a state the watch has not delivered yet. A
copy older than the cached one is ignored, and an object once seen deleted never comes back.

Limits: raw dicts (no models), no paging, no resync timer, one resource and selector per
informer. Product code uses :mod:`kontinue.kube.watching` instead; this one is for the emulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from kontinue.kube import errors, interface
from kontinue.kube.resources import Resource

log = logging.getLogger("emulator.informer")

Object = dict[str, Any]
Key = tuple[str, str]
OnChange = Callable[[str, Object], None]


def key_of(obj: Object) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _rv(obj: Object) -> int:
    value = str((obj.get("metadata") or {}).get("resourceVersion") or "0")
    return int(value) if value.isdecimal() else 0


class Informer:
    """One resource's objects, current through list + watch; run as a task."""

    def __init__(
        self,
        client: interface.Client,
        resource: Resource,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        on_change: OnChange | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.on_change = on_change
        self.store: dict[Key, Object] = {}
        self.synced = asyncio.Event()
        self._gone_uids: set[str] = set()

    def get(self, name: str, namespace: str = "") -> Object | None:
        return self.store.get((namespace, name))

    def items(self) -> list[Object]:
        return [self.store[key] for key in sorted(self.store)]

    def observe(self, obj: Object) -> None:
        """Cache an object this process just wrote (ignored if older than the cached copy)."""
        uid = (obj.get("metadata") or {}).get("uid")
        if uid in self._gone_uids:
            return
        key = key_of(obj)
        held = self.store.get(key)
        if held is not None and _rv(held) >= _rv(obj):
            return
        self.store[key] = obj
        self._emit("MODIFIED" if held is not None else "ADDED", obj)

    def _emit(self, kind: str, obj: Object) -> None:
        if self.on_change is not None:
            try:
                self.on_change(kind, obj)
            except Exception:  # a subscriber bug must not stop the cache
                log.exception("on_change failed for %s", key_of(obj))

    def _apply(self, kind: str, obj: Object) -> None:
        key = key_of(obj)
        if kind == "DELETED":
            self._gone_uids.add(str(obj["metadata"].get("uid")))
            self.store.pop(key, None)
            self._emit(kind, obj)
            return
        held = self.store.get(key)
        if held is not None and held["metadata"].get("uid") != obj["metadata"].get("uid"):
            self._gone_uids.add(str(held["metadata"].get("uid")))
            held = None
        if held is not None and _rv(held) >= _rv(obj):
            return
        self.store[key] = obj
        self._emit("MODIFIED" if held is not None else "ADDED", obj)

    async def _relist(self) -> str:
        listed = await self.client.list(
            self.resource, field_selector=self.field_selector, label_selector=self.label_selector
        )
        seen = {key_of(item): item for item in listed["items"]}
        for key in [k for k in self.store if k not in seen]:
            self._apply("DELETED", self.store[key])
        for item in seen.values():
            self._apply("ADDED", item)
        self.synced.set()
        return str(listed["metadata"].get("resourceVersion") or "")

    async def run(self) -> None:
        """List and watch until cancelled; every failure re-lists after :func:`retry_delay`."""
        while True:
            try:
                version = await self._relist()
                while True:
                    async for event in self.client.watch(
                        self.resource,
                        resource_version=version,
                        field_selector=self.field_selector,
                        label_selector=self.label_selector,
                    ):
                        obj = event["object"]
                        version = str(obj["metadata"].get("resourceVersion") or version)
                        if event["type"] != "BOOKMARK":
                            self._apply(event["type"], obj)
            except (errors.ApiError, ValueError) as error:
                log.info("%s watch ended (%s); re-listing", self.resource.plural, error)
                await asyncio.sleep(retry_delay(error))


def retry_delay(error: Exception) -> float:
    """Seconds a list+watch loop waits after ``error`` before listing again; it never gives up.

    client-go's reflector retries every failure (kubernetes/client-go tools/cache/reflector.go:
    ``watch`` backs off and re-watches on ``apierrors.IsTooManyRequests`` — "watch of %v
    returned 429 - backing off" — and ``Run`` repeats a failed ``ListAndWatch`` through
    ``wait.BackoffUntil``). A real kube-apiserver answers 429 ``storage is (re)initializing``
    (``retryAfterSeconds: 1``) to a list or watch of a CustomResource whose watch cache is not
    ready yet: for a moment after its CRD is created or changed (kubernetes/kubernetes
    staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go ``Watch``/``GetList``: ``ready``
    not yet ``Ready``, ``errors.NewTooManyRequests(err.Error(), 1)``). The server's
    ``retryAfterSeconds`` is honoured; a missing CRD (404) is polled every half second.
    """
    if isinstance(error, errors.TooManyRequests):
        return max(error.retry_after or 1.0, 0.05)
    if isinstance(error, errors.NotFound):
        return 0.5
    return 0.05


async def mark_on_change(
    client: interface.Client,
    resource: Resource,
    *,
    on_listed: Callable[[], None],
    on_event: OnChange,
    what: str,
) -> None:
    """List ``resource`` (then ``on_listed()``) and watch it from the list's resourceVersion,
    calling ``on_event(type, object)`` for every change, until cancelled.

    The loop of a level-triggered controller that re-decides from fresh lists (the emulated
    Kueue and Volcano): it only needs to learn *that* something changed, never misses a change
    (a failed list or watch is retried after :func:`retry_delay`, then re-listed, which reports
    anything missed through ``on_listed``), and never ends on an API error.
    """
    while True:
        try:
            listed = await client.list(resource)
            on_listed()
            version = listed["metadata"]["resourceVersion"]
            async for event in client.watch(resource, resource_version=version):
                if event["type"] != "BOOKMARK":
                    on_event(event["type"], event["object"])
        except (errors.ApiError, ValueError) as error:
            if not isinstance(error, errors.NotFound):  # a CRD not installed (yet): quiet
                log.info("%s: %s list/watch ended (%s); re-listing", what, resource.plural, error)
            await asyncio.sleep(retry_delay(error))


async def start(
    informers: list[Informer], *, wait_seconds: float = 30.0
) -> list[asyncio.Task[None]]:
    """Start each informer as a task and wait for every first list (a failure raises here)."""
    tasks = [asyncio.create_task(i.run()) for i in informers]
    for informer, task in zip(informers, tasks, strict=True):
        waiter = asyncio.create_task(informer.synced.wait())
        done, _ = await asyncio.wait(
            {waiter, task}, timeout=wait_seconds, return_when="FIRST_COMPLETED"
        )
        if waiter not in done:
            waiter.cancel()
            await stop(tasks)
            if task in done:
                task.result()
            raise TimeoutError(f"{informer.resource.plural} informer never listed")
    return tasks


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait for each to end, cancelling again until it does.

    Python 3.11's ``asyncio.wait_for`` can swallow a cancellation that arrives just as the inner
    future completes (CPython gh-86296, fixed in 3.12); a task that lost its cancellation that way
    would otherwise keep running and a shutdown would hang.
    """
    for task in tasks:
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.1)
        if not task.cancelled():
            with contextlib.suppress(Exception):
                task.result()
