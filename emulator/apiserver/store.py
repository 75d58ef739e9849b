"""Objects, one global resourceVersion counter and a bounded event history, like etcd.

Every write takes the next value of one counter (etcd's revision), so a list's resourceVersion
is the counter at list time and a watch can resume from any value still in the history. The
history is bounded (``history`` events) and ``compact()`` forgets it, after which a watch from an
older resourceVersion is answered 410 Gone (staging/src/k8s.io/apiserver/pkg/storage/cacher/
watch_cache.go, ``errTooOld``). Watchers are registered in the same synchronous step that reads
the history, so no event can fall between the two.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from typing import Any

from emulator.apiserver import statuses
from kontinue import json_copy

Object = dict[str, Any]
TypeKey = tuple[str, str]  # (group, plural)
ObjKey = tuple[str, str]  # (namespace or "", name)


@dataclasses.dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: TypeKey
    obj: Object
    old: Object | None


class Watcher:
    """One open watch: a queue the store pushes matching-type events into."""

    DROPPED = object()

    def __init__(self, key: TypeKey) -> None:
        self.key = key
        self.queue: asyncio.Queue[Event | object] = asyncio.Queue()

    def drop(self) -> None:
        self.queue.put_nowait(self.DROPPED)


class Store:
    def __init__(self, *, history: int = 1000) -> None:
        self.rv = 1
        self.floor = 1
        self._limit = history
        self._objects: dict[TypeKey, dict[ObjKey, Object]] = collections.defaultdict(dict)
        self._history: collections.deque[Event] = collections.deque()
        self.watchers: set[Watcher] = set()
        self._uids: set[str] = set()
        self._dependents: dict[str, set[tuple[TypeKey, ObjKey]]] = collections.defaultdict(set)

    def get(self, key: TypeKey, namespace: str, name: str) -> Object | None:
        return self._objects[key].get((namespace, name))

    def items(self, key: TypeKey, namespace: str | None = None) -> list[Object]:
        return [
            obj
            for (ns, _), obj in sorted(self._objects[key].items())
            if namespace is None or ns == namespace
        ]

    def exists(self, uid: str) -> bool:
        """Whether an object with this uid is stored (any kind)."""
        return uid in self._uids

    def dependents(self, owner_uid: str) -> list[tuple[TypeKey, ObjKey]]:
        """The objects whose ``ownerReferences`` name ``owner_uid``, in (kind, namespace, name)
        order. Kept as objects are written, as the garbage collector's dependency graph is
        (kubernetes ``pkg/controller/garbagecollector/graph_builder.go``: ``uidToNode``, each
        node's ``dependents``), so finding them does not scan every object of every kind."""
        return sorted(self._dependents.get(owner_uid, ()))

    def _index(self, key: TypeKey, obj: Object, *, add: bool) -> None:
        meta = obj["metadata"]
        where = (key, (meta.get("namespace", ""), meta["name"]))
        uid = meta.get("uid")
        if uid:
            (self._uids.add if add else self._uids.discard)(uid)
        for ref in meta.get("ownerReferences") or ():
            owner = ref.get("uid") if isinstance(ref, dict) else None
            if not isinstance(owner, str):
                continue
            if add:
                self._dependents[owner].add(where)
            elif (found := self._dependents.get(owner)) is not None:
                found.discard(where)
                if not found:
                    del self._dependents[owner]

    def _record(self, event: Event) -> None:
        if len(self._history) >= self._limit:
            self.floor = self._history.popleft().rv
        self._history.append(event)
        for watcher in list(self.watchers):
            if watcher.key == event.key:
                watcher.queue.put_nowait(event)

    def put(self, key: TypeKey, obj: Object, *, old: Object | None) -> Object:
        """Store ``obj`` under the next resourceVersion; returns the stored copy."""
        self.rv += 1
        stored = json_copy.copied(obj)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        meta = stored["metadata"]
        replaced = self._objects[key].get((meta.get("namespace", ""), meta["name"]))
        if replaced is not None:
            self._index(key, replaced, add=False)
        self._objects[key][(meta.get("namespace", ""), meta["name"])] = stored
        self._index(key, stored, add=True)
        self._record(Event(self.rv, "ADDED" if old is None else "MODIFIED", key, stored, old))
        return stored

    def remove(self, key: TypeKey, obj: Object) -> Object:
        self.rv += 1
        meta = obj["metadata"]
        removed = self._objects[key].pop((meta.get("namespace", ""), meta["name"]))
        self._index(key, removed, add=False)
        gone = json_copy.copied(removed)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self._record(Event(self.rv, "DELETED", key, gone, obj))
        return gone

    def watch(self, key: TypeKey, since: int | None) -> tuple[list[Event], Watcher]:
        """Events after ``since`` still held, plus a watcher for what comes next."""
        if since is not None and since < self.floor:
            raise statuses.gone(f"too old resource version: {since} ({self.floor})")
        backlog = [e for e in self._history if e.key == key and since is not None and e.rv > since]
        watcher = Watcher(key)
        self.watchers.add(watcher)
        return backlog, watcher

    def compact(self) -> None:
        """Forget the history: any resourceVersion older than the current one is now too old."""
        self._history.clear()
        self.floor = self.rv

    def drop_watches(self) -> None:
        for watcher in list(self.watchers):
            watcher.drop()
