"""Pure: the JSON Patch that makes an opted-in Volcano Job (``batch.volcano.sh/v1alpha1``)
survive checkpointed preemptions, at CREATE. No I/O.

The decision is :func:`kontinue.vcjob_policies.safe`, applied to the job's ``spec.policies`` and
to each task's ``policies`` (the reasons, from Volcano's job controller source, are in that
module and in docs/webhook.md, "Mutating: Volcano Jobs"). Each list that changes is replaced
whole; the warning says what changed. ``maxRetry`` is left alone.

A vcjob opted out with ``kontinue.dev/checkpoint: "false"`` gets the annotation copied onto
every task's pod template (the vc-controller builds pods from the templates only,
volcano-sh/volcano ``pkg/controllers/job/job_controller_util.go`` ``createJobPod``), so its pods
are not plumbed.
"""

from __future__ import annotations

from typing import Any

from kontinue import keys, vcjob_policies
from webhook import plumbing, review

Obj = dict[str, Any]
Plan = plumbing.Plan


def _list_ops(owner: Obj, path: str, label: str) -> tuple[list[review.JsonPatchOp], list[str]]:
    current = owner.get("policies")
    if not isinstance(current, list) or not current:
        return [], []
    wanted, changes = vcjob_policies.safe(current)
    if wanted == current:
        return [], []
    return [{"op": "replace", "path": f"{path}/policies", "value": wanted}], [
        f"{label}: {'; '.join(changes)}"
    ]


def plumb_vcjob(job: Obj) -> Plan:
    """The patch for an opted-in vcjob on CREATE."""
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return Plan([], [])
    ops, changed = _list_ops(spec, "/spec", "spec.policies")
    tasks = spec.get("tasks")
    for i, task in enumerate(tasks if isinstance(tasks, list) else []):
        if isinstance(task, dict):
            more, said = _list_ops(task, f"/spec/tasks/{i}", f"task {task.get('name') or i}")
            ops += more
            changed += said
    if not changed:
        return Plan([], [])
    return Plan(
        ops,
        [
            "kontinue: lifecycle policies changed so a checkpointed preemption (exit 143, then "
            "PodEvicted) recreates the pod without using maxRetry; real failures keep your "
            "policies: " + " | ".join(changed)
        ],
    )


def propagate_opt_out(job: Obj) -> Plan:
    """Copy the vcjob's opt-out annotation onto every task's pod template."""
    ops: list[review.JsonPatchOp] = []
    value = "false"
    spec = job.get("spec")
    tasks = spec.get("tasks") if isinstance(spec, dict) else None
    for i, task in enumerate(tasks if isinstance(tasks, list) else []):
        if not isinstance(task, dict):
            continue
        template = task.get("template")
        base = f"/spec/tasks/{i}/template"
        if not isinstance(template, dict):
            continue
        meta = template.get("metadata")
        if not isinstance(meta, dict):
            ops.append(
                {
                    "op": "add",
                    "path": f"{base}/metadata",
                    "value": {"annotations": {keys.CHECKPOINT_OPT_OUT_ANNOTATION: value}},
                }
            )
            continue
        ops += [
            {**op, "path": base + op["path"]}
            for op in plumbing.annotation_ops(meta, {keys.CHECKPOINT_OPT_OUT_ANNOTATION: value})
        ]
    return Plan(ops, [])
