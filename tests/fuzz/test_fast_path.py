"""webhook/fast_path.py answers only what the full path answers, byte for byte.

The fast path decides a pod CREATE that is not opted in from the body, through one schema of
the fields it reads, before any model (issue 14). Its answer must be the full path's
(:func:`webhook.app.answer` with :func:`webhook.admission.mutate`, what ``/mutate`` serves
otherwise) whenever it gives one, so these properties compare the two over the fuzz suite's
inputs (tests/fuzz/inputs.py: recorded reviews bent a few places at a time), over inputs bent
only in the AdmissionReview envelope, over pods bent in every one place with every kind of
wrong value (where the schema must be as strict as webhook/shape.py), and over the unchanged
seeds, where the fast path must also answer *every* pod the full path finds not opted in (else
it would be correct by never answering).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import inputs, runs
from webhook import admission, fast_path, freshness, metrics, review, shape
from webhook import app as app_module
from webhook import settings as settings_module
from webhook import state as state_module

Obj = dict[str, Any]
CONFIG = settings_module.Settings(image="registry.example/kontinue:fuzz")


def _full(body: bytes, state: state_module.State) -> app_module.Answer:
    return app_module.answer(body, admission.mutate, path="/mutate", state=state, config=CONFIG)


def _fast(body: bytes, state: state_module.State) -> bytes | None:
    return fast_path.answer(body, state=state)


def _plain(answer: app_module.Answer) -> bool:
    """The full path's answer is the one the fast path gives: allowed, not opted in, bare."""
    verdict = answer.verdict
    return (
        answer.status == 200
        and verdict is not None
        and verdict.allowed
        and verdict.decision == metrics.NOT_OPTED_IN
        and not verdict.patch
        and not verdict.warnings
    )


def _same(body: bytes, state: state_module.State) -> list[str]:
    """What differs between the fast path's answer (if it gives one) and the full path's."""
    fast = _fast(body, state)
    if fast is None:
        return []
    full = _full(body, state)
    problems = []
    if not _plain(full):
        problems.append(f"fast path answered; the full path decided {full.verdict!r}")
    if full.body != fast:
        problems.append(f"bodies differ: fast {fast!r}, full {full.body!r}")
    request = review.parse(body).request
    if freshness.wanted(request, state) is not None:  # the live read the fast path skips
        problems.append("the full path would read the lineage live")
    return problems


@runs.derandomized(1500)
@given(inputs.cases())
def test_every_fast_answer_is_the_full_paths_over_the_fuzz_inputs(case: inputs.Case) -> None:
    assert _same(case.body, case.state) == [], case.describe()


def _pod_seeds() -> list[Obj]:
    """Seeds that are pod CREATEs the full path answers "not opted in" in some state."""
    found = []
    for seed in inputs.SEEDS:
        body = json.dumps(seed).encode()
        if any(_plain(_full(body, state)) for state in inputs.STATES):
            found.append(seed)
    return found


POD_SEEDS = _pod_seeds()
ENVELOPE_KEYS = sorted(
    {*fast_path.REQUEST_KEYS, "sub_resource", "user_info", "old_object", "dry_run", "api_version"}
)


