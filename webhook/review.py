"""AdmissionReview ``admission.k8s.io/v1`` in and out: the wire contract with the apiserver.

Two error channels, never mixed (kopf ``kopf/_kits/webhooks.py``; docs/webhook.md, "The wire
contract"):

* a review we cannot read (not JSON, not an ``admission.k8s.io/v1`` AdmissionReview, no
  ``request.uid``) is the *caller's* bug: :class:`MalformedReview`, which the HTTP layer turns
  into HTTP 400 with the cause;
* an object the rules reject is a normal answer: HTTP 200 with ``allowed: false`` and
  ``status {code, reason, message}`` (422 Invalid for bad values, 403 Forbidden for keys the
  requester may not touch).

Every answer echoes ``apiVersion``, ``kind`` and ``request.uid``; a patch travels as base64 JSON
Patch with ``patchType: JSONPatch``; soft problems travel as ``warnings``. Nothing here decides
anything; :mod:`webhook.admission` does.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any, Literal

import pydantic
import pydantic_core
from pydantic import alias_generators

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

JsonPatchOp = dict[str, Any]
"""One RFC 6902 operation: ``{"op": "add", "path": "/metadata/finalizers", "value": [...]}``."""


class MalformedReview(ValueError):
    """The request body is not an AdmissionReview we can answer (HTTP 400)."""


class _Wire(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(
        extra="allow", populate_by_name=True, alias_generator=alias_generators.to_camel
    )


class GroupVersionKind(_Wire):
    group: str = ""
    version: str
    kind: str


class GroupVersionResource(_Wire):
    group: str = ""
    version: str
    resource: str


class UserInfo(_Wire):
    username: str = ""
    uid: str | None = None
    groups: list[str] = pydantic.Field(default_factory=list)


Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class AdmissionRequest(_Wire):
    uid: str = pydantic.Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str | None = None
    name: str | None = None
    namespace: str | None = None
    operation: Operation
    user_info: UserInfo = pydantic.Field(default_factory=UserInfo)
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    dry_run: bool = False
    options: dict[str, Any] | None = None


class AdmissionReview(_Wire):
    api_version: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


def parse(body: bytes) -> AdmissionReview:
    """Read a request body; :class:`MalformedReview` says which field is wrong and why.

    Parsed by pydantic-core: its JSON parser (``from_json``) builds the objects, then the
    envelope is validated from them (python mode). Same parser and limits as
    ``model_validate_json`` (recursion depth, ``NaN``, big integers, duplicate keys), and for the
    fields here python-mode validation of parsed JSON accepts exactly what JSON-mode does —
    but it is ~30% cheaper (no per-field JSON-mode dispatch; issue 14, docs/benchmarks.md). A
    body it refuses is parsed again by ``model_validate_json``, whose errors name the cause.
    """
    try:
        return AdmissionReview.model_validate(pydantic_core.from_json(body))
    except ValueError:  # pydantic.ValidationError is one
        pass
    try:
        return AdmissionReview.model_validate_json(body)
    except pydantic.ValidationError as exc:
        found = exc.errors()
        if found[0]["type"] == "json_invalid":
            raise MalformedReview(f"body is not JSON: {found[0]['msg']}") from None
        if found[0]["type"] == "model_type" and not found[0]["loc"]:
            raise MalformedReview("body is not a JSON object") from None
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in found[:5]
        )
        if len(found) > 5:
            problems += f"; and {len(found) - 5} more"
        raise MalformedReview(f"not an {API_VERSION} {KIND}: {problems}") from None


def load(body: bytes) -> Any:
    """``body`` parsed as :func:`parse` parses it (``ValueError`` when it is not JSON)."""
    return pydantic_core.from_json(body)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the rules decided for one request; :func:`response` turns it into the wire form.

    ``code``/``reason``/``message`` matter only when ``allowed`` is false. ``decision`` and
    ``why`` never reach the wire (nor equality): what the mutating rules did with an opted-in
    object (one of webhook/metrics.py ``DECISIONS``) and why, for the webhook's metrics and
    Events.
    """

    allowed: bool = True
    patch: tuple[JsonPatchOp, ...] = ()
    warnings: tuple[str, ...] = ()
    code: int = 200
    reason: str = ""
    message: str = ""
    decision: str = dataclasses.field(default="", compare=False)
    why: str = dataclasses.field(default="", compare=False)
    cause: str = dataclasses.field(default="", compare=False)
    """For a restore: the traceparent of the eviction behind its Checkpoint (tracing.py)."""
    claim: str = dataclasses.field(default="", compare=False)
    """For ``claim_missing``: the checkpoint claim the namespace lacks (webhook/claims.py)."""


