"""The pure half of the watch cache: what changed, as events, given what we had and what came in.

:mod:`kontinue.kube.watching` does the I/O (list, watch, reconnect); every decision about whether
something is news lives here as a function of plain values, so it is tested table-style.

Two inputs produce events:

* one watch event for one key (:func:`change_for`): a duplicate (same resourceVersion) or an
  older copy is dropped, so a resumed or repeated stream never delivers an object twice;
* a complete re-list (:func:`reconcile`): keys missing from the list are ``DELETED``, new keys
  ``ADDED``, keys whose resourceVersion differs ``MODIFIED``; an unchanged key gets nothing, or
  ``SYNC`` when the re-list is a periodic resync (level-triggered handlers re-check it).

ResourceVersions are opaque strings to Kubernetes clients (API conventions, "Concurrency Control
and Consistency"), so "changed" means "different". Only to drop a *stale* copy do we order them,
and only when both are decimal integers (what etcd-backed servers hand out); anything else is
treated as newer, which can at worst deliver a redundant event, never lose one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Generic, Literal, Protocol, TypeVar

M = TypeVar("M")
M_co = TypeVar("M_co", covariant=True)

EventType = Literal["ADDED", "MODIFIED", "DELETED", "SYNC"]

Key = tuple[str, str]
"""``(namespace, name)``; the namespace is ``""`` for cluster-scoped objects."""


@dataclasses.dataclass(frozen=True)
class Event(Generic[M]):
    """One change the cache applied, handed to subscribers after the store holds it.

    ``obj`` is the object now (for ``DELETED``: its last known state); ``old`` is the version the
    cache held before a ``MODIFIED`` or ``DELETED``, ``None`` for ``ADDED`` and ``SYNC``.
    """

    type: EventType
    obj: M
    old: M | None = None


@dataclasses.dataclass(frozen=True)
class Entry(Generic[M]):
    """One cached object with the resourceVersion it was read at."""

    resource_version: str
    obj: M


class Held(Protocol[M_co]):
    """What a store holds per key: an :class:`Entry`, or a packed form that parses on read
    (:class:`kontinue.kube.store.Packed`)."""

    @property
    def resource_version(self) -> str: ...

    @property
    def obj(self) -> M_co: ...


def key_of(raw: Mapping[str, Any]) -> Key:
    """The cache key of a raw object: ``(metadata.namespace or "", metadata.name)``."""
    meta = raw.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def resource_version_of(raw: Mapping[str, Any]) -> str:
    return str((raw.get("metadata") or {}).get("resourceVersion") or "")


def is_stale(new: str, held: str) -> bool:
    """Whether an incoming copy at ``new`` is not news next to the held copy at ``held``.

    Equal versions are the same object state. An integer ``new`` below an integer ``held`` is an
    older state (a replay); with non-integer versions we cannot tell, so it is news.
    """
    if new == held:
        return True
    if new.isdecimal() and held.isdecimal():
        return int(new) < int(held)
    return False


def change_for(
    watch_type: str, *, held: Held[M] | None, incoming: Held[M] | None
) -> Event[M] | None:
    """The event one watch event makes, or ``None`` when it is not news.

    ``incoming`` is ``None`` when the object failed validation: an update to it is dropped (the
    cache keeps the last valid copy, see :mod:`kontinue.kube.watching`), but its deletion is
    still reported with the held copy. ``ADDED``/``MODIFIED`` are normalised by what the cache
    holds, because a selector or a resumed stream can send either for a key in either state.
    """
    if watch_type == "DELETED":
        if held is None:
            return None
        obj = incoming.obj if incoming is not None else held.obj
        return Event("DELETED", obj, held.obj)
    if watch_type not in ("ADDED", "MODIFIED") or incoming is None:
        return None
    if held is None:
        return Event("ADDED", incoming.obj)
    if is_stale(incoming.resource_version, held.resource_version):
        return None
    return Event("MODIFIED", incoming.obj, held.obj)


def reconcile(
    *,
    held: Mapping[Key, Held[M]],
    listed: Mapping[Key, Held[M]],
    invalid: Collection[Key] = (),
    resync: bool = False,
) -> tuple[dict[Key, Held[M]], list[Event[M]]]:
    """Fold a complete list into the store: the new store and the events that take us there.

    ``invalid`` are keys the list returned but that failed validation: the object still
    exists, so it is neither deleted nor replaced (the last valid copy stays, if any).
    Events come deletions first, then additions and modifications, each in key order, so the
    result does not depend on dict order.
    """
    store = reconciled(held=held, listed=listed, invalid=invalid)
    return store, list(changes(held=held, listed=listed, invalid=invalid, resync=resync))


def reconciled(
    *, held: Mapping[Key, Held[M]], listed: Mapping[Key, Held[M]], invalid: Collection[Key] = ()
) -> dict[Key, Held[M]]:
    """The store after a complete list (:func:`reconcile`'s first half)."""
    store: dict[Key, Held[M]] = dict(listed)
    for key in held.keys() - listed.keys():
        if key in invalid:
            store[key] = held[key]
    for key, before in held.items():
        now = listed.get(key)
        if now is not None and now.resource_version == before.resource_version:
            store[key] = before  # same state: keep the object callers already hold
    return store


def changes(
    *,
    held: Mapping[Key, Held[M]],
    listed: Mapping[Key, Held[M]],
    invalid: Collection[Key] = (),
    resync: bool = False,
) -> Iterator[Event[M]]:
    """The events of a complete list (:func:`reconcile`'s second half), made one at a time: a
    packed cache's objects are parsed as each event is reached, never all at once."""
    for key in sorted(held.keys() - listed.keys()):
        if key not in invalid:
            yield Event("DELETED", held[key].obj, held[key].obj)
    for key in sorted(listed):
        now, before = listed[key], held.get(key)
        if before is None:
            yield Event("ADDED", now.obj)
        elif now.resource_version != before.resource_version:
            yield Event("MODIFIED", now.obj, before.obj)
        elif resync:
            yield Event("SYNC", before.obj)


def counts(
    *, held: Mapping[Key, Held[M]], listed: Mapping[Key, Held[M]], invalid: Collection[Key] = ()
) -> dict[str, int]:
    """How many ADDED, MODIFIED and DELETED events :func:`changes` makes (for the log line)."""
    gone = held.keys() - listed.keys()
    return {
        "ADDED": len(listed.keys() - held.keys()),
        "MODIFIED": sum(
            1
            for key, now in listed.items()
            if key in held and held[key].resource_version != now.resource_version
        ),
        "DELETED": len(gone - set(invalid)),
    }
