"""webhook/fast_path.py answers only what the full path answers, byte for byte.

The fast path decides a pod CREATE that is not opted in from the parsed JSON, before any model
(issue 14). Its answer must be the full path's (:func:`webhook.app.answer` with
:func:`webhook.admission.mutate`, what ``/mutate`` serves otherwise) whenever it gives one, so
these properties compare the two over the fuzz suite's inputs (tests/fuzz/inputs.py: recorded
reviews bent a few places at a time), over inputs bent only in the AdmissionReview envelope
(where the fast path reads the fields itself instead of through the pydantic model), and over
the unchanged seeds, where the fast path must also answer *every* pod the full path finds not
opted in (else it would be correct by never answering).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import inputs, runs
from webhook import admission, fast_path, freshness, metrics, review
from webhook import app as app_module
from webhook import settings as settings_module
from webhook import state as state_module

Obj = dict[str, Any]
CONFIG = settings_module.Settings(image="registry.example/kontinue:fuzz")


def _full(body: bytes, state: state_module.State) -> app_module.Answer:
    return app_module.answer(body, admission.mutate, path="/mutate", state=state, config=CONFIG)


def _fast(body: bytes, state: state_module.State) -> bytes | None:
    try:
        loaded = review.load(body)
    except ValueError:
        return None  # never reaches the fast path (webhook/app.py _serve)
    return fast_path.answer(loaded, state=state)


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
