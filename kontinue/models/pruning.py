"""Slim views: a raw object cut down to the fields a model names, before it is cached.

The watch caches of the queue bridge hold thousands of pods, Jobs and Workloads; what the
decisions read is the handful of fields the models in :mod:`kontinue.models` declare (under
``mypy --strict`` code can only read declared attributes). :func:`prune` keeps exactly those,
recursively, and drops the rest — ``metadata.managedFields`` (about 1-2 KB per object from a real
kube-apiserver), volumes' sources, probes, security contexts, ``podIPs``, the newer container
status fields — the way a client-go informer takes a transform before it stores an object
(kubernetes/kubernetes ``staging/src/k8s.io/client-go/tools/cache/shared_informer.go``,
``SetTransform``).

A field typed as a model (or a list of, or an optional one) is pruned by that model's own
fields; any other declared field (a ``dict[str, Any]``, a string, a list of strings) is kept
whole. Unknown ("extra") fields, which :class:`kontinue.models.base.UpstreamModel` would keep,
are dropped: a pruned object must never be written back whole (the bridge never does: its
writes are patches and applies of its own fields).
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Union

import pydantic

Shape = dict[str, "Shape | None"]
"""Wire key -> the shape of a nested model under it, or ``None`` (keep the value whole)."""


def _nested(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The model a field holds (itself, in a list, or optional), else ``None``."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        found = [m for a in typing.get_args(annotation) if (m := _nested(a)) is not None]
        return found[0] if len(found) == 1 else None
    if origin is list:
        args = typing.get_args(annotation)
        return _nested(args[0]) if args else None
    if typing.get_origin(annotation) is typing.Annotated:
        return _nested(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    return None


@functools.cache
def shape(model: type[pydantic.BaseModel]) -> Shape:
    """Which wire keys of ``model`` to keep, and how to prune under each."""
    found: Shape = {}
    for name, field in model.model_fields.items():
        key = field.validation_alias if isinstance(field.validation_alias, str) else None
        key = key or field.alias or name
        nested = _nested(field.annotation)
        found[key] = shape(nested) if nested is not None else None
    return found


def _prune(value: Any, keep: Shape) -> Any:
    if isinstance(value, dict):
        return {
            k: v if (sub := keep[k]) is None else _prune(v, sub)
            for k, v in value.items()
            if k in keep
        }
    if isinstance(value, list):
        return [_prune(item, keep) for item in value]
    return value  # not the shape the model expects: left for validation to report


def prune(model: type[pydantic.BaseModel], raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with only the fields ``model`` declares, recursively (a new dict; ``raw`` is
    not changed)."""
    pruned: dict[str, Any] = _prune(raw, shape(model))
    return pruned
