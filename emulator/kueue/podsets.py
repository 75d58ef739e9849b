"""Pod-set info Kueue stamps on a Job's pod template at start and restores at stop (pure).

Copies ``pkg/podset/podset.go``: ``FromAssignment`` (flavor ``nodeLabels`` into nodeSelector,
flavor tolerations appended, label ``kueue.x-k8s.io/podset``, labels
``kueue.x-k8s.io/local-queue-name`` and ``kueue.x-k8s.io/cluster-queue-name`` — the latter only
when the ClusterQueue name is a valid label value — and annotation ``kueue.x-k8s.io/workload``),
``FromUpdate`` + ``PodSetInfo.Merge`` (a key present on both sides with different values is a
permanent conflict; tolerations de-duplicated and appended), ``Merge`` into the template and
``RestorePodSpec`` (annotations, labels, nodeSelector, tolerations, schedulingGates back to the
Workload's copy of the pre-admission template).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from kontinue import keys

Object = dict[str, Any]

POD_SET_LABEL = "kueue.x-k8s.io/podset"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class Conflict(Exception):
    """A pod-set update collides with a key already set (``podset.IsPermanent``): the Workload
    is finished with ``FailedToStart`` and the Job stays suspended."""


@dataclasses.dataclass
class Info:
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    annotations: dict[str, str] = dataclasses.field(default_factory=dict)
    node_selector: dict[str, str] = dataclasses.field(default_factory=dict)
    tolerations: list[Object] = dataclasses.field(default_factory=list)
    scheduling_gates: list[Object] = dataclasses.field(default_factory=list)

    def merge(self, other: Info) -> None:
        """``PodSetInfo.Merge``: keep-first maps that refuse differing values; lists appended
        without duplicates."""
        for field, mine, theirs in (
            ("annotations", self.annotations, other.annotations),
            ("labels", self.labels, other.labels),
            ("nodeSelector", self.node_selector, other.node_selector),
        ):
            for key, value in theirs.items():
                if key in mine and mine[key] != value:
                    raise Conflict(
                        f"invalid admission check PodSetUpdate: conflict for {field}: "
                        f"conflict for key={key}, value1={mine[key]}, value2={value}"
                    )
        for mine_map, theirs_map in (
            (self.annotations, other.annotations),
            (self.labels, other.labels),
            (self.node_selector, other.node_selector),
        ):
            for key, value in theirs_map.items():
                mine_map.setdefault(key, value)
        for mine_list, theirs_list in (
            (self.tolerations, other.tolerations),
            (self.scheduling_gates, other.scheduling_gates),
        ):
            for item in theirs_list:
                if item not in mine_list:
                    mine_list.append(copy.deepcopy(item))


def from_assignment(
    assignment: Object,
    *,
    flavors: Mapping[str, Object],
    workload_name: str,
    local_queue: str,
    cluster_queue: str,
) -> Info:
    """``podset.FromAssignment`` plus the queue labels (gate ``AssignQueueLabelsForPods``, on)."""
    info = Info()
    for flavor_name in dict.fromkeys((assignment.get("flavors") or {}).values()):
        spec = (flavors.get(flavor_name) or {}).get("spec") or {}
        info.node_selector.update(spec.get("nodeLabels") or {})
        for toleration in spec.get("tolerations") or []:
            if toleration not in info.tolerations:
                info.tolerations.append(copy.deepcopy(toleration))
    info.annotations[keys.KUEUE_WORKLOAD_ANNOTATION] = workload_name
    info.labels[POD_SET_LABEL] = str(assignment["name"])
    info.labels[keys.KUEUE_LOCAL_QUEUE_LABEL] = local_queue
    if len(cluster_queue) <= 63 and _LABEL_VALUE.match(cluster_queue):
        info.labels[keys.KUEUE_CLUSTER_QUEUE_LABEL] = cluster_queue
    return info


def from_update(update: Object) -> Info:
    return Info(
        labels=dict(update.get("labels") or {}),
        annotations=dict(update.get("annotations") or {}),
        node_selector=dict(update.get("nodeSelector") or {}),
        tolerations=copy.deepcopy(list(update.get("tolerations") or [])),
    )


def for_start(wl: Object, *, flavors: Mapping[str, Object], local_queue: str) -> dict[str, Info]:
    """``getPodSetsInfoFromStatus``: per pod set, the assignment's info merged with every
    admission check's ``podSetUpdates`` for it. Raises :class:`Conflict`."""
    status = wl.get("status") or {}
    admission = status.get("admission") or {}
    out: dict[str, Info] = {}
    for assignment in admission.get("podSetAssignments") or []:
        info = from_assignment(
            assignment,
            flavors=flavors,
            workload_name=wl["metadata"]["name"],
            local_queue=local_queue,
            cluster_queue=admission["clusterQueue"],
        )
        for check in status.get("admissionChecks") or []:
            for update in check.get("podSetUpdates") or []:
                if update.get("name") == assignment["name"]:
                    info.merge(from_update(update))
        out[str(assignment["name"])] = info
    return out


def of_template(template: Object) -> Info:
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    return Info(
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        node_selector=dict(spec.get("nodeSelector") or {}),
        tolerations=copy.deepcopy(list(spec.get("tolerations") or [])),
        scheduling_gates=copy.deepcopy(list(spec.get("schedulingGates") or [])),
    )


def merged_template(template: Object, info: Info) -> Object:
    """``podset.Merge``: the template with ``info`` added; raises :class:`Conflict`."""
    current = of_template(template)
    current.merge(info)
    return with_info(template, current)


def with_info(template: Object, info: Info) -> Object:
    """``template`` with exactly ``info``'s labels, annotations, nodeSelector, tolerations and
    scheduling gates (``RestorePodSpec`` when ``info`` is the pre-admission template's)."""
    out = copy.deepcopy(template)
    meta = out.setdefault("metadata", {})
    spec = out.setdefault("spec", {})
    for container, field, value in (
        (meta, "labels", info.labels),
        (meta, "annotations", info.annotations),
        (spec, "nodeSelector", info.node_selector),
        (spec, "tolerations", info.tolerations),
        (spec, "schedulingGates", info.scheduling_gates),
    ):
        if value:
            container[field] = copy.deepcopy(value)
        else:
            container.pop(field, None)
    return out


def template_patch(old: Object, new: Object) -> Object:
    """The JSON merge patch turning ``old``'s scheduling directives into ``new``'s (what
    controller-runtime's ``client.MergeFrom`` sends, a diff of the ``omitempty`` JSON): changed
    keys, ``None`` for removed ones or for a map that became empty, lists replaced whole."""
    patch: Object = {}
    for part, fields in (("metadata", ("labels", "annotations")), ("spec", ("nodeSelector",))):
        for field in fields:
            before = (old.get(part) or {}).get(field) or {}
            after = (new.get(part) or {}).get(field) or {}
            if before and not after:  # omitempty: the whole field goes
                patch.setdefault(part, {})[field] = None
                continue
            diff: Object = {k: v for k, v in after.items() if before.get(k) != v}
            diff.update({k: None for k in before if k not in after})
            if diff:
                patch.setdefault(part, {})[field] = diff
    for field in ("tolerations", "schedulingGates"):
        before_list = (old.get("spec") or {}).get(field) or []
        after_list = (new.get("spec") or {}).get(field) or []
        if before_list != after_list:
            patch.setdefault("spec", {})[field] = after_list or None
    return patch
