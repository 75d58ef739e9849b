"""Building blocks shared by every model: the two model bases, time, ObjectMeta, Condition.

Kubernetes writes camelCase; Python reads snake_case. Both bases alias every field to camelCase
and accept either name on input. Dump with :func:`to_dict` so aliases are used and fields that
were never set stay absent (a round trip returns what came in).
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any, TypeVar

import pydantic
from pydantic import alias_generators

from kontinue.models import errors


def format_time(value: datetime.datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, seconds precision: the shape of ``metav1.Time``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(value: datetime.datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, to the microsecond: the shape of ``metav1.MicroTime``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str) -> datetime.datetime:
    """``metav1.Time`` / ``metav1.MicroTime`` text (RFC 3339, ``Z`` or an offset) as an aware
    datetime; a value without an offset is taken as UTC. ``ValueError`` if it is not one."""
    parsed = datetime.datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


Time = Annotated[datetime.datetime, pydantic.PlainSerializer(format_time, return_type=str)]
"""``metav1.Time``: parsed to an aware datetime, written back as ``2026-01-02T03:04:05Z``."""


def now() -> datetime.datetime:
    """The current time truncated to seconds, as Kubernetes stores it."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


class UpstreamModel(pydantic.BaseModel):
    """A view of an object someone else owns: unknown fields are kept, never dropped."""

    model_config = pydantic.ConfigDict(
        extra="allow",
        populate_by_name=True,
        alias_generator=alias_generators.to_camel,
    )


class OwnModel(pydantic.BaseModel):
    """A part of Kontinue's own API: unknown fields are errors that name the field."""

    model_config = pydantic.ConfigDict(
        extra="forbid",
        populate_by_name=True,
        use_attribute_docstrings=True,
        alias_generator=alias_generators.to_camel,
    )


class OwnerReference(UpstreamModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(UpstreamModel):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    owner_references: list[OwnerReference] | None = None

    def label(self, key: str) -> str | None:
        return (self.labels or {}).get(key)

    def annotation(self, key: str) -> str | None:
        return (self.annotations or {}).get(key)

    def controller_ref(self) -> OwnerReference | None:
        """The owner with ``controller: true``: the one object that manages this one."""
        return next((ref for ref in self.owner_references or [] if ref.controller), None)


class Condition(UpstreamModel):
    """The fields ``metav1.Condition`` shares with pod, job and PodGroup conditions.

    ``observedGeneration`` and ``lastProbeTime`` exist on some of them only; they ride along
    as extra fields, so a round trip keeps them.
    """

    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: Time | None = None


def find_condition(conditions: list[Condition] | None, type_: str) -> Condition | None:
    return next((c for c in conditions or [] if c.type == type_), None)


def is_true(conditions: list[Condition] | None, type_: str) -> bool:
    condition = find_condition(conditions, type_)
    return condition is not None and condition.status == "True"


class KubeObject(UpstreamModel):
    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or ""


Model = TypeVar("Model", bound=pydantic.BaseModel)


def parse(model: type[Model], data: Any) -> Model:
    """Validate ``data`` as ``model``, turning pydantic's error into one that names the fields."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise errors.InvalidObject.from_validation(model.__name__, exc) from None


def to_dict(obj: pydantic.BaseModel) -> dict[str, Any]:
    """The wire form: camelCase keys, no ``None``.

    An upstream object dumps only the fields that were in it (``exclude_unset``), so writing
    back an object we read never adds a field its owner did not set; our own objects dump
    their defaults too, so what is stored is what the code meant.
    """
    return obj.model_dump(
        mode="json",
        by_alias=True,
        exclude_none=True,
        exclude_unset=isinstance(obj, UpstreamModel),
    )
