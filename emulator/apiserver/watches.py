"""One watch stream, shaped like the cacher's (staging/src/k8s.io/apiserver/pkg/storage/cacher).

- ``cache_watcher.go``: with selectors, an object that stops matching arrives as DELETED and one
  that starts matching as ADDED; without a resourceVersion (or "0") the stream starts with an
  ADDED per current object;
- BOOKMARK events (only with allowWatchBookmarks) carry just ``metadata.resourceVersion``, sent
  when the stream has been idle for ``bookmark_interval`` (upstream: about a minute);
- the stream ends cleanly at its timeout; a too-old resourceVersion is one ERROR event with a
  410 Status; ``Dropped`` marks a stream cut by ``drop_watches``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from emulator.apiserver import kinds, selectors, statuses, store
from kontinue.kube import errors

Object = dict[str, Any]
Matcher = Callable[[Object | None], bool]


class Dropped(Exception):
    """The watch was cut by ``drop_watches`` (the HTTP layer aborts the connection)."""


def matcher(
    kind: kinds.Kind,
    *,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
) -> Matcher:
    labels = selectors.parse_labels(label_selector)
    fields = selectors.parse_fields(field_selector, key=kind.key)
    ns = namespace if kind.namespaced and namespace else None

    def matches(obj: Object | None) -> bool:
        if obj is None:
            return False
        if ns is not None and obj["metadata"].get("namespace") != ns:
            return False
        return labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)

    return matches


def translate(event: store.Event, matches: Matcher) -> str | None:
    """The event type this watcher sees, or None (cache_watcher.go ``convertToWatchEvent``)."""
    now_matches = matches(event.obj)
    if event.type in ("ADDED", "DELETED"):
        return event.type if now_matches else None
    was = matches(event.old)
    if now_matches:
        return "MODIFIED" if was else "ADDED"
    return "DELETED" if was else None


async def error_stream(exc: errors.ApiError) -> AsyncIterator[Object]:
    yield {"type": "ERROR", "object": statuses.to_body(exc)}


async def stream(
    *,
    kind: kinds.Kind,
    source: store.Store,
    watcher: store.Watcher,
    initial: list[Object],
    backlog: list[store.Event],
    matches: Matcher,
    allow_bookmarks: bool,
    duration: float,
    bookmark_interval: float,
    out: Callable[[Object], Object],
) -> AsyncIterator[Object]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration
    next_bookmark = loop.time() + bookmark_interval
    try:
        for obj in initial:
            yield {"type": "ADDED", "object": out(obj)}
        for event in backlog:
            watcher.queue.put_nowait(event)
        while (now := loop.time()) < deadline:
            if watcher.queue.empty():
                if allow_bookmarks and now >= next_bookmark:
                    # idle and due: everything up to source.rv has been delivered
                    next_bookmark = now + bookmark_interval
                    yield {
                        "type": "BOOKMARK",
                        "object": {
                            "kind": kind.kind,
                            "apiVersion": kind.api_version,
                            "metadata": {"resourceVersion": str(source.rv)},
                        },
                    }
                    continue
                wait = deadline - now
                if allow_bookmarks:
                    wait = min(wait, next_bookmark - now)
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), timeout=wait)
                except TimeoutError:
                    continue
            else:
                # never wait_for(..., 0) on a non-empty queue: it times out without reading
                item = watcher.queue.get_nowait()
            if item is store.Watcher.DROPPED:
                raise Dropped
            assert isinstance(item, store.Event)
            seen_as = translate(item, matches)
            if seen_as is not None:
                yield {"type": seen_as, "object": out(item.obj)}
    finally:
        source.watchers.discard(watcher)
