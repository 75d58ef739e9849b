"""Label and field selectors, parsed once and matched against plain dict objects.

Labels copy staging/src/k8s.io/apimachinery/pkg/labels/selector.go (``=``, ``==``, ``!=``,
``in``, ``notin``, ``key``, ``!key``); fields copy pkg/fields/selector.go with the field set of
each kind's ``GetAttrs`` (pkg/registry/core/pod/strategy.go ``ToSelectableFields``): any kind
supports metadata.name and metadata.namespace; pods add spec.nodeName, status.phase and a few
more. An unknown field is a 400, as upstream, so a typo never silently matches everything.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from emulator.apiserver import statuses

Requirement = Callable[[Mapping[str, str]], bool]

_SET = re.compile(r"^\s*(!?)\s*([A-Za-z0-9._/-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_CMP = re.compile(r"^\s*([A-Za-z0-9._/-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses (``a in (x,y),b`` is two requirements)."""
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def _requirement(text: str) -> Requirement:
    if m := _CMP.match(text):
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _SET.match(text):
        bang, key, op, values_text = m.groups()
        if op is None:
            if bang:
                return lambda labels: key not in labels
            return lambda labels: key in labels
        if bang:
            raise statuses.bad_request(f"unable to parse requirement: {text!r}")
        values = {v.strip() for v in values_text.split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    raise statuses.bad_request(f"unable to parse requirement: {text!r}")


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(req(labels) for req in self.requirements)


def parse_labels(selector: str | None) -> LabelSelector:
    if not selector:
        return LabelSelector()
    return LabelSelector(tuple(_requirement(part) for part in _split(selector)))


def _expression(key: str, op: str, values: list[str]) -> Requirement:
    allowed = set(values)

    def test(labels: Mapping[str, str]) -> bool:
        if op == "In":
            return labels.get(key) in allowed
        if op == "NotIn":
            return labels.get(key) not in allowed
        if op == "Exists":
            return key in labels
        return key not in labels

    if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
        raise statuses.bad_request(f"{op!r} is not a valid label selector operator")
    return test


def from_label_selector(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A ``metav1.LabelSelector`` (matchLabels + matchExpressions), as webhooks and Jobs use."""
    if selector is None:
        return LabelSelector()
    reqs: list[Requirement] = [
        _expression(key, "In", [value])
        for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expr in selector.get("matchExpressions") or []:
        reqs.append(_expression(expr["key"], expr["operator"], expr.get("values") or []))
    return LabelSelector(tuple(reqs))


# Selectable fields beyond metadata.name/metadata.namespace, per (group, plural).
_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
EXTRA_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): _POD_FIELDS,
    ("", "events"): (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    ("", "nodes"): ("spec.unschedulable",),
    ("", "secrets"): ("type",),
    ("", "namespaces"): ("status.phase",),
    ("batch", "jobs"): ("status.successful",),
}


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclasses.dataclass(frozen=True)
class FieldSelector:
    terms: tuple[tuple[str, bool, str], ...] = ()  # (path, equal?, value)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, path) == value) == equal for path, equal, value in self.terms)


def parse_fields(selector: str | None, *, key: tuple[str, str]) -> FieldSelector:
    if not selector:
        return FieldSelector()
    allowed = {"metadata.name", "metadata.namespace", *EXTRA_FIELDS.get(key, ())}
    terms = []
    for part in _split(selector):
        m = re.match(r"^\s*([A-Za-z0-9._]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not m:
            raise statuses.bad_request(f"invalid selector: {selector!r}; can't understand {part!r}")
        path, op, value = m.groups()
        if path not in allowed:
            raise statuses.bad_request(f"field label not supported: {path}")
        terms.append((path, op != "!=", value))
    return FieldSelector(tuple(terms))