@st.composite
def _bent_envelopes(draw: st.DrawFn) -> tuple[bytes, int]:
    """A not-opted-in pod review with its envelope (the review's and the request's own keys,
    the request's kind, resource and userInfo) bent 1-3 times."""
    doc = copy.deepcopy(draw(st.sampled_from(POD_SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        request = doc.get("request")
        parents: list[Obj] = [doc]
        if isinstance(request, dict):
            parents.append(request)
            parents += [
                request[k]
                for k in ("kind", "resource", "userInfo")
                if isinstance(request.get(k), dict)
            ]
        parent = draw(st.sampled_from(parents))
        key = draw(
            st.sampled_from(sorted(parent) or ENVELOPE_KEYS) | st.sampled_from(ENVELOPE_KEYS)
        )
        action = draw(st.sampled_from(["replace", "delete", "interesting"]))
        if action == "delete":
            parent.pop(key, None)
        elif action == "replace":
            parent[key] = copy.deepcopy(draw(inputs.json_values))
        else:
            parent[key] = copy.deepcopy(draw(st.sampled_from(inputs.INTERESTING)))
    body = json.dumps(doc).encode("utf-8", "surrogatepass")
    return body, draw(st.integers(0, len(inputs.STATES) - 1))


@runs.derandomized(1500)
@given(_bent_envelopes())
def test_every_fast_answer_is_the_full_paths_over_bent_envelopes(case: tuple[bytes, int]) -> None:
    body, state_index = case
    assert _same(body, inputs.STATES[state_index]) == [], body[:400]


def test_there_are_pod_seeds_the_fast_path_is_for() -> None:
    assert len(POD_SEEDS) >= 3


@pytest.mark.parametrize("seed_index", range(len(inputs.SEEDS)))
@pytest.mark.parametrize("state_index", range(len(inputs.STATES)))
def test_a_real_review_not_opted_in_is_answered_by_the_fast_path(
    seed_index: int, state_index: int
) -> None:
    body = json.dumps(inputs.SEEDS[seed_index]).encode()
    state = inputs.STATES[state_index]
    full = _full(body, state)
    fast = _fast(body, state)
    request = review.parse(body).request
    is_pod_create = (
        request.kind.group == "" and request.kind.kind == "Pod" and request.operation == "CREATE"
    )
    if _plain(full) and is_pod_create and not request.sub_resource:
        assert fast == full.body
    else:
        assert fast is None


def test_the_template_is_the_encoded_answer() -> None:
    for uid in ("705ab4f5-6393-11e8-b7cc-42010a800002", "ü\x00\"\\'</", "\u2028", "a" * 300):
        assert fast_path.encoded(uid) == review.encode(uid, review.allow())


WRONG_VALUES: list[Any] = [
    None,
    0,
    1.5,
    True,
    "x",
    "x" * (shape.TOTAL_ANNOTATION_BYTES + 1),
    [],
    [None],
    [1],
    [{"name": "n"}] * (shape.MAX_ITEMS + 1),
    {},
    {"name": 1},
]
"""What a bent field may hold instead: every JSON type, the empty and odd containers, and
the longest list and string shape.py lets through, plus one."""


SHAPE_KEYS = [
    *("metadata", "name", "namespace", "generateName", "uid", "labels", "annotations"),
    *("finalizers", "ownerReferences", "apiVersion", "kind", "spec", "initContainers"),
    *("containers", "resources", "limits", "requests", "securityContext", "env"),
    *("volumeMounts", "volumes"),
]
"""Every field webhook/shape.py reads in a pod: added, wrongly typed, where a seed lacks it."""


def _places(pod: Obj, added: bool) -> list[tuple[Any, Any]]:
    """Where a bend lands: every place of ``pod`` (inputs._places order), or with ``added``
    every (map, shape key) outside managedFields, present or not."""
    places = inputs._places(pod, [])
    if not added:
        return places
    maps = [pod] + [p[k] for p, k in places if isinstance(p[k], dict)]
    unmanaged = [m for m in maps if "manager" not in m and "fieldsV1" not in m]
    return [(m, key) for m in unmanaged for key in SHAPE_KEYS]


def _bent_once(seed: Obj, at: int, value: Any, *, added: bool) -> bytes:
    """``seed`` with the ``at``-th place of its pod (:func:`_places`) set to ``value``."""
    doc = copy.deepcopy(seed)
    parent, key = _places(doc["request"]["object"], added)[at]
    parent[key] = copy.deepcopy(value)
    return json.dumps(doc).encode()


FAST_SEEDS = [
    seed
    for seed in POD_SEEDS
    if any(_fast(json.dumps(seed).encode(), state) for state in inputs.STATES)
]


def test_there_are_pods_the_fast_path_answers() -> None:
    assert len(FAST_SEEDS) >= 3


@pytest.mark.parametrize("seed_index", range(len(FAST_SEEDS)))
def test_a_pod_bent_in_any_one_place_is_answered_as_the_full_path_does(seed_index: int) -> None:
    """Every place of the pod (metadata, containers, env, mounts, volumes, managedFields...)
    given every kind of wrong value, against every state: the fast path's schema must not
    pass a shape the full path warns about (the random bends above reach few of these)."""
    seed = FAST_SEEDS[seed_index]
    answered = 0
    for added, values in ((False, WRONG_VALUES), (True, WRONG_VALUES[:5] + WRONG_VALUES[7:9])):
        for at in range(len(_places(copy.deepcopy(seed)["request"]["object"], added))):
            for value in values:
                body = _bent_once(seed, at, value, added=added)
                for state in inputs.STATES:
                    assert _same(body, state) == [], body[:400]
                    answered += _fast(body, state) is not None
    assert answered > 0  # some bends leave the pod a clean one, not opted in
