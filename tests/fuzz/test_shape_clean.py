"""webhook/shape.py decides a clean pod without walking it; the walk finds the same (nothing).

``shape.problems`` first asks ``_clean_pod`` (no field paths built) and walks the pod only when
that does not pass it (issue 14). Over the fuzz suite's inputs (recorded reviews bent a few
places at a time, many inside the pod's metadata and spec) its answer must be the walk's.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import inputs, runs
from webhook import review, shape


def _objects(body: bytes) -> tuple[Any, Any] | None:
    try:
        loaded = review.load(body)
    except ValueError:
        return None
    request = loaded.get("request") if isinstance(loaded, dict) else None
    if not isinstance(request, dict):
        return None
    obj, old = request.get("object"), request.get("oldObject")
    return (
        obj if isinstance(obj, dict) else None,
        old if isinstance(old, dict) else None,
    )


def _same(body: bytes) -> None:
    objects = _objects(body)
    if objects is None:
        return
    obj, old = objects
    for pair in ((obj, old), (obj, None), (old, None)):
        got = shape.problems(group="", kind="Pod", obj=pair[0], old=pair[1])
        assert got == shape.walked(group="", kind="Pod", obj=pair[0], old=pair[1])


@runs.derandomized(1500)
@given(inputs.cases())
def test_a_pod_found_clean_is_one_the_walk_finds_nothing_in(case: inputs.Case) -> None:
    _same(case.body)


PODS = [
    s
    for s in inputs.SEEDS
    if (s["request"].get("kind") or {}).get("kind") == "Pod"
    and isinstance(s["request"].get("object"), dict)
]


@st.composite
def _bent_pods(draw: st.DrawFn) -> bytes:
    """A seed pod bent 1-3 times inside the object itself (its metadata and spec)."""
    seed = copy.deepcopy(draw(st.sampled_from(PODS)))
    for _ in range(draw(st.integers(1, 3))):
        draw(inputs._mutate(seed["request"]["object"]))
    return json.dumps(seed).encode("utf-8", "surrogatepass")


@runs.derandomized(1500)
@given(_bent_pods())
def test_a_bent_pod_found_clean_is_one_the_walk_finds_nothing_in(body: bytes) -> None:
    _same(body)


def test_the_seeds_pods_are_clean_and_a_bent_one_is_walked() -> None:
    pods = PODS
    assert len(pods) >= 3
    for seed in pods:
        assert shape._clean_pod(seed["request"]["object"])
        _same(json.dumps(seed).encode())
    bent = json.loads(json.dumps(pods[0]["request"]["object"]))
    bent["spec"]["containers"][0]["env"] = [{"value": "no name"}]
    assert not shape._clean_pod(bent)
    (found,) = shape.problems(group="", kind="Pod", obj=bent)
    assert found.path == "spec.containers[0].env[0].name"
