"""The store of one watch cache: the objects it holds by key, how it holds them, and its reads.

:mod:`kontinue.kube.watching` runs the list/watch protocol and decides what goes in (with the
pure diff in :mod:`kontinue.kube.caching`); this module owns what is kept and how it is read.

Objects are validated into the cache's model at this boundary (:meth:`Store.admit`). One that
fails is logged with its field errors (once per resourceVersion) and skipped; the store keeps the
last valid copy of that key (if any).

Memory: by default the store keeps each object as its validated model. A cache of many objects
(the bridge's pods, Jobs, Workloads) can instead take a ``transform`` applied to each raw object
before it is validated (client-go's informer ``SetTransform``,
``staging/src/k8s.io/client-go/tools/cache/shared_informer.go``; the bridge passes
:func:`kontinue.models.pruning.prune`) and ``packed=True``: the store then keeps each object as
its compact JSON (:class:`Packed`, a few hundred bytes to a few KB, against 10-20 KiB for a
parsed model) and parses it again when read, keeping the last :data:`HOT_OBJECTS` read in a
small LRU.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Generic, TypeVar

import pydantic
import pydantic_core

from kontinue.kube import caching
from kontinue.models import base
from kontinue.models import errors as model_errors

log = logging.getLogger("kontinue.watch")

M = TypeVar("M", bound=pydantic.BaseModel)

Key = caching.Key
Transform = Callable[[dict[str, Any]], dict[str, Any]]

HOT_OBJECTS = 256
"""How many parsed objects a packed cache keeps for repeated reads (most recently read)."""


class Packed(Generic[M]):
    """One object of a packed cache: its compact JSON, parsed again on each :attr:`obj`.

    ``hot`` holds the model parsed at arrival until the cache has told its subscribers (so one
    arrival is parsed once), then it is dropped.
    """

    __slots__ = ("resource_version", "data", "model", "hot")

    def __init__(self, resource_version: str, data: bytes, model: type[M], hot: M | None) -> None:
        self.resource_version = resource_version
        self.data = data
        self.model = model
        self.hot = hot

    @property
    def obj(self) -> M:
        if self.hot is not None:
            return self.hot
        return self.model.model_validate_json(self.data)


class Store(Generic[M]):
    """The entries of one cache by ``(namespace, name)``, as models or :class:`Packed`.

    Writers (the watch cache) :meth:`put`, :meth:`remove` or :meth:`replace` entries made by
    :meth:`admit`; readers :meth:`get`, :meth:`items` or :meth:`each`. ``what`` names the cache
    in logs; ``on_invalid`` is called for each invalid object reported.
    """

    def __init__(
        self,
        model: type[M],
        *,
        transform: Transform | None = None,
        packed: bool = False,
        what: str = "",
        on_invalid: Callable[[], None] = lambda: None,
    ) -> None:
        self._model = model
        self._what = what
        self._on_invalid = on_invalid
        self._invalid: dict[Key, str] = {}  # key -> resourceVersion already reported invalid
        self._transform = transform
        self.packed = packed
        self._entries: dict[Key, caching.Held[M]] = {}
        self._sorted: list[M] | None = None  # items() in key order, until the store changes
        # packed stores: key -> (the entry it was parsed from, the model), most recent last
        self._hot: collections.OrderedDict[Key, tuple[caching.Held[M], M]] = (
            collections.OrderedDict()
        )

    # -- reading -------------------------------------------------------------------------------

    @property
    def entries(self) -> dict[Key, caching.Held[M]]:
        """The held entries by key (the watch cache diffs a re-list against them; do not edit)."""
        return self._entries

    def entry(self, key: Key) -> caching.Held[M] | None:
        return self._entries.get(key)

    def get(self, key: Key) -> M | None:
        """The held object, or ``None``."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if not self.packed:
            return entry.obj
        hot = self._hot.get(key)
        if hot is not None and hot[0] is entry:
            self._hot.move_to_end(key)
            return hot[1]
        obj = entry.obj
        self.remember(key, entry, obj)
        return obj

    def items(self) -> list[M]:
        """Every held object, ordered by (namespace, name); a new list the caller may keep.

        A packed store parses every object for this: iterate with :meth:`each` instead to hold
        one at a time."""
        if self.packed:
            return list(self.each())
        if self._sorted is None:
            self._sorted = [self._entries[key].obj for key in sorted(self._entries)]
        return list(self._sorted)

    def each(self) -> Iterator[M]:
        """The held objects in (namespace, name) order, one at a time: those still held when
        reached (the store may change between two steps of a slow consumer)."""
        for key in sorted(self._entries):
            entry = self._entries.get(key)
            if entry is None:
                continue
            hot = self._hot.get(key)
            yield hot[1] if hot is not None and hot[0] is entry else entry.obj

    def __len__(self) -> int:
        return len(self._entries)

    # -- writing -------------------------------------------------------------------------------

    def entry_of(self, raw: Mapping[str, Any], *, keep: bool = True) -> caching.Held[M]:
        """The entry for one raw object: transformed, validated into the model and, for a packed
        store, packed (keeping the parsed model as ``hot`` when ``keep``).

        Raises what validation raises (:class:`kontinue.models.errors.InvalidObject`) or what a
        transform raises."""
        version = caching.resource_version_of(raw)
        if self._transform is not None:
            raw = self._transform(dict(raw))
        obj = base.parse(self._model, raw)
        if self.packed:
            # compact UTF-8 JSON, as json.dumps(separators=(",", ":"), ensure_ascii=False)
            # writes it, in about a third of its time (docs/benchmarks.md, issue 14)
            data = pydantic_core.to_json(raw)
            return Packed(version, data, self._model, obj if keep else None)
        return caching.Entry(version, obj)

    def admit(
        self, key: Key, raw: Mapping[str, Any], *, report: bool = True, keep: bool = True
    ) -> caching.Held[M] | None:
        """The typed entry, or ``None`` (logged once per resourceVersion) if it fails validation.

        With a ``transform``, what is validated (and kept) is the transformed object."""
        try:
            entry = self.entry_of(raw, keep=keep)
        except Exception as exc:  # InvalidObject; or a validator bug, which must not stop us
            if report:
                problem = (
                    "; ".join(str(e) for e in exc.errors)
                    if isinstance(exc, model_errors.InvalidObject)
                    else repr(exc)
                )
                self._report_invalid(key, caching.resource_version_of(raw), problem)
            return None
        self._invalid.pop(key, None)
        return entry

    def forget_invalid(self, key: Key | None = None, *, keep: Collection[Key] = ()) -> None:
        """Forget that ``key`` was reported invalid (it was deleted); with no key, forget every
        key not in ``keep`` (after a re-list, whose invalid keys are ``keep``)."""
        if key is not None:
            self._invalid.pop(key, None)
        else:
            self._invalid = {k: rv for k, rv in self._invalid.items() if k in keep}

    def _report_invalid(self, key: Key, version: str, problem: str) -> None:
        if self._invalid.get(key) == version:
            return
        self._invalid[key] = version
        self._on_invalid()
        log.error(
            "skipping invalid object resource=%s object=%s rv=%s model=%s errors=%s",
            self._what,
            "/".join(part for part in key if part),
            version,
            self._model.__name__,
            problem,
        )

    def put(self, key: Key, entry: caching.Held[M]) -> None:
        self._entries[key] = entry
        self._sorted = None

    def remove(self, key: Key) -> None:
        del self._entries[key]
        self._hot.pop(key, None)
        self._sorted = None

    def replace(self, entries: dict[Key, caching.Held[M]]) -> None:
        """Hold exactly ``entries`` (after a re-list)."""
        self._entries = entries
        self._sorted = None

    def remember(self, key: Key, entry: caching.Held[M], obj: M) -> None:
        """Keep ``obj`` (parsed from ``entry``) as the most recently read of a packed store."""
        self._hot[key] = (entry, obj)
        self._hot.move_to_end(key)
        if len(self._hot) > HOT_OBJECTS:
            self._hot.popitem(last=False)
