"""kube-scheduler's decisions, pure: fit, node choice, preemption victims, messages.

Copied in spirit (and in the fields and strings that reach the API) from kubernetes/kubernetes
v1.36 ``pkg/scheduler``:

- requests: ``framework.computePodResourceRequest`` -- the sum over containers, or the largest
  init container if that is bigger; a container with limits and no requests requests its limits
  (the apiserver defaults requests from limits); plus one ``pods`` slot;
- fit: ``plugins/noderesources/fit.go`` (``Insufficient <resource>``), ``plugins/nodeaffinity``
  (``spec.nodeSelector`` and ``requiredDuringSchedulingIgnoredDuringExecution`` with the
  operators In, NotIn, Exists, DoesNotExist, Gt, Lt: "node(s) didn't match Pod's node
  affinity/selector"), ``plugins/nodeunschedulable``; resources are held by every pod bound to
  the node that is not in a terminal phase -- a terminating pod holds them until it is gone
  (``NodeInfo`` drops a pod only when it is deleted or terminal), and by pods *nominated* to the
  node with at least the pod's priority (``addGENominatedPods``);
- messages: ``FitError.Error``: ``0/N nodes are available: <count> <reason>, ...`` sorted;
- preemption: ``plugins/defaultpreemption`` + ``framework/preemption``: only for pods with
  ``preemptionPolicy`` other than Never; not while lower-priority pods on the pod's nominated node
  are still terminating (``podEligibleToPreemptOthers``); per node remove every lower-priority pod,
  check the fit, then reprieve the most important victims first while it still fits
  (``SelectVictimsOnNode``); pick the node whose most important victim has the lowest priority,
  then the smallest sum of victim priorities, then the fewest victims (``pickOneNodeForPreemption``,
  PDBs aside).

Limits: no taints/tolerations, pod (anti-)affinity, topology spread, volume or port checks, PDBs,
preferred affinity; node *scoring* is "most free GPUs, then most free cpu, then name", standing in
for ``NodeResourcesFit``'s LeastAllocated default.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from emulator import quantity
from kontinue import keys

Object = dict[str, Any]
Resources = dict[str, Fraction]

NODE_AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
NODE_UNSCHEDULABLE = "node(s) were unschedulable"
NODE_NOT_READY = "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
PREEMPTION_MESSAGE = "{scheduler}: preempting to accommodate a higher priority pod"


def _add(total: Resources, more: Mapping[str, Fraction]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Fraction(0)) + value


def container_requests(container: Mapping[str, Any]) -> Resources:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: quantity.parse(value) for name, value in merged.items()}


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What ``pod`` takes from a node (including one ``pods`` slot).

    With native sidecars (KEP-753): the regular containers plus every sidecar, or an init
    container plus the sidecars started before it, whichever is larger per resource.
    """
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or []:
        _add(total, container_requests(container))
    sidecars: Resources = {}
    peak: Resources = {}
    for container in spec.get("initContainers") or []:
        need = container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, need)
            continue
        for name, value in need.items():
            peak[name] = max(peak.get(name, Fraction(0)), value + sidecars.get(name, Fraction(0)))
    _add(total, sidecars)
    for name, value in peak.items():
        total[name] = max(total.get(name, Fraction(0)), value)
    total["pods"] = Fraction(1)
    return total


def allocatable(node: Mapping[str, Any]) -> Resources:
    raw = (node.get("status") or {}).get("allocatable") or {}
    return {name: quantity.parse(value) for name, value in raw.items()}


def priority(pod: Mapping[str, Any]) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_deleting(pod: Mapping[str, Any]) -> bool:
    return (pod.get("metadata") or {}).get("deletionTimestamp") is not None


def node_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def nominated(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("nominatedNodeName") or "")


def uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def wants_scheduling(pod: Mapping[str, Any], *, scheduler_name: str) -> bool:
    """Pending, unbound, not deleted, not gated (``spec.schedulingGates``, KEP-3521: the
    scheduler leaves gated pods alone), and addressed to this scheduler."""
    spec = pod.get("spec") or {}
    return (
        not node_name(pod)
        and not spec.get("schedulingGates")
        and not is_deleting(pod)
        and not is_terminal(pod)
        and spec.get("schedulerName", "default-scheduler") == scheduler_name
    )


