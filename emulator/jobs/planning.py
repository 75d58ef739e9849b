"""What one sync of the batch/v1 Job controller does, decided from the Job and its pods (pure).

Ported from kubernetes/kubernetes v1.36 ``pkg/controller/job/job_controller.go`` (``syncJob``,
``manageJob``, ``trackJobStatusAndRemoveFinalizers``, ``enactJobFinished``,
``ensureJobConditionStatus``, ``addCompletionIndexEnvVariables``) and ``indexed_job_utils.go``;
the counting itself is :mod:`emulator.jobs.accounting` (checked against a real v1.36.2 control
plane). One sync:

1. counts terminated pods and picks the tracking finalizers to remove (``accounting.sync``);
2. decides the finish: with the v1.36 default (terminal conditions delayed until no pod is
   terminating) first an interim ``FailureTarget`` / ``SuccessCriteriaMet`` condition, then
   ``Failed`` / ``Complete`` (+ ``completionTime``) once no pod is active or terminating;
3. manages pods: a finished Job deletes its active pods; a suspended Job removes each active
   pod's tracking finalizer *then* deletes it (``deleteJobPods``: the pod is never counted);
   otherwise it creates the missing pods (``accounting.pods_to_create``; for ``Indexed`` the
   lowest missing indexes);
4. writes ``status``: ``active``, ``ready``, ``terminating``, ``failed``/``succeeded`` (omitted
   at 0, as the Go ``omitempty`` fields are), ``completedIndexes``, ``startTime`` (set when first
   unsuspended, cleared when suspended — the v1.36 ``MutableSchedulingDirectivesForSuspendedJobs``
   gate — and reset on resume), the ``Suspended`` condition (``JobSuspended`` / ``JobResumed``).

Limits: ``status.uncountedTerminatedPods`` is not used (the emulated controller removes the
finalizers then writes the counts; one process, no crash in between); the pod-failure backoff is
:mod:`emulator.jobs.backoff`, applied by the controller; no ``activeDeadlineSeconds``,
``backoffLimitPerIndex``, ``successPolicy``, pod adoption by selector or Events.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from emulator import owners
from emulator.jobs import accounting
from kontinue import keys

Object = dict[str, Any]

JOB_CONTROLLER_USER = "system:serviceaccount:kube-system:job-controller"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
INTERIM = {"Failed": "FailureTarget", "Complete": "SuccessCriteriaMet"}
FINAL = {v: k for k, v in INTERIM.items()}


def owner_job(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (name, uid) of the Job that controls ``pod``, if any."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == "Job"
            and ref.get("apiVersion") == "batch/v1"
        ):
            return str(ref["name"]), str(ref["uid"])
    return None


def is_indexed(job: Mapping[str, Any]) -> bool:
    return (job.get("spec") or {}).get("completionMode") == "Indexed"


def pod_index(pod: Mapping[str, Any]) -> int | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        keys.JOB_COMPLETION_INDEX_ANNOTATION
    )
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def pod_from_template(job: Mapping[str, Any], *, index: int | None = None) -> Object:
    """The pod ``manageJob`` creates (``podControl.CreatePodsWithGenerateName``).

    generateName ``<job>-`` (``<job>-<index>-`` for Indexed), the template's labels (the apiserver
    already added ``batch.kubernetes.io/job-name``, ``controller-uid`` and the legacy
    ``job-name``/``controller-uid``), the ``batch.kubernetes.io/job-tracking`` finalizer, a
    controller ownerReference with ``blockOwnerDeletion``; for Indexed the completion-index
    annotation and label, ``hostname`` ``<job>-<index>`` and ``JOB_COMPLETION_INDEX`` from the
    downward API.
    """
    meta = job["metadata"]
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    template_meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    labels = dict(template_meta.get("labels") or {})
    annotations = dict(template_meta.get("annotations") or {})
    generate = f"{meta['name']}-"
    if index is not None:
        generate = f"{meta['name']}-{index}-"
        annotations[keys.JOB_COMPLETION_INDEX_ANNOTATION] = str(index)
        labels[keys.JOB_COMPLETION_INDEX_ANNOTATION] = str(index)
        spec.setdefault("hostname", f"{meta['name']}-{index}")
        field = f"metadata.annotations['{keys.JOB_COMPLETION_INDEX_ANNOTATION}']"
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            env = container.setdefault("env", [])
            if not any(e.get("name") == COMPLETION_INDEX_ENV for e in env):
                env.append(
                    {
                        "name": COMPLETION_INDEX_ENV,
                        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field}},
                    }
                )
    pod_meta: Object = {"generateName": generate, "namespace": meta["namespace"], "labels": labels}
    if annotations:
        pod_meta["annotations"] = annotations
    pod_meta["ownerReferences"] = [owners.controller_ref(job)]
    pod_meta["finalizers"] = [
        *(template_meta.get("finalizers") or []),
        keys.JOB_TRACKING_FINALIZER,
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


# --- indexes ------------------------------------------------------------------------------------


def parse_indexes(text: str | None) -> set[int]:
    """``completedIndexes`` ("1,3-5") as a set."""
    found: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def format_indexes(indexes: set[int]) -> str:
    """A set as ``completedIndexes`` writes it: sorted, runs of 3+ collapsed ("0,1" "3-5")."""
    parts: list[str] = []
    ordered = sorted(indexes)
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        if end == start:
            parts.append(str(ordered[start]))
        elif end == start + 1:
            parts += [str(ordered[start]), str(ordered[end])]
        else:
            parts.append(f"{ordered[start]}-{ordered[end]}")
        start = end + 1
    return ",".join(parts)


# --- decisions ----------------------------------------------------------------------------------


def _conditions(job: Mapping[str, Any]) -> list[Object]:
    return [dict(c) for c in (job.get("status") or {}).get("conditions") or []]


def _true(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    for condition in conditions:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def finished_of(job: Mapping[str, Any]) -> accounting.Finished | None:
    """The finish the Job already has (interim or terminal condition), as accounting sees it."""
    conditions = _conditions(job)
    for kind, final in (("Failed", "Failed"), ("FailureTarget", "Failed")):
        found = _true(conditions, kind)
        if found:
            return accounting.Finished(final, str(found.get("reason")), str(found.get("message")))
    for kind in ("Complete", "SuccessCriteriaMet"):
        found = _true(conditions, kind)
        if found:
            return accounting.Finished(
                "Complete", str(found.get("reason")), str(found.get("message"))
            )
    return None


def is_finished(job: Mapping[str, Any]) -> bool:
    """A terminal ``Complete`` or ``Failed`` condition: nothing more will happen to the Job."""
    conditions = _conditions(job)
    return bool(_true(conditions, "Complete") or _true(conditions, "Failed"))


@dataclasses.dataclass(frozen=True)
class Decision:
    ledger: accounting.Ledger
    remove_finalizers: tuple[str, ...]  # pod names: counted (or ignored) now
    suspend: tuple[str, ...]  # pod names: remove the finalizer, then DELETE
    delete: tuple[str, ...]  # pod names: plain DELETE (the Job finished)
    create: tuple[int | None, ...]  # one entry per pod to create (its index, or None)
    completed_indexes: frozenset[int]


def decide(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> Decision:
    """Steps 1-3 of a sync. ``pods``: the pods this Job controls (any phase, deleting or not)."""
    policy = accounting.JobPolicy.from_job(job)
    status = job.get("status") or {}
    spec = job.get("spec") or {}
    before = finished_of(job)
    ledger = accounting.Ledger(
        failed=int(status.get("failed") or 0),
        succeeded=int(status.get("succeeded") or 0),
        condition=before,
    )
    facts = [accounting.PodFacts.from_pod(p) for p in pods]
    result = accounting.sync(ledger, facts, policy)
    by_uid = {f.uid: (f, p) for f, p in zip(facts, pods, strict=True)}
    completed = parse_indexes(status.get("completedIndexes"))
    new_ledger = result.ledger
    if is_indexed(job):
        extra = 0
        for uid in result.remove_finalizer:
            fact, pod = by_uid[uid]
            if accounting.classify(fact, policy, finishing=before) is accounting.Count.SUCCEEDED:
                index = pod_index(pod)
                if index is not None and index not in completed:
                    completed.add(index)
                else:
                    extra += 1  # a second success of one index is not counted
        succeeded = new_ledger.succeeded - extra
        condition = new_ledger.condition
        if before is None:
            running = sum(1 for f in facts if accounting.is_active(f))
            condition = accounting.finished(
                policy, failed=new_ledger.failed, succeeded=succeeded, active=running
            )
        new_ledger = accounting.Ledger(new_ledger.failed, succeeded, condition)
    names = {f.uid: f.name for f in facts}
    remove = tuple(names[u] for u in result.remove_finalizer)
    active = [f for f in facts if accounting.is_active(f)]
    terminating = [f for f in facts if accounting.is_terminating(f)]
    suspend: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    create: tuple[int | None, ...] = ()
    if new_ledger.condition is not None:
        delete = tuple(f.name for f in active)
    elif spec.get("suspend"):
        suspend = tuple(f.name for f in active)
    else:
        count = accounting.pods_to_create(
            policy,
            active=len(active),
            terminating=len(terminating),
            succeeded=len(completed) if is_indexed(job) else new_ledger.succeeded,
            suspended=False,
        )
        if is_indexed(job):
            taken = {pod_index(by_uid[f.uid][1]) for f in active}
            if policy.only_replace_failed:
                taken |= {pod_index(by_uid[f.uid][1]) for f in terminating}
            total = policy.completions or 0
            missing = [i for i in range(total) if i not in completed and i not in taken]
            create = tuple(missing[:count])
        else:
            create = (None,) * count
    return Decision(new_ledger, remove, suspend, delete, create, frozenset(completed))


def _ensure(
    conditions: list[Object], kind: str, status: str, reason: str, message: str, now: str
) -> bool:
    """``ensureJobConditionStatus``: add or flip one condition; False when nothing changed.

    A condition of that type that does not exist is only added when its status is True.
    """
    for condition in conditions:
        if condition.get("type") != kind:
            continue
        if condition.get("status") == status:
            return False
        condition.update(
            status=status,
            reason=reason,
            message=message,
            lastProbeTime=now,
            lastTransitionTime=now,
        )
        return True
    if status != "True":
        return False
    conditions.append(
        {
            "type": kind,
            "status": status,
            "lastProbeTime": now,
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        }
    )
    return True


def next_status(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    decision: Decision,
    *,
    now: str,
) -> Object:
    """Step 4: the whole new ``status`` from the Job and its pods *after* this sync's writes."""
    old = job.get("status") or {}
    spec = job.get("spec") or {}
    conditions = _conditions(job)
    facts = [accounting.PodFacts.from_pod(p) for p in pods]
    active = [p for p, f in zip(pods, facts, strict=True) if accounting.is_active(f)]
    terminating = sum(1 for f in facts if accounting.is_terminating(f))
    ready = sum(
        1
        for p in active
        for c in (p.get("status") or {}).get("conditions") or []
        if c.get("type") == "Ready" and c.get("status") == "True"
    )
    status: Object = {}
    for key in ("startTime", "completionTime"):
        if old.get(key):
            status[key] = old[key]
    finish = decision.ledger.condition
    suspended = bool(spec.get("suspend"))
    if finish is None and suspended:
        if _ensure(conditions, "Suspended", "True", "JobSuspended", "Job suspended", now):
            # MutableSchedulingDirectivesForSuspendedJobs (beta in v1.36, kubernetes/kubernetes
            # #135104): the write that adds Suspended=True also clears startTime (measured on a
            # real v1.36.2 controller-manager: tests/realcp/test_emulator_agreement.py).
            status.pop("startTime", None)
    elif finish is None:
        if _ensure(conditions, "Suspended", "False", "JobResumed", "Job resumed", now):
            status["startTime"] = now  # "Reset the StartTime" on resume (syncJob)
        status.setdefault("startTime", now)
    if finish is not None:
        _ensure(conditions, INTERIM[finish.type], "True", finish.reason, finish.message, now)
        done = not active and terminating == 0
        added = done and _ensure(
            conditions, finish.type, "True", finish.reason, finish.message, now
        )
        if added and finish.type == "Complete":
            status["completionTime"] = now
    if conditions:
        status["conditions"] = conditions
    if active:
        status["active"] = len(active)
    if decision.ledger.failed:
        status["failed"] = decision.ledger.failed
    if decision.ledger.succeeded:
        status["succeeded"] = decision.ledger.succeeded
    if is_indexed(job):
        status["completedIndexes"] = format_indexes(set(decision.completed_indexes))
    status["terminating"] = terminating
    status["uncountedTerminatedPods"] = {}
    status["ready"] = ready
    return status
