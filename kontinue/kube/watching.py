"""The watch cache: one resource's objects, kept current by list + watch, as typed models.

Both deployables read cluster state from these caches (the webhook must answer from memory;
the bridge reconciles from them), so this module owns the whole list/watch protocol, following
client-go's reflector (``staging/src/k8s.io/client-go/tools/cache/reflector.go``):

* **List** in pages (``limit``/``continue``), take the list's resourceVersion, reconcile the
  store with it (:func:`kontinue.kube.caching.reconcile`), then **watch** from that version with
  bookmarks on. The first complete list sets :attr:`WatchCache.synced`.
* Every watch event and BOOKMARK advances the remembered resourceVersion, so a new watch
  resumes exactly where the last one stopped. A stream that ends (server ``timeoutSeconds`` =
  ``watch_timeout_seconds`` x [1, 2), as the reflector picks it) or drops resumes from there.
* **410 Gone** (the version left the server's history) re-lists and reconciles: vanished objects
  are ``DELETED``, changed ``MODIFIED``, new ``ADDED``; an unchanged resourceVersion, no event.
* Errors (5xx, 429 — at least its Retry-After —, a dropped connection, a garbled line, a
  request that hangs past ``request_timeout_seconds``, even an unexpected exception, which is
  logged with its traceback) back off exponentially with a cap and jitter (:class:`Backoff`).
  A watch that ends within a second without a single event counts as a failure too (the
  reflector's "very short watch"), and so does a second 410 in a row, so a server that closes
  or expires every stream cannot make us spin.
* Every ``resync_seconds`` it re-lists anyway: drift is repaired (an event a buggy server never
  sent) and each unchanged object comes again as ``SYNC`` for level-triggered handlers.

Objects are validated into ``model`` at this boundary (:meth:`kontinue.kube.store.Store.admit`):
one that fails is logged and skipped; the last valid copy of that key stays. A deletion is always
delivered. Subscribers are called synchronously after the store holds the change; they must not
block or do I/O (enqueue a key and return). An exception in a subscriber is logged and does not
stop the cache.

Memory: what is held and how (models, or ``transform`` + ``packed=True``: compact JSON parsed on
read) is :mod:`kontinue.kube.store`; a list is folded in page by page, never held whole.

Limits: one resource and one selector per cache; no informers shared between callers, no
``sendInitialEvents`` lists; a subscriber added after the first list gets no ``ADDED`` for what
is already cached.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from typing import Any, Generic, Literal, TypeVar, cast

import pydantic
from opentelemetry import metrics

from kontinue.kube import api as kube_api
from kontinue.kube import backoff as backoff_module
from kontinue.kube import caching, errors, watch_metrics
from kontinue.kube import store as store_module
from kontinue.kube.resources import Resource

log = logging.getLogger("kontinue.watch")

M = TypeVar("M", bound=pydantic.BaseModel)

Event = caching.Event
EventType = caching.EventType
Key = caching.Key

Callback = Callable[[caching.Event[M]], None]
Transform = store_module.Transform
Packed = store_module.Packed
HOT_OBJECTS = store_module.HOT_OBJECTS


# A watch that ends this soon with no event is treated as a failure (reflector.go: "very short
# watch"), so a server that closes every stream at once gets backoff, not a tight loop.
SHORT_WATCH_SECONDS = 1.0

# Failures a list or watch is expected to meet (logged without a traceback); ValueError is a
# garbled response line. Anything else is retried too, but logged as the bug it likely is.
_EXPECTED = (errors.ApiError, ValueError, TimeoutError)

WatchEnd = Literal["closed", "short", "resync"]
Backoff = backoff_module.Backoff
watch_timeout = backoff_module.watch_timeout


class WatchCache(Generic[M]):
    """A live, typed view of one resource (optionally one namespace and selector).

    Run it as a task (``asyncio.create_task(cache.run())``); it runs until cancelled or
    :meth:`stop`. Read with :meth:`get` / :meth:`items`; await :meth:`wait_synced` before
    trusting an empty answer. Test hooks: ``backoff``, ``watch_timeout_seconds``,
    ``request_timeout_seconds``, ``page_size`` and ``rng``; production leaves the defaults.
    """

    def __init__(
        self,
        api: kube_api.Api,
        resource: Resource,
        *,
        model: type[M],
        namespace: str | None = None,
        label_selector: Mapping[str, str] | str | None = None,
        field_selector: str | None = None,
        resync_seconds: float | None = 300.0,
        meter: metrics.Meter | None = None,
        page_size: int = 500,
        watch_timeout_seconds: float = 300.0,
        request_timeout_seconds: float = 60.0,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        transform: Transform | None = None,
        packed: bool = False,
    ) -> None:
        if resync_seconds is not None and not resync_seconds > 0:
            raise ValueError(f"resync_seconds must be > 0 or None, got {resync_seconds}")
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if not watch_timeout_seconds >= 1:
            raise ValueError(f"watch_timeout_seconds must be >= 1, got {watch_timeout_seconds}")
        if not request_timeout_seconds > 0:
            raise ValueError(f"request_timeout_seconds must be > 0, got {request_timeout_seconds}")
        self.resource = resource
        self.namespace = namespace
        self._api = api
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._resync_seconds = resync_seconds
        self._page_size = page_size
        self._watch_timeout_seconds = watch_timeout_seconds
        self._request_timeout_seconds = request_timeout_seconds
        self._backoff = backoff or Backoff()
        self._rng = rng or random.Random()

        self._subscribers: list[Callback[M]] = []
        self._resource_version = ""
        self._next_resync = math.inf
        self._failures = 0
        self._error: BaseException | None = None
        self._running = False
        self._synced = asyncio.Event()
        self._stopping = asyncio.Event()
        self._done = asyncio.Event()

        self._what = str(resource) + (f" namespace={namespace}" if namespace else "")
        self._attrs = {"resource": str(resource)}
        self._metrics = watch_metrics.Instruments(meter or metrics.NoOpMeter("kontinue.watch"))
        self._store = store_module.Store(
            model,
            transform=transform,
            packed=packed,
            what=self._what,
            on_invalid=lambda: self._metrics.invalid_objects.add(1, self._attrs),
        )

    def serve_empty(self) -> None:
        """Stand for a resource this process does not follow on purpose (an optional queue
        system that is not installed): synced at once and always empty. Do not :meth:`run` it.
        Readers keep one code path; nothing watches a CRD that may not exist."""
        self._synced.set()

    # -- reading -------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """True once the first complete list is in the store (it stays true)."""
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion seen (list, event or BOOKMARK): where a watch resumes."""
        return self._resource_version

    def get(self, name: str, namespace: str | None = None) -> M | None:
        """The cached object, or ``None``; ``namespace`` defaults to the cache's namespace."""
        return self._store.get((namespace or self.namespace or "", name))

    def has(self, name: str, namespace: str | None = None) -> bool:
        """Whether the object is cached, without parsing it (a packed cache's cheapest read)."""
        return self._store.entry((namespace or self.namespace or "", name)) is not None

    def items(self) -> list[M]:
        """Every cached object, ordered by (namespace, name); a new list the caller may keep.

        A packed cache parses every object for this: iterate with :meth:`each` instead to hold
        one at a time."""
        return self._store.items()

    def each(self) -> Iterator[M]:
        """The cached objects in (namespace, name) order, one at a time: those still cached
        when reached (the store may change between two steps of a slow consumer)."""
        return self._store.each()

    def __len__(self) -> int:
        return len(self._store)

    def subscribe(self, callback: Callback[M]) -> Callable[[], None]:
        """Call ``callback(event)`` after each change; returns a function that unsubscribes.

        A subscriber added after the first list does not get ``ADDED`` for objects already
        cached: read :meth:`items` once after subscribing.
        """
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    # NB: ``timeout`` is part of the interface the webhook and bridge call (readiness probes).
    async def wait_synced(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Return once the first list is in; ``TimeoutError`` after ``timeout`` seconds.

        Raises ``RuntimeError`` if the cache stops (or dies) before it ever synced, so a caller
        never waits on a cache that will not fill.
        """
        if self._synced.is_set():
            return
        waiters = [
            asyncio.ensure_future(self._synced.wait()),
            asyncio.ensure_future(self._done.wait()),
        ]
        try:
            async with asyncio.timeout(timeout):
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        if not self._synced.is_set():
            raise RuntimeError(
                f"watch cache for {self._what} stopped before its first list"
            ) from self._error

    # -- running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled or :meth:`stop`; failures are retried, never raised.

        A stopped cache stays stopped: make a new one to start again.
        """
        if self._running:
            raise RuntimeError(f"watch cache for {self._what} is already running")
        self._running = True
        self._done.clear()
        loop_task = asyncio.create_task(self._loop(), name=f"watch-loop:{self.resource}")
        stop_task = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait([loop_task, stop_task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop_task.cancel()
            stop_task.cancel()
            await asyncio.gather(loop_task, stop_task, return_exceptions=True)
            if not loop_task.cancelled():
                self._error = loop_task.exception()
            self._running = False
            self._done.set()
            log.info("watch cache stopped resource=%s", self._what)
        if self._error is not None:
            log.error("watch cache failed resource=%s error=%r", self._what, self._error)
            raise self._error

    async def stop(self) -> None:
        """Stop :meth:`run` and wait until it has returned (a no-op if it is not running)."""
        self._stopping.set()
        if self._running:
            await self._done.wait()

    async def _loop(self) -> None:
        relist: str | None = "initial"
        while True:
            if relist is not None:
                try:
                    await self._relist(reason=relist)
                except Exception as exc:
                    await self._retry(exc, during="list")
                    continue
                relist = None
            try:
                ended = await self._watch()
            except errors.Gone as exc:
                # Our resourceVersion left the server's history: only a new list can catch up.
                self._failures += 1
                relist = "gone"
                log.info(
                    "watch expired, re-listing resource=%s rv=%s: %s",
                    self._what,
                    self._resource_version,
                    exc,
                )
                self._metrics.reconnects.add(1, {**self._attrs, "reason": "gone"})
                if self._failures > 1:  # a fresh list's version expired at once: slow down
                    await self._sleep(self._failures - 1)
                continue
            except Exception as exc:
                await self._retry(exc, during="watch")
                continue
            if ended == "resync":
                relist = "resync"
                continue
            self._metrics.reconnects.add(1, {**self._attrs, "reason": ended})
            if ended == "short":
                self._failures += 1
                log.warning(
                    "watch closed at once without events resource=%s rv=%s",
                    self._what,
                    self._resource_version,
                )
                await self._sleep(self._failures)
            else:
                log.debug(
                    "watch closed, resuming resource=%s rv=%s", self._what, self._resource_version
                )

    async def _retry(self, exc: Exception, *, during: str) -> None:
        """Back off after a failed list or watch, then let the loop try again.

        API and network failures are expected and logged as warnings. Anything else (a client
        library error we do not map, a bug) is logged with its traceback and retried the same
        way: a cache that dies would take the webhook's or the bridge's view of the cluster with
        it, and a restart would meet the same condition.
        """
        self._failures += 1
        self._metrics.reconnects.add(1, {**self._attrs, "reason": type(exc).__name__})
        retry_after = exc.retry_after if isinstance(exc, errors.TooManyRequests) else None
        delay = self._delay(self._failures, at_least=retry_after or 0.0)
        expected = isinstance(exc, _EXPECTED)
        log.log(
            logging.WARNING if expected else logging.ERROR,
            "%s failed, retrying resource=%s attempt=%d delay=%.2fs error=%s",
            during,
            self._what,
            self._failures,
            delay,
            exc if str(exc) else repr(exc),
            exc_info=None if expected else exc,
        )
        await asyncio.sleep(delay)

    def _delay(self, attempt: int, *, at_least: float = 0.0) -> float:
        return max(at_least, self._backoff.delay(attempt, rand=self._rng.random()))

    async def _sleep(self, attempt: int) -> None:
        await asyncio.sleep(self._delay(attempt))

    # -- list ----------------------------------------------------------------------------------

    async def _relist(self, *, reason: str) -> None:
        """List everything and fold it in. A list into an empty store (the first one) is told
        page by page: each object is put and its ADDED event made with the model its validation
        built, so it is parsed once, and no more than a page of parsed objects is alive at once.
        Any other list is diffed against what is held once it is complete
        (:func:`kontinue.kube.caching.changes`)."""
        listed: dict[Key, caching.Held[M]] = {}
        invalid: set[Key] = set()
        version = ""
        pages = 0
        # A failed list leaves the store holding what it told (those pages), so the retry diffs
        # against exactly what subscribers saw.
        by_page = not self._store.entries
        async for page, first in kube_api.list_pages(
            self._api,
            self.resource,
            namespace=self.namespace,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            page_size=self._page_size,
            page_timeout=self._request_timeout_seconds,
        ):
            pages += 1
            version = first
            added: list[tuple[Key, caching.Held[M]]] = []
            for raw in page:
                key = caching.key_of(raw)
                # a packed entry keeps no parsed model: 10,000 held at once is the peak to avoid
                entry = self._store.admit(key, raw, keep=by_page)
                if entry is None:
                    invalid.add(key)
                else:
                    listed[key] = entry
                    if by_page and key not in self._store.entries:
                        added.append((key, entry))
            del page
            for key, entry in added:
                self._store.put(key, entry)
            for _, entry in added:
                self._emit([caching.Event("ADDED", entry.obj)])
                if isinstance(entry, Packed):
                    entry.hot = None
            del added
        self._store.forget_invalid(keep=invalid)
        held = {} if by_page else self._store.entries
        store = caching.reconciled(held=held, listed=listed, invalid=invalid)
        self._store.replace(store)
        self._resource_version = version
        if self._resync_seconds is not None:
            self._next_resync = asyncio.get_running_loop().time() + self._resync_seconds
        self._metrics.relists.add(1, {**self._attrs, "reason": reason})
        counts = caching.counts(held=held, listed=listed, invalid=invalid)
        log.info(
            "listed resource=%s reason=%s objects=%d invalid=%d pages=%d rv=%s "
            "added=%d modified=%d deleted=%d",
            self._what,
            reason,
            len(store),
            len(invalid),
            pages,
            version,
            counts["ADDED"],
            counts["MODIFIED"],
            counts["DELETED"],
        )
        if not by_page:
            for event in caching.changes(
                held=held, listed=listed, invalid=invalid, resync=reason == "resync"
            ):
                self._emit([event])
        self._synced.set()

    # -- watch ---------------------------------------------------------------------------------

    async def _watch(self) -> WatchEnd:
        """One watch request, applied event by event, until it ends or a resync is due."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        until_resync = self._next_resync - started
        if until_resync <= 0:
            return "resync"
        timeout_seconds = watch_timeout(self._watch_timeout_seconds, rand=self._rng.random())
        # The client gives up a little after the server should have ended the stream: a
        # connection that went silent without closing (a dead peer) cannot hold us forever.
        budget = min(timeout_seconds + self._request_timeout_seconds, until_resync)
        received = 0
        stream = cast(
            AsyncGenerator[dict[str, Any], None],
            self._api.watch(
                self.resource,
                namespace=self.namespace,
                resource_version=self._resource_version or None,
                label_selector=self._label_selector,
                field_selector=self._field_selector,
                timeout_seconds=timeout_seconds,
                allow_bookmarks=True,
            ),
        )
        deadline = asyncio.timeout(budget)
        try:
            async with deadline:
                async for raw in stream:
                    received += 1
                    self._failures = 0
                    self._apply(raw)
        except TimeoutError:
            if not deadline.expired():
                raise
            if loop.time() < self._next_resync:
                log.warning(
                    "watch silent past its timeout, reconnecting resource=%s timeout=%ds",
                    self._what,
                    timeout_seconds,
                )
        finally:
            await stream.aclose()
        if loop.time() >= self._next_resync:
            return "resync"
        if received == 0 and loop.time() - started < SHORT_WATCH_SECONDS:
            return "short"
        return "closed"

    def _apply(self, raw: Mapping[str, Any]) -> None:
        """Fold one watch event into the store and tell subscribers."""
        kind = str(raw.get("type") or "")
        obj = raw.get("object")
        if not isinstance(obj, dict):
            log.warning("watch event without an object resource=%s type=%s", self._what, kind)
            return
        version = caching.resource_version_of(obj)
        if kind == "BOOKMARK":
            if version:
                self._resource_version = version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("unknown watch event type skipped resource=%s type=%s", self._what, kind)
            return
        key = caching.key_of(obj)
        if version:
            self._resource_version = version
        held = self._store.entry(key)
        if kind == "DELETED":
            self._store.forget_invalid(key)
            if held is None:  # never cached (e.g. it never validated): nothing to retract
                return
        # A deleted object that fails validation is retracted with the held copy, unlogged.
        incoming = self._store.admit(key, obj, report=kind != "DELETED")
        event = caching.change_for(kind, held=held, incoming=incoming)
        if event is None:
            return
        if event.type == "DELETED":
            self._store.remove(key)
        elif incoming is not None:
            self._store.put(key, incoming)
        self._emit([event])
        if isinstance(incoming, Packed) and incoming.hot is not None:
            if event.type != "DELETED":  # just changed: the handlers read it next
                self._store.remember(key, incoming, incoming.hot)
            incoming.hot = None

    def _emit(self, events: list[caching.Event[M]]) -> None:
        for event in events:
            self._metrics.events.add(1, {**self._attrs, "type": event.type})
            for callback in list(self._subscribers):
                try:
                    callback(event)
                except Exception:
                    log.exception(
                        "watch subscriber failed resource=%s type=%s callback=%r",
                        self._what,
                        event.type,
                        callback,
                    )
