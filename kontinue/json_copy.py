"""Copying JSON values: what ``copy.deepcopy`` does for them, a few times faster.

Objects read from the Kubernetes API are JSON as parsed: dicts, lists, strings, numbers,
booleans and ``None``, with no shared or cyclic parts, so ``copy.deepcopy``'s memo of what it has
already copied is pure overhead (issue 14, docs/benchmarks.md). Used where a JSON object is
copied on a hot path: the webhook's patch (webhook/plumbing.py) and the API emulator's store,
reads and writes (emulator/apiserver/).
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar, cast

_T = TypeVar("_T")


def copied(value: _T) -> _T:
    """A copy of a JSON value, equal to ``copy.deepcopy(value)``: dicts and lists copied all the
    way down, strings, numbers, booleans and ``None`` shared (immutable); anything else is
    ``copy.deepcopy``'s. A value holding one dict or list twice gets two copies (deepcopy would
    keep them one), as a round trip through JSON would."""
    return cast(_T, _copied(value))


def _copied(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is list:
        return [_copied(item) for item in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)
