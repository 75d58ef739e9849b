"""The optional Kueue AdmissionCheck controller ``kontinue.dev/restore``: pure decisions.

Kueue holds a Workload whose ClusterQueue lists our AdmissionCheck in
``spec.admissionChecksStrategy`` at ``Admitted=False`` until our check is ``Ready``
(docs/cluster-emulation-queues.md, "Kueue"). We use that window to say where the next
incarnation restores from — the restore annotation and the compatible-GPU nodeSelector,
through ``podSetUpdates`` — before any pod exists. The rules this module encodes (Kueue
``pkg/workload/admissionchecks.go``):

- **Active**: every AdmissionCheck with ``controllerName: kontinue.dev/restore`` gets
  ``Active=True``; a ClusterQueue referencing an inactive check admits nothing.
- **When to answer**: only when our check is ``Pending``, quota is reserved
  (``QuotaReserved=True`` and ``status.admission`` set: the flavors are known) and the Workload is
  not being evicted (``Evicted=True`` stays until the next reservation; answering then could
  point at a checkpoint older than the one the eviction is about to take).
- **Never** ``Retry`` or ``Rejected`` for "not ready yet": ``Retry`` evicts, ``Rejected``
  deactivates for good. While the newest checkpoint of the lineage is still being saved, the
  answer stays ``Pending`` (Kueue has no timeout on Pending; the save ends within the grace
  period, and the bridge re-evaluates when the Checkpoint changes).
- **Ready** carries ``podSetUpdates`` **always explicitly**, an empty list included: updates we
  once wrote with server-side apply are ours and survive Kueue's reset on eviction, so an answer
  without the field would stamp a stale restore annotation on the next pods.
- **Never a key the flavor sets**: a nodeSelector key that the assigned ResourceFlavors'
  ``nodeLabels`` (or the pod template) already set is left out; if its value differs from the
  one the checkpoint needs, the flavor cannot run the restore — no steering, the message says
  why, and the webhook decides at pod creation (a conflicting key would end the Workload with a
  permanent ``FailedToStart``).
- Once ``Ready`` we do not write again: Kueue forbids changing podSetUpdates while Ready.

The write is one server-side apply of our list-map entry on ``workloads/status`` (field
manager :data:`FIELD_MANAGER`, forced), the way Kueue's own controllers write it.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable
from typing import Any

from kontinue import catalog, keys
from kontinue.models import base, checkpoint, core, kueue
from kontinue.models import policy as policy_model

FIELD_MANAGER = "kontinue-admission-check"
ACTIVE = "Active"
PENDING = "Pending"
READY = "Ready"
MAX_MESSAGE = 32768


@dataclasses.dataclass(frozen=True)
class Answer:
    state: str
    message: str
    pod_set_updates: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def ours(check: kueue.AdmissionCheck) -> bool:
    return check.spec.controller_name == keys.KUEUE_ADMISSION_CHECK_CONTROLLER


def active_body(check: kueue.AdmissionCheck, *, now: datetime.datetime) -> dict[str, Any] | None:
    """The apply body that makes ``check`` Active, or ``None`` when it already is."""
    conditions = check.status.conditions if check.status else None
    current = base.find_condition(conditions, ACTIVE)
    generation = check.metadata.generation
    observed = (current.model_extra or {}).get("observedGeneration") if current else None
    if current is not None and current.status == "True" and observed == generation:
        return None
    condition: dict[str, Any] = {
        "type": ACTIVE,
        "status": "True",
        "reason": "Active",
        "message": "the kontinue bridge serves this check",
        "lastTransitionTime": base.format_time(
            current.last_transition_time
            if current is not None
            and current.status == "True"
            and current.last_transition_time is not None
            else now
        ),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return {
        "apiVersion": f"{keys.KUEUE_GROUP}/{keys.KUEUE_VERSION}",
        "kind": "AdmissionCheck",
        "metadata": {"name": check.name},
        "status": {"conditions": [condition]},
    }


def our_check_states(
    workload: kueue.Workload, *, check_names: Iterable[str]
) -> list[kueue.AdmissionCheckState]:
    names = set(check_names)
    states = (workload.status.admission_checks if workload.status else None) or []
    return [s for s in states if s.name in names]


def ready_to_answer(workload: kueue.Workload) -> str | None:
    """``None`` when quota is reserved and no eviction is under way, else why not."""
    if base.is_true(workload.conditions, keys.KUEUE_CONDITION_EVICTED):
        return "the Workload is being evicted"
    if not base.is_true(workload.conditions, keys.KUEUE_CONDITION_QUOTA_RESERVED):
        return "no quota reserved yet"
    if workload.status is None or workload.status.admission is None:
        return "no admission recorded yet"
    return None


def _flavor_labels(
    workload: kueue.Workload,
    pod_set: str,
    *,
    flavor: Callable[[str], kueue.ResourceFlavor | None],
) -> dict[str, str]:
    admission = workload.status.admission if workload.status else None
    assignments = admission.pod_set_assignments if admission else []
    labels: dict[str, str] = {}
    for assignment in assignments:
        if assignment.name != pod_set:
            continue
        for name in sorted(set((assignment.flavors or {}).values())):
            found = flavor(name)
            if found is not None:
                labels.update(found.spec.node_labels or {})
    return labels


def _template_pod(pod_set: kueue.PodSet, namespace: str) -> core.Pod:
    template = pod_set.template or {}
    return base.parse(
        core.Pod,
        {
            "metadata": {**(template.get("metadata") or {}), "namespace": namespace},
            "spec": template.get("spec") or {},
        },
    )


def answer(
    workload: kueue.Workload,
    *,
    owner: checkpoint.Lineage | None,
    policy: policy_model.CheckpointPolicy | None,
    checkpoints: Iterable[checkpoint.Checkpoint],
    nodes: Iterable[core.Node],
    flavor: Callable[[str], kueue.ResourceFlavor | None],
) -> Answer:
    """Our check's answer for a Workload that is :func:`ready_to_answer` (rules: module doc).

    ``policy`` is ``None`` for a Workload whose queue did not opt in: Ready, nothing to add.
    """
    if policy is None or owner is None:
        return Answer(READY, "not opted in to kontinue: nothing to restore")
    if not policy.spec.admission_check.enabled:
        return Answer(READY, f"policy {policy.name} does not steer restores through this check")
    node_list = list(nodes)
    cps = list(checkpoints)
    updates: list[dict[str, Any]] = []
    notes: list[str] = []
    chosen: str | None = None
    for pod_set in workload.spec.pod_sets:
        pod = _template_pod(pod_set, workload.namespace)
        decision = catalog.choose_restore(
            cps,
            lineage=owner,
            policy=policy,
            pod_fingerprint=catalog.fingerprint_of(pod),
            nodes=node_list,
        )
        if decision.wait_for is not None:
            return Answer(
                PENDING,
                f"waiting for Checkpoint {decision.wait_for.name} "
                f"({decision.wait_for.status.phase.value}) to finish saving",
            )
        if decision.checkpoint is None:
            notes.append(f"{pod_set.name}: cold start ({decision.reason})")
            continue
        flavor_labels = _flavor_labels(workload, pod_set.name, flavor=flavor)
        template_selector = pod.spec.node_selector or {}
        selector: dict[str, str] = {}
        conflict = ""
        for key, value in sorted(decision.required_node_labels.items()):
            present = flavor_labels.get(key, template_selector.get(key))
            if present is None:
                selector[key] = value
            elif present != value:
                conflict = f"{key}={present} is set by the flavor or template, checkpoint needs "
                conflict += value
        if conflict:
            notes.append(
                f"{pod_set.name}: no steering to {decision.checkpoint.name}: {conflict}; "
                "the webhook decides at pod creation"
            )
            continue
        update: dict[str, Any] = {
            "name": pod_set.name,
            "annotations": {keys.RESTORE_FROM_ANNOTATION: decision.checkpoint.name},
        }
        if selector:
            update["nodeSelector"] = selector
        updates.append(update)
        chosen = decision.checkpoint.name
        notes.append(f"{pod_set.name}: {decision.reason}")
    head = f"restore from {chosen}" if chosen else "cold start"
    return Answer(READY, f"{head}; " + "; ".join(notes) if notes else head, updates)


def apply_body(
    workload: kueue.Workload,
    *,
    check_name: str,
    result: Answer,
    current: kueue.AdmissionCheckState,
    now: datetime.datetime,
) -> dict[str, Any] | None:
    """The server-side apply body for our entry, or ``None`` when nothing would change."""
    if current.state == READY:
        return None
    if (
        current.state == result.state
        and (current.message or "") == result.message[:MAX_MESSAGE]
        and result.state == PENDING
    ):
        return None
    changed = current.state != result.state
    stamp = now if changed or current.last_transition_time is None else current.last_transition_time
    entry: dict[str, Any] = {
        "name": check_name,
        "state": result.state,
        "message": result.message[:MAX_MESSAGE],
        "lastTransitionTime": base.format_time(stamp),
        "podSetUpdates": list(result.pod_set_updates),
    }
    return {
        "apiVersion": f"{keys.KUEUE_GROUP}/{keys.KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {"name": workload.name, "namespace": workload.namespace},
        "status": {"admissionChecks": [entry]},
    }
