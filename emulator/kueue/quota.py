"""ClusterQueue quota: flavor assignment, admission and priority preemption (pure).

Copies, for one ClusterQueue without a cohort:
- ``pkg/scheduler/flavorassigner/flavorassigner.go``: per resource group, flavors tried in the
  order the ClusterQueue lists them; a flavor whose ``nodeLabels`` contradict the pod's
  nodeSelector is skipped; mode ``Fit`` when the request fits the unused nominal quota,
  ``Preempt`` when it fits the nominal quota, else ``NoFit``; the first ``Fit`` flavor wins, else
  the first ``Preempt`` one. A requested resource no group covers makes the workload
  inadmissible.
- ``pkg/scheduler/preemption/preemption.go`` + ``common/ordering.go``: candidates are workloads
  holding quota in the same ClusterQueue that ``withinClusterQueue`` allows (``LowerPriority``:
  strictly lower priority; ``LowerOrNewerEqualPriority``: or equal priority and newer) and use a
  flavor-resource that needs preemption; ordered evicted first, lowest priority first, most
  recently reserved first; removed one by one until the preemptor fits, then added back in
  reverse order while it still fits (``fillBackWorkloads``).
- ``pkg/scheduler/scheduler.go`` + ``pkg/queue``: pending workloads in priority order, then
  creation time (``BestEffortFIFO``); a workload that issued preemptions waits with
  ``QuotaReserved=False(WaitingForPreemptedWorkloads)`` and stops the ClusterQueue's cycle.
Not copied: cohorts and borrowing, fair sharing, partial admission, TAS.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from emulator.kueue import conditions, quantity, workloads

Object = dict[str, Any]
FlavorResource = tuple[str, str]

FIT, PREEMPT, NO_FIT = 2, 1, 0


@dataclasses.dataclass
class Assignment:
    mode: int
    flavors: dict[str, dict[str, str]]  # pod set -> resource -> flavor
    usage: dict[FlavorResource, int]
    message: str = ""


@dataclasses.dataclass
class Decision:
    admit: list[tuple[Object, Object]] = dataclasses.field(default_factory=list)
    preempt: list[tuple[Object, Object]] = dataclasses.field(default_factory=list)  # victim, by
    waiting: list[tuple[Object, str, str]] = dataclasses.field(default_factory=list)


def nominal(cq: Object) -> dict[FlavorResource, int]:
    out: dict[FlavorResource, int] = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                out[(flavor["name"], res["name"])] = quantity.milli(res.get("nominalQuota", 0))
    return out


def holds_quota(wl: Object) -> bool:
    return conditions.is_true(wl, conditions.QUOTA_RESERVED) and not conditions.is_true(
        wl, conditions.FINISHED
    )


def usage_of(wl: Object) -> dict[FlavorResource, int]:
    out: dict[FlavorResource, int] = {}
    admission = (wl.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        flavors = assignment.get("flavors") or {}
        for res, value in (assignment.get("resourceUsage") or {}).items():
            key = (flavors.get(res, ""), res)
            out[key] = out.get(key, 0) + quantity.milli(value)
    return out


def total_usage(admitted: list[Object]) -> dict[FlavorResource, int]:
    out: dict[FlavorResource, int] = {}
    for wl in admitted:
        for key, value in usage_of(wl).items():
            out[key] = out.get(key, 0) + value
    return out


def _flavor_matches(flavor: Object | None, pod_spec: Object) -> bool:
    node_labels = ((flavor or {}).get("spec") or {}).get("nodeLabels") or {}
    selector = pod_spec.get("nodeSelector") or {}
    return all(selector.get(k, v) == v for k, v in node_labels.items())


def assign(
    wl: Object,
    cq: Object,
    *,
    flavors: Mapping[str, Object],
    used: Mapping[FlavorResource, int],
) -> Assignment:
    quota = nominal(cq)
    groups = (cq.get("spec") or {}).get("resourceGroups") or []
    requests = workloads.pod_set_requests(wl)
    templates = {
        ps["name"]: ((ps.get("template") or {}).get("spec") or {})
        for ps in (wl.get("spec") or {}).get("podSets") or []
    }
    result = Assignment(mode=FIT, flavors={}, usage={})
    pending = dict(used)
    for pod_set, wanted in requests.items():
        chosen: dict[str, str] = {}
        for res in wanted:
            if not any(res in (g.get("coveredResources") or []) for g in groups):
                return Assignment(NO_FIT, {}, {}, f"resource {res} unavailable in ClusterQueue")
        for group in groups:
            covered = [r for r in group.get("coveredResources") or [] if wanted.get(r)]
            if not covered:
                continue
            best: tuple[int, str] | None = None
            reasons: list[str] = []
            for flavor in group.get("flavors") or []:
                name = flavor["name"]
                if not _flavor_matches(flavors.get(name), templates.get(pod_set, {})):
                    reasons.append(f"flavor {name} doesn't match node affinity")
                    continue
                mode = FIT
                for res in covered:
                    need = wanted[res]
                    total = quota.get((name, res), 0)
                    free = total - pending.get((name, res), 0)
                    if need <= free:
                        continue
                    if need <= total:
                        mode = min(mode, PREEMPT)
                        reasons.append(
                            f"insufficient unused quota for {res} in flavor {name}, "
                            f"{quantity.render(res, need - free)} more needed"
                        )
                    else:
                        mode = NO_FIT
                        reasons.append(
                            f"insufficient quota for {res} in flavor {name}, "
                            f"previously considered podsets requests "
                            f"({quantity.render(res, 0)}) + current podset request "
                            f"({quantity.render(res, need)}) > maximum capacity "
                            f"({quantity.render(res, total)})"
                        )
                if mode == FIT:
                    best = (FIT, name)
                    break
                if mode == PREEMPT and best is None:
                    best = (PREEMPT, name)
            if best is None:
                return Assignment(
                    NO_FIT,
                    {},
                    {},
                    f"couldn't assign flavors to pod set {pod_set}: {', '.join(reasons)}",
                )
            if best[0] == PREEMPT:
                result.message = f"couldn't assign flavors to pod set {pod_set}: " + ", ".join(
                    reasons
                )
            result.mode = min(result.mode, best[0])
            for res in covered:
                chosen[res] = best[1]
                key = (best[1], res)
                result.usage[key] = result.usage.get(key, 0) + wanted[res]
                pending[key] = pending.get(key, 0) + wanted[res]
        result.flavors[pod_set] = chosen
    return result


def fits(
    need: Mapping[FlavorResource, int], used: Mapping[FlavorResource, int], cq: Object
) -> bool:
    quota = nominal(cq)
    return all(value <= quota.get(key, 0) - used.get(key, 0) for key, value in need.items())


def _reserved_at(wl: Object) -> str:
    found = conditions.find((wl.get("status") or {}).get("conditions"), conditions.QUOTA_RESERVED)
    return str((found or {}).get("lastTransitionTime") or "")


def _allowed(policy: str, preemptor: Object, candidate: Object) -> bool:
    mine, theirs = workloads.priority_of(preemptor), workloads.priority_of(candidate)
    if policy == "LowerPriority":
        return theirs < mine
    if policy == "LowerOrNewerEqualPriority":
        newer = str(candidate["metadata"].get("creationTimestamp", "")) > str(
            preemptor["metadata"].get("creationTimestamp", "")
        )
        return theirs < mine or (theirs == mine and newer)
    return False


def targets(
    preemptor: Object, assignment: Assignment, cq: Object, admitted: list[Object]
) -> list[Object]:
    """The workloads to evict so ``preemptor`` fits (empty when preemption cannot help)."""
    policy = ((cq.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue", "Never")
    needing = set(assignment.usage)
    candidates = [
        wl for wl in admitted if _allowed(policy, preemptor, wl) and needing & set(usage_of(wl))
    ]
    # common/ordering.go CandidatesOrdering: evicted first, lower priority, newer reservation
    candidates.sort(key=lambda wl: str(wl["metadata"].get("uid", "")))
    candidates.sort(key=_reserved_at, reverse=True)
    candidates.sort(key=workloads.priority_of)
    candidates.sort(key=lambda wl: not conditions.is_true(wl, conditions.EVICTED))
    used = total_usage(admitted)
    chosen: list[Object] = []
    for wl in candidates:
        for key, value in usage_of(wl).items():
            used[key] = used.get(key, 0) - value
        chosen.append(wl)
        if fits(assignment.usage, used, cq):
            break
    else:
        return []
    for i in range(len(chosen) - 2, -1, -1):  # fillBackWorkloads
        back = usage_of(chosen[i])
        trial = {k: used.get(k, 0) + back.get(k, 0) for k in set(used) | set(back)}
        if fits(assignment.usage, trial, cq):
            used = trial
            del chosen[i]
    return chosen


def admission(wl: Object, cq_name: str, assignment: Assignment) -> Object:
    """``status.admission`` for an assignment (``podSetAssignments`` with resourceUsage)."""
    counts = {ps["name"]: int(ps.get("count") or 0) for ps in wl["spec"].get("podSets") or []}
    requests = workloads.pod_set_requests(wl)
    return {
        "clusterQueue": cq_name,
        "podSetAssignments": [
            {
                "name": pod_set,
                "flavors": dict(chosen),
                "resourceUsage": {
                    res: quantity.render(res, requests[pod_set][res]) for res in chosen
                },
                "count": counts.get(pod_set, 0),
            }
            for pod_set, chosen in assignment.flavors.items()
        ],
    }


def _queue_order(wl: Object) -> tuple[int, str, str]:
    meta = wl["metadata"]
    return (-workloads.priority_of(wl), str(meta.get("creationTimestamp", "")), meta["name"])


def schedule(
    cq: Object, *, flavors: Mapping[str, Object], pending: list[Object], admitted: list[Object]
) -> Decision:
    """One scheduling cycle of one ClusterQueue."""
    decision = Decision()
    name = cq["metadata"]["name"]
    used = total_usage(admitted)
    for wl in sorted(pending, key=_queue_order):
        assignment = assign(wl, cq, flavors=flavors, used=used)
        if assignment.mode == FIT:
            decision.admit.append((wl, admission(wl, name, assignment)))
            for key, value in assignment.usage.items():
                used[key] = used.get(key, 0) + value
            continue
        if assignment.mode == PREEMPT:
            victims = targets(wl, assignment, cq, admitted)
            if victims:
                for victim in victims:
                    if not conditions.is_true(victim, conditions.EVICTED):
                        decision.preempt.append((victim, wl))
                decision.waiting.append(
                    (
                        wl,
                        conditions.REASON_WAITING_FOR_PREEMPTED,
                        f"Pending the preemption of {len(victims)} workload(s)",
                    )
                )
                break
        decision.waiting.append((wl, conditions.REASON_WAITING_FOR_QUOTA, assignment.message))
    return decision
