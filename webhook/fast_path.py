"""The answer to a pod CREATE that is not opted in, decided from the parsed JSON alone.

Most pods a webhook sees are not Kontinue's (the manifests scope it to pods, the apiserver sends
every pod CREATE of a selected namespace), and for them the full path (:func:`webhook.app.answer`:
the envelope validated into :class:`webhook.review.AdmissionReview`, the shape checks, the
dispatch, the encoded answer) ends in the same few bytes: ``allowed: true``, nothing else. Here
that answer is reached from the dict pydantic-core's JSON parser gives, before any model: on a
quiet webhook it is most of the per-review CPU (issue 14, docs/benchmarks.md).

:func:`answer` is a *proof*, not a second set of rules: it answers only when the full path
would certainly give exactly this answer, and returns ``None`` for everything else (which then
takes the full path, from the same parsed dict):

* the envelope is one :class:`~webhook.review.AdmissionReview` validation accepts, checked
  strictly (the camelCase keys a kube-apiserver sends, JSON types as they arrive; any doubt
  is ``None``);
* the request is a ``/mutate`` Pod CREATE without a subresource;
* :func:`kontinue.optin.decide` says not opted in, without a warning (what
  :func:`webhook.admission.mutate_pod` decides first, by the same call);
* :func:`webhook.shape.problems` and :func:`webhook.shape.namespace_problems` find nothing
  (what :func:`webhook.app.respond` checks before deciding, by the same calls).

Then the full path's answer is :func:`webhook.review.encode` of ``review.allow()``, which
:func:`encoded` writes from a template. tests/fuzz/test_fast_path.py checks, over the fuzz
suite's inputs, that every answer given here is byte for byte the full path's.
"""

from __future__ import annotations

from typing import Any

import pydantic_core

from kontinue import optin
from webhook import review, shape
from webhook import state as state_module

REVIEW_KEYS = frozenset({"apiVersion", "kind", "request"})
REQUEST_KEYS = frozenset(
    {
        "uid",
        "kind",
        "resource",
        "subResource",
        "requestKind",
        "requestResource",
        "requestSubResource",
        "name",
        "namespace",
        "operation",
        "userInfo",
        "object",
        "oldObject",
        "dryRun",
        "options",
    }
)
"""Every key an ``admission.k8s.io/v1`` AdmissionRequest has. Another key (a snake_case field
name the model would also accept, say) is not decided here."""

_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'
_TAIL = b',"allowed":true}}'


def encoded(uid: str) -> bytes:
    """``review.encode(uid, review.allow())``, from a template."""
    return _HEAD + pydantic_core.to_json(uid) + _TAIL


def _optional(value: Any, kind: type) -> bool:
    return value is None or type(value) is kind


def _gvk(value: Any, last: str) -> bool:
    """A GroupVersionKind (``last`` ``kind``) or GroupVersionResource (``resource``)."""
    return (
        type(value) is dict
        and type(value.get("version")) is str
        and type(value.get(last)) is str
        and type(value.get("group", "")) is str
    )


def _user(value: Any) -> bool:
    if value is None:
        return False  # present and null: validation refuses it
    if type(value) is not dict:
        return False
    groups = value.get("groups", [])
    return (
        type(value.get("username", "")) is str
        and _optional(value.get("uid"), str)
        and type(groups) is list
        and all(type(group) is str for group in groups)
    )


def pod_create(loaded: Any) -> dict[str, Any] | None:
    """The request of ``loaded`` (a parsed body) when it is a Pod CREATE without a subresource
    that :func:`webhook.review.parse` accepts, read the way it reads it; else ``None``."""
    if type(loaded) is not dict or not loaded.keys() <= REVIEW_KEYS:
        return None
    if loaded.get("apiVersion") != review.API_VERSION or loaded.get("kind") != review.KIND:
        return None
    request = loaded.get("request")
    if type(request) is not dict or not request.keys() <= REQUEST_KEYS:
        return None
    uid, kind = request.get("uid"), request.get("kind")
    if type(uid) is not str or not uid or not _gvk(kind, "kind"):
        return None
    assert kind is not None
    if kind.get("group", "") != "" or kind["kind"] != "Pod" or request.get("operation") != "CREATE":
        return None
    if request.get("subResource") is not None or not _gvk(request.get("resource"), "resource"):
        return None
    if type(request.get("object")) is not dict or not _optional(request.get("oldObject"), dict):
        return None
    if not (_optional(request.get("name"), str) and _optional(request.get("namespace"), str)):
        return None
    if "userInfo" in request and not _user(request["userInfo"]):
        return None
    if type(request.get("dryRun", False)) is not bool:
        return None
    if not _optional(request.get("options"), dict):
        return None
    return request


def answer(loaded: Any, *, state: state_module.State) -> bytes | None:
    """The ``/mutate`` answer body for ``loaded`` when it is a pod that is not opted in and the
    full path would answer ``allowed: true`` and nothing more (see the module); else ``None``.

    Never raises: anything unexpected is ``None``, and the full path answers (and logs) it."""
    try:
        request = pod_create(loaded)
        if request is None:
            return None
        obj: dict[str, Any] = request["object"]
        old: dict[str, Any] | None = request.get("oldObject")
        request_namespace: str | None = request.get("namespace")
        # webhook.admission.mutate_pod: the namespace and the opt-in decision
        namespace = request_namespace or (obj.get("metadata") or {}).get("namespace") or ""
        decision = optin.decide(optin.Marks.of(obj), namespace=namespace, state=state)
        if decision.opted_in or decision.warnings:
            return None
        # webhook.app._misshapen: a misshapen object is answered with a warning instead
        if shape.problems(group="", kind="Pod", obj=obj, old=old):
            return None
        if shape.namespace_problems(request_namespace, obj, old):
            return None
        return encoded(request["uid"])
    except Exception:
        return None
