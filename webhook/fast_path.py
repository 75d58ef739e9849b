"""The answer to a pod CREATE that is not opted in, decided from the request body in one pass.

Most pods a webhook sees are not Kontinue's (the manifests scope it to pods, the apiserver sends
every pod CREATE of a selected namespace), and for them the full path (:func:`webhook.app.answer`:
the body parsed, the envelope validated into :class:`webhook.review.AdmissionReview`, the shape
checks, the dispatch, the encoded answer) ends in the same few bytes: ``allowed: true``, nothing
else. Here that answer is reached by one pydantic-core validation of the body's JSON against
:class:`_Review`, a schema of only the fields the decision reads: the parse and the checks of
envelope and shape run in pydantic-core's compiled code, and only the fields named below become
Python objects (the rest of the pod — its managedFields, commands, probes — is parsed and
dropped). On a quiet webhook this is most of the per-review CPU (issue 14, docs/benchmarks.md).

:func:`answer` is a *proof*, not a second set of rules: it answers only when the full path
would certainly give exactly this answer, and returns ``None`` for everything else (which then
takes the full path):

* the body is JSON that pydantic-core's parser reads (the full path's parser: same limits,
  duplicate keys resolved the same way, last one wins) and whose envelope is one
  :class:`~webhook.review.AdmissionReview` validation accepts, checked strictly (the camelCase
  keys a kube-apiserver sends, JSON types as they arrive; any doubt is ``None``);
* the request is a ``/mutate`` Pod CREATE without a subresource or ``oldObject``;
* the pod has the shape :func:`webhook.shape.problems` passes unwalked (``_clean_pod``: the
  schema below says it in types) and its namespace is the request's
  (:func:`webhook.shape.namespace_problems`) — what :func:`webhook.app.respond` checks before
  deciding;
* :func:`kontinue.optin.decide` says not opted in, without a warning (what
  :func:`webhook.admission.mutate_pod` decides first, by the same call).

Then the full path's answer is :func:`webhook.review.encode` of ``review.allow()``, which
:func:`encoded` writes from a template. tests/fuzz/test_fast_path.py checks, over the fuzz
suite's inputs, that every answer given here is byte for byte the full path's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

import pydantic
import pydantic_core
from typing_extensions import TypedDict

from kontinue import optin
from webhook import shape
from webhook import state as state_module

_READ = pydantic.ConfigDict(extra="ignore", strict=True)
"""Strict: a JSON string is a ``str``, an object a map, nothing is coerced. Fields not named
are parsed and dropped, not converted."""

_ALL = pydantic.ConfigDict(extra="forbid", strict=True)
"""For the envelope: a key an ``admission.k8s.io/v1`` AdmissionReview does not have (a
snake_case field name the model would also accept, say) is not decided here."""

_Items = pydantic.Field(max_length=shape.MAX_ITEMS)


@pydantic.with_config(_READ)
class _Map(TypedDict, total=False):
    """Any JSON object, its content unread."""


@pydantic.with_config(_READ)
class _Owner(TypedDict):
    apiVersion: str
    kind: str
    name: str
    uid: str


@pydantic.with_config(_READ)
class _Meta(TypedDict, total=False):
    name: str | None
    namespace: str | None
    generateName: str | None
    uid: str | None
    labels: dict[str, str] | None
    annotations: dict[str, str] | None
    finalizers: Annotated[list[str], _Items] | None
    ownerReferences: Annotated[list[_Owner], _Items] | None


@pydantic.with_config(_READ)
class _Resources(TypedDict, total=False):
    limits: _Map | None
    requests: _Map | None


@pydantic.with_config(_READ)
class _Named(TypedDict):
    name: str


@pydantic.with_config(_READ)
class _Container(TypedDict):
    name: str
    resources: NotRequired[_Resources | None]
    securityContext: NotRequired[_Map | None]
    env: NotRequired[Annotated[list[_Named], _Items] | None]
    volumeMounts: NotRequired[Annotated[list[_Map], _Items] | None]


@pydantic.with_config(_READ)
class _Spec(TypedDict, total=False):
    initContainers: Annotated[list[_Container], _Items] | None
    containers: Annotated[list[_Container], _Items] | None
    volumes: Annotated[list[_Map], _Items] | None


@pydantic.with_config(_READ)
class _Pod(TypedDict):
    metadata: NotRequired[_Meta | None]
    spec: _Spec


@pydantic.with_config(_READ)
class _PodKind(TypedDict):
    group: NotRequired[Literal[""]]
    version: str
    kind: Literal["Pod"]


@pydantic.with_config(_READ)
class _Resource(TypedDict):
    group: NotRequired[str]
    version: str
    resource: str


@pydantic.with_config(_READ)
class _User(TypedDict, total=False):
    username: str
    uid: str | None
    groups: list[str]


@pydantic.with_config(_ALL)
class _Request(TypedDict):
    uid: Annotated[str, pydantic.Field(min_length=1)]
    kind: _PodKind
    resource: _Resource
    subResource: NotRequired[None]
    requestKind: NotRequired[Any]
    requestResource: NotRequired[Any]
    requestSubResource: NotRequired[Any]
    name: NotRequired[str | None]
    namespace: NotRequired[str | None]
    operation: Literal["CREATE"]
    userInfo: NotRequired[_User]
    object: _Pod
    oldObject: NotRequired[None]
    dryRun: NotRequired[bool]
    options: NotRequired[_Map | None]


@pydantic.with_config(_ALL)
class _Review(TypedDict):
    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: _Request


_READER = pydantic.TypeAdapter(_Review)

REQUEST_KEYS = frozenset(_Request.__annotations__)
"""Every key an ``admission.k8s.io/v1`` AdmissionRequest has."""

_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'
_TAIL = b',"allowed":true}}'


def encoded(uid: str) -> bytes:
    """``review.encode(uid, review.allow())``, from a template."""
    return _HEAD + pydantic_core.to_json(uid) + _TAIL


def _annotations_fit(annotations: dict[str, str] | None) -> bool:
    """What ``shape._clean_meta`` checks besides types: at most 256 KiB of annotations."""
    if not annotations:
        return True
    size = sum(map(len, annotations)) + sum(map(len, annotations.values()))
    return size <= shape.TOTAL_ANNOTATION_BYTES


def answer(body: bytes, *, state: state_module.State) -> bytes | None:
    """The ``/mutate`` answer body for ``body`` when it is a pod that is not opted in and the
    full path would answer ``allowed: true`` and nothing more (see the module); else ``None``.

    Never raises: anything unexpected is ``None``, and the full path answers (and logs) it."""
    try:
        request = _READER.validate_json(body)["request"]
    except ValueError:  # pydantic.ValidationError is one
        return None
    try:
        meta = request["object"].get("metadata") or {}
        labels, annotations = meta.get("labels"), meta.get("annotations")
        if not _annotations_fit(annotations):
            return None
        request_namespace, own = request.get("namespace"), meta.get("namespace")
        if own and request_namespace and own != request_namespace:
            return None  # shape.namespace_problems
        # webhook.admission.mutate_pod: the namespace and the opt-in decision
        namespace = request_namespace or own or ""
        marks = optin.Marks(labels or {}, annotations or {})
        decision = optin.decide(marks, namespace=namespace, state=state)
        if decision.opted_in or decision.warnings:
            return None
        return encoded(request["uid"])
    except Exception:
        return None