def queue_order(pods: Iterable[Object]) -> list[Object]:
    """The active queue's order (``PrioritySort``): priority first, then the older pod."""
    return sorted(
        pods,
        key=lambda p: (-priority(p), str(p["metadata"].get("creationTimestamp") or ""), uid(p)),
    )


# --- node affinity ----------------------------------------------------------------------------


def _requirement(labels: Mapping[str, str], expression: Mapping[str, Any]) -> bool:
    key = expression["key"]
    operator = expression["operator"]
    values = [str(v) for v in expression.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, IndexError, ValueError):
            return False
        return have > want if operator == "Gt" else have < want
    raise ValueError(f"nodeSelectorTerms matchExpressions operator: unsupported value {operator!r}")


def matches_node(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``spec.nodeSelector`` and required node affinity (terms ORed, expressions ANDed)."""
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if not required:
        return True
    fields = {"metadata.name": str(meta.get("name") or "")}
    for term in required:
        expressions = term.get("matchExpressions") or []
        field_expressions = term.get("matchFields") or []
        if not expressions and not field_expressions:
            continue  # an empty term matches nothing
        if all(_requirement(labels, e) for e in expressions) and all(
            _requirement(fields, e) for e in field_expressions
        ):
            return True
    return False


def node_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


# --- fit --------------------------------------------------------------------------------------


def used_on(node: str, pods: Iterable[Object]) -> Resources:
    """What the node's bound, non-terminal pods take (terminating pods included)."""
    total: Resources = {}
    for pod in pods:
        if node_name(pod) == node and not is_terminal(pod):
            _add(total, pod_requests(pod))
    return total


def insufficient(need: Mapping[str, Fraction], free: Mapping[str, Fraction]) -> list[str]:
    """``Insufficient <resource>`` for each requested resource the node cannot give."""
    missing = []
    for name in sorted(need):
        if need[name] > 0 and need[name] > free.get(name, Fraction(0)):
            missing.append(f"Insufficient {name}" if name != "pods" else "Too many pods")
    return missing


def free_on(node: Object, used: Mapping[str, Fraction]) -> Resources:
    have = allocatable(node)
    return {name: value - used.get(name, Fraction(0)) for name, value in have.items()}


def static_reasons(pod: Mapping[str, Any], node: Mapping[str, Any]) -> list[str]:
    """Reasons no preemption can fix (filters that do not depend on other pods)."""
    if (node.get("spec") or {}).get("unschedulable"):
        return [NODE_UNSCHEDULABLE]
    if not node_ready(node):
        return [NODE_NOT_READY]
    if not matches_node(pod, node):
        return [NODE_AFFINITY_MISMATCH]
    return []


def nominated_load(pod: Mapping[str, Any], node: str, pods: Iterable[Object]) -> Resources:
    """Requests of unbound pods nominated to ``node`` with at least ``pod``'s priority."""
    total: Resources = {}
    for other in pods:
        if (
            uid(other) != uid(pod)
            and not node_name(other)
            and nominated(other) == node
            and not is_deleting(other)
            and priority(other) >= priority(pod)
        ):
            _add(total, pod_requests(other))
    return total


@dataclasses.dataclass(frozen=True)
class Fit:
    node: str | None  # the chosen node, or None
    reasons: dict[str, list[str]]  # node -> why it does not fit (for unfit nodes)

    def message(self, total: int) -> str:
        return unschedulable_message(self.reasons, total=total)


def unschedulable_message(reasons: Mapping[str, Sequence[str]], *, total: int) -> str:
    """``FitError.Error()``: ``0/2 nodes are available: 1 Insufficient nvidia.com/gpu, ...``."""
    counts = Counter(reason for node_reasons in reasons.values() for reason in node_reasons)
    parts = sorted(f"{count} {reason}" for reason, count in counts.items())
    return f"0/{total} nodes are available: {', '.join(parts)}."


def find_fit(pod: Object, nodes: Sequence[Object], pods: Sequence[Object]) -> Fit:
    """Filter every node, then score the ones that fit (most free GPUs, then cpu, then name)."""
    need = pod_requests(pod)
    reasons: dict[str, list[str]] = {}
    fitting: list[tuple[Fraction, Fraction, str]] = []
    for node in nodes:
        name = str(node["metadata"]["name"])
        static = static_reasons(pod, node)
        if static:
            reasons[name] = static
            continue
        used = used_on(name, pods)
        _add(used, nominated_load(pod, name, pods))
        free = free_on(node, used)
        missing = insufficient(need, free)
        if missing:
            reasons[name] = missing
            continue
        left_gpu = free.get(keys.GPU_RESOURCE, Fraction(0)) - need.get(keys.GPU_RESOURCE, 0)
        left_cpu = free.get("cpu", Fraction(0)) - need.get("cpu", Fraction(0))
        fitting.append((-left_gpu, -left_cpu, name))
    if not fitting:
        return Fit(None, reasons)
    return Fit(min(fitting)[2], reasons)


# --- preemption -------------------------------------------------------------------------------


def eligible_to_preempt(pod: Object, pods: Sequence[Object]) -> bool:
    """``podEligibleToPreemptOthers``: not with policy Never, and not while lower-priority pods
    on its nominated node are still terminating (the earlier preemption is still under way)."""
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return False
    node = nominated(pod)
    if not node:
        return True
    return not any(
        node_name(other) == node
        and is_deleting(other)
        and not is_terminal(other)
        and priority(other) < priority(pod)
        for other in pods
    )


def _importance(pod: Object) -> tuple[int, str]:
    """``MoreImportantPod``: higher priority, then earlier start (sorts most important first)."""
    start = str((pod.get("status") or {}).get("startTime") or "~")
    return (-priority(pod), start)


def select_victims(pod: Object, node: Object, pods: Sequence[Object]) -> list[Object] | None:
    """``SelectVictimsOnNode``: the fewest lower-priority pods whose removal makes ``pod`` fit.

    Terminating pods are never picked again (they are already leaving) but still hold their
    resources. None if even removing every candidate is not enough.
    """
    name = str(node["metadata"]["name"])
    if static_reasons(pod, node):
        return None
    need = pod_requests(pod)
    on_node = [p for p in pods if node_name(p) == name and not is_terminal(p)]
    candidates = [p for p in on_node if priority(p) < priority(pod) and not is_deleting(p)]
    if not candidates:
        return None
    remaining = [p for p in on_node if p not in candidates]
    base = used_on(name, remaining)
    _add(base, nominated_load(pod, name, pods))
    if insufficient(need, free_on(node, base)):
        return None
    victims = []
    for candidate in sorted(candidates, key=_importance):
        trial = dict(base)
        _add(trial, pod_requests(candidate))
        if insufficient(need, free_on(node, trial)):
            victims.append(candidate)
        else:
            base = trial  # reprieved
    return victims


@dataclasses.dataclass(frozen=True)
class Preemption:
    node: str
    victims: list[Object]


def plan_preemption(
    pod: Object, nodes: Sequence[Object], pods: Sequence[Object]
) -> Preemption | None:
    """Where to preempt and whom (``pickOneNodeForPreemption``), or None if nowhere helps."""
    if not eligible_to_preempt(pod, pods):
        return None
    options = []
    for node in nodes:
        victims = select_victims(pod, node, pods)
        if victims is None:
            continue
        top = max((priority(v) for v in victims), default=-(2**31))
        total = sum(priority(v) for v in victims)
        options.append((top, total, len(victims), str(node["metadata"]["name"]), victims))
    if not options:
        return None
    best = min(options, key=lambda o: o[:4])
    return Preemption(best[3], best[4])


def preemption_failure_message(fit: Fit, *, total: int) -> str:
    """The message when preemption cannot help, as v1.36 writes it: the DRA plugin's PostFilter
    adds "no new claims to deallocate" before default preemption's verdict (recorded in
    tests/fixtures/admission, the scheduler's write after the taint eviction)."""
    helpless = {
        name: [NOT_HELPFUL if any(not r.startswith("Insufficient") for r in rs) else NO_VICTIMS]
        for name, rs in fit.reasons.items()
    }
    counts = Counter(r for rs in helpless.values() for r in rs)
    parts = ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))
    return (
        f"{fit.message(total)} no new claims to deallocate, "
        f"preemption: 0/{total} nodes are available: {parts}."
    )
