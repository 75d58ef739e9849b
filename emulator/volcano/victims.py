"""Which pods Volcano's reclaim and preempt actions evict, for one pending task (pure).

Copies, for a single-tier session with the capacity/proportion, priority, gang-less defaults:
- ``pkg/scheduler/actions/reclaim/reclaim.go`` ``reclaimForTask``: candidates are *Running*
  pods of jobs in a **different**, reclaimable queue (``spec.reclaimable`` nil means true) that
  is over its ``deserved`` share (unset ``deserved`` counts as nothing deserved); the preemptor's
  own queue must have room under its ``capability`` and stay within its own ``deserved``
  (``ssn.Preemptive``, capacity plugin), so reclaim never ping-pongs.
- ``pkg/scheduler/actions/preempt/preempt.go`` ``normalPreempt``: candidates are Bound/Running
  pods of *other* jobs in the **same** queue with a lower priority (plugin ``priority``).
- ``pkg/scheduler/framework/session.go`` ``BuildVictimsPriorityQueue``: lowest priority first,
  then the youngest; victims are popped until the task fits the node's ``FutureIdle`` (idle +
  releasing): pods already terminating count toward the preemptor, so a pending preemptor whose
  victims are still terminating evicts nobody else (it is pipelined and waits).
- ``pkg/scheduler/api/pod_info.go`` ``GetPodPreemptable``: a pod whose ``volcano.sh/preemptable``
  annotation (else label) is false, or not a Go ``strconv.ParseBool`` value, is never a victim of
  either action (``task.Preemptable``); absent means preemptable.
Not copied: gang/minAvailable victim protection, DRF, PDBs, hierarchy, topology, extenders.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from emulator import quantity, scheduling
from kontinue import keys

Object = dict[str, Any]
Resources = dict[str, Fraction]


def queue_of(pod: Object) -> str:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return str(
        annotations.get(keys.VOLCANO_QUEUE_NAME_ANNOTATION)
        or annotations.get(keys.VOLCANO_POD_QUEUE_ANNOTATION)
        or "default"
    )


def group_of(pod: Object) -> str:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(keys.VOLCANO_PODGROUP_ANNOTATION) or "")


def _limits(queue: Object | None, field: str) -> Resources:
    raw = ((queue or {}).get("spec") or {}).get(field) or {}
    return {name: quantity.parse(value) for name, value in raw.items()}


def allocated(queue: str, pods: Sequence[Object]) -> Resources:
    """What the queue's bound, non-terminal pods hold (releasing ones included)."""
    total: Resources = {}
    for pod in pods:
        if queue_of(pod) == queue and scheduling.node_name(pod) and not scheduling.is_terminal(pod):
            for name, value in scheduling.pod_requests(pod).items():
                total[name] = total.get(name, Fraction(0)) + value
    return total


def queue_has_room(pod: Object, queue: Object | None, pods: Sequence[Object]) -> bool:
    """``capability`` is a hard cap on what the queue may hold (capacity plugin)."""
    cap = _limits(queue, "capability")
    held = allocated(queue_of(pod), pods)
    need = scheduling.pod_requests(pod)
    return all(held.get(n, Fraction(0)) + need.get(n, Fraction(0)) <= v for n, v in cap.items())


def _overused(queue: Object | None, pods: Sequence[Object], name: str) -> bool:
    deserved = _limits(queue, "deserved")
    held = allocated(name, pods)
    return any(v > deserved.get(n, Fraction(0)) for n, v in held.items() if n != "pods" and v > 0)


def _may_reclaim(pod: Object, queue: Object | None, pods: Sequence[Object]) -> bool:
    """``ssn.Preemptive`` (capacity plugin): room under ``capability`` and, after the task, the
    queue stays within its ``deserved`` share — a queue over its share reclaims nothing."""
    if not queue_has_room(pod, queue, pods):
        return False
    deserved = _limits(queue, "deserved")
    held = allocated(queue_of(pod), pods)
    need = scheduling.pod_requests(pod)
    return all(
        held.get(n, Fraction(0)) + need.get(n, Fraction(0)) <= deserved.get(n, Fraction(0))
        for n in need
        if n != "pods" and need[n] > 0
    )


PREEMPTABLE = "volcano.sh/preemptable"
_GO_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


def preemptable(pod: Object) -> bool:
    """``GetPodPreemptable``: the annotation first, then the label; default true."""
    meta = pod.get("metadata") or {}
    for marks in (meta.get("annotations") or {}, meta.get("labels") or {}):
        if PREEMPTABLE in marks:
            return _GO_BOOLS.get(str(marks[PREEMPTABLE]), False)
    return True


def _reclaimable(queue: Object | None) -> bool:
    return ((queue or {}).get("spec") or {}).get("reclaimable") is not False


@dataclasses.dataclass(frozen=True)
class Plan:
    action: str  # "reclaim" | "preempt"
    node: str
    victims: list[Object]


def _order(victims: list[Object]) -> list[Object]:
    """Lowest priority first; among equals the youngest first."""
    young_first = sorted(
        victims, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""), reverse=True
    )
    return sorted(young_first, key=scheduling.priority)


def plan(
    pod: Object,
    *,
    nodes: Sequence[Object],
    pods: Sequence[Object],
    queues: Mapping[str, Object],
    action: str,
    pipelined: Sequence[Object] = (),
) -> Plan | None:
    """Victims on the first node where evicting them makes ``pod`` fit; ``victims`` is empty
    when the node's releasing pods already make room (the preemptor waits). ``pipelined``: pods
    this session already pipelined (bound copies): their requests count as used on their
    node (``FutureIdle`` minus ``Pipelined``), and they are never victims."""
    mine = queue_of(pod)
    if action == "reclaim" and not _may_reclaim(pod, queues.get(mine), pods):
        return None
    need = scheduling.pod_requests(pod)
    for node in nodes:
        name = str(node["metadata"]["name"])
        if scheduling.static_reasons(pod, node):
            continue
        on_node = [
            p for p in pods if scheduling.node_name(p) == name and not scheduling.is_terminal(p)
        ]
        used: Resources = {}
        claimed = [p for p in pipelined if scheduling.node_name(p) == name]
        for p in [*on_node, *claimed]:
            if not scheduling.is_deleting(p):  # releasing pods count as future idle
                for n, v in scheduling.pod_requests(p).items():
                    used[n] = used.get(n, Fraction(0)) + v
        free = scheduling.free_on(node, used)
        if not scheduling.insufficient(need, free):
            return Plan(action, name, [])
        candidates = []
        for p in on_node:
            if scheduling.is_deleting(p) or group_of(p) == group_of(pod) or not preemptable(p):
                continue
            theirs = queue_of(p)
            if action == "reclaim":
                ok = (
                    theirs != mine
                    and (p.get("status") or {}).get("phase") == "Running"
                    and _reclaimable(queues.get(theirs))
                    and _overused(queues.get(theirs), pods, theirs)
                )
            else:
                ok = theirs == mine and scheduling.priority(p) < scheduling.priority(pod)
            if ok:
                candidates.append(p)
        chosen: list[Object] = []
        for victim in _order(candidates):
            chosen.append(victim)
            for n, v in scheduling.pod_requests(victim).items():
                free[n] = free.get(n, Fraction(0)) + v
            if not scheduling.insufficient(need, free):
                return Plan(action, name, chosen)
    return None
