"""The properties every answer of the webhook keeps, whatever the input (issue 11, "Fuzz").

:func:`check` sends one :class:`~tests.fuzz.inputs.Case` through :func:`webhook.app.answer` (the
function the HTTP handler serves) and returns what is wrong with the answer:

1. it never raises, never answers 5xx, and never takes the "internal error" path (a rule that
   raised: logged with a traceback, admitted without changes);
2. HTTP 200 answers are AdmissionReviews whose ``response.uid`` echoes the request's, with a
   bounded message and bounded warnings; anything else is a plain-text 400;
3. every returned patch applies (RFC 6902, strict as the apiserver's json-patch) to the object
   sent, and leaves a valid object: the shape an apiserver guarantees (:mod:`webhook.shape`),
   no pod-validation error that was not already there (``tests/unit/webhook/support.py``
   ``pod_errors``), and — for a pod that carried no Kontinue key before — a pod our own
   validating webhook admits.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

from kontinue import keys
from tests.fuzz.inputs import Case
from tests.unit.webhook import support
from webhook import admission, review, settings, shape
from webhook import app as app_module

Obj = dict[str, Any]
CONFIG = settings.Settings(image="registry.example/kontinue:fuzz")


def _decide(path: str) -> app_module.Decide:
    return admission.mutate if path == "/mutate" else admission.validate


def _errors(check: Callable[[Obj], list[str]], obj: Obj) -> set[str] | None:
    """The checker's errors, without the values they quote (``duplicate names [a, a]`` and
    ``duplicate names [a, a, b]`` are the same error: the input had it already)."""
    try:
        return {re.sub(r"\s*\[[^\]]*\]$", "", e) for e in check(obj)}
    except Exception:
        return None  # the checker cannot read it: nothing to compare


def _carries_kontinue_keys(obj: Obj) -> bool:
    meta = obj.get("metadata") or {}
    if set(meta.get("annotations") or {}) & keys.RESERVED_POD_ANNOTATIONS:
        return True
    if keys.CHECKPOINT_FINALIZER in (meta.get("finalizers") or []):
        return True
    spec = obj.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return any(
        str(env.get("name", "")).startswith("KONTINUE_")
        for container in containers
        for env in container.get("env") or []
    )


def _patch_problems(case: Case, request: review.AdmissionRequest, patch: list[Obj]) -> list[str]:
    obj = request.object or {}
    try:
        patched = support.apply_patch(obj, patch)
    except (support.PatchError, KeyError, IndexError, ValueError, TypeError) as exc:
        return [f"patch does not apply: {exc}"]
    problems = [
        f"patched object: {e}"
        for e in shape.problems(group=request.kind.group, kind=request.kind.kind, obj=patched)
    ]
    if request.kind.kind == "Pod":
        before, after = _errors(support.pod_errors, obj), _errors(support.pod_errors, patched)
        if before is not None and after is None:
            problems.append("patched pod no longer readable by the pod validation")
        elif before is not None and after is not None and after - before:
            problems.append(f"patch made the pod invalid: {sorted(after - before)}")
        if not _carries_kontinue_keys(obj) and not problems:
            body = support.request_for(
                patched,
                namespace=request.namespace,
                username=request.user_info.username,
                uid=request.uid,
            )
            again = app_module.answer(
                json.dumps(body).encode(),
                admission.validate,
                path="/validate",
                state=case.state,
                config=CONFIG,
            )
            verdict = again.verdict
            if again.status != 200 or verdict is None or not verdict.allowed:
                problems.append(f"our validation denies our own mutation: {again.body[:300]!r}")
    return problems


def check(case: Case) -> list[str]:
    """What is wrong with the webhook's answer to ``case`` (empty: nothing)."""
    try:
        result = app_module.answer(
            case.body, _decide(case.path), path=case.path, state=case.state, config=CONFIG
        )
    except Exception as exc:
        return [f"raised {type(exc).__name__}: {exc}"]
    if result.status != 200:
        if result.status != 400 or result.content_type != "text/plain":
            return [f"HTTP {result.status} {result.content_type}: {result.body[:200]!r}"]
        return [] if len(result.body) <= review.MAX_MESSAGE * 4 else ["400 body not bounded"]
    request = review.parse(case.body).request
    answer: Obj = json.loads(result.body)
    problems: list[str] = []
    response = answer.get("response") or {}
    if answer.get("apiVersion") != review.API_VERSION or answer.get("kind") != review.KIND:
        problems.append(f"not an AdmissionReview: {result.body[:200]!r}")
    if response.get("uid") != request.uid:
        problems.append(f"uid {response.get('uid')!r} is not the request's {request.uid!r}")
    if len((response.get("status") or {}).get("message", "")) > review.MAX_MESSAGE:
        problems.append("message not bounded")
    warnings = response.get("warnings") or []
    if len(warnings) > review.MAX_WARNINGS or any(len(w) > review.MAX_WARNING for w in warnings):
        problems.append("warnings not bounded")
    if any("internal error" in w for w in warnings):
        problems.append(f"a rule raised (admitted without changes): {warnings}")
    if "patch" in response:
        patch = json.loads(base64.b64decode(response["patch"]))
        problems += _patch_problems(case, request, patch)
    return problems