MAX_MESSAGE = 2048
"""Longest denial message sent (characters); a longer one is cut, saying how much was left out."""

MAX_WARNINGS = 8
"""Most warnings sent; the apiserver shows each to the user (kubectl prints them all)."""

MAX_WARNING = 256
"""Longest warning sent: the apiserver may truncate longer ones itself (``admission.k8s.io/v1``
``AdmissionResponse.warnings``: "warnings over 256 characters ... may be truncated")."""


def bounded(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to at most ``limit`` characters, ending with how many were left out."""
    if len(text) <= limit:
        return text
    tail = f"... ({len(text) - limit} more characters)"
    return text[: max(0, limit - len(tail))] + tail


def allow(
    patch: list[JsonPatchOp] | tuple[JsonPatchOp, ...] = (),
    warnings: list[str] | tuple[str, ...] = (),
    *,
    decision: str = "",
    why: str = "",
    cause: str = "",
    claim: str = "",
) -> Verdict:
    return Verdict(
        patch=tuple(patch),
        warnings=tuple(warnings),
        decision=decision,
        why=why,
        cause=cause,
        claim=claim,
    )


def invalid(message: str) -> Verdict:
    """A bad value in the object (HTTP semantics of 422 Unprocessable Entity)."""
    return Verdict(allowed=False, code=422, reason="Invalid", message=message)


def forbidden(message: str) -> Verdict:
    """The requester may not make this change (403 Forbidden)."""
    return Verdict(allowed=False, code=403, reason="Forbidden", message=message)


def bad_request(message: str) -> Verdict:
    """An object no apiserver would send (a map that is a list, a pod without spec): 400."""
    return Verdict(allowed=False, code=400, reason="BadRequest", message=message)


def encode_patch(patch: tuple[JsonPatchOp, ...] | list[JsonPatchOp]) -> str:
    # pydantic-core's serializer: the same JSON as json.dumps, in about 40% of the time.
    return base64.b64encode(pydantic_core.to_json(list(patch))).decode()


def response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview answer: ``uid`` echoed; a patch only when there is one.

    Whatever the verdict carries, the answer stays small: the message is cut to
    :data:`MAX_MESSAGE` characters, warnings to :data:`MAX_WARNINGS` of :data:`MAX_WARNING`.
    """
    answer: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if verdict.allowed and verdict.patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = encode_patch(verdict.patch)
    if not verdict.allowed:
        answer["status"] = {
            "code": verdict.code,
            "reason": verdict.reason,
            "message": bounded(verdict.message),
        }
    if verdict.warnings:
        shown = [bounded(w, MAX_WARNING) for w in verdict.warnings[:MAX_WARNINGS]]
        if len(verdict.warnings) > MAX_WARNINGS:
            shown[-1] = f"kontinue: {len(verdict.warnings) - MAX_WARNINGS + 1} more warnings"
        answer["warnings"] = shown
    return {"apiVersion": API_VERSION, "kind": KIND, "response": answer}


def encode(uid: str, verdict: Verdict) -> bytes:
    """:func:`response` as the JSON bytes of the HTTP body."""
    return pydantic_core.to_json(response(uid, verdict))
