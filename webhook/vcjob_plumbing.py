"""Pure: the JSON Patch that makes an opted-in Volcano Job (``batch.volcano.sh/v1alpha1``)
survive checkpointed preemptions, at CREATE. No I/O.

The decision is :func:`kontinue.vcjob_policies.safe`, over the job's ``spec.policies`` and each
task's ``policies`` (the reasons, from Volcano's job controller source, are in that module and
in docs/webhook.md, "Mutating: Volcano Jobs"). Each list that changes is replaced (or added)
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


def plumb_vcjob(job: Obj) -> Plan:
    """The patch for an opted-in vcjob on CREATE."""
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return Plan([], [])
    rewrite = vcjob_policies.safe(spec)
    if not rewrite.changes:
        return Plan([], [])
    ops: list[review.JsonPatchOp] = []
    if rewrite.job is not None:
        ops.append({"op": "replace", "path": "/spec/policies", "value": rewrite.job})
    tasks = spec["tasks"]
    for index, policies in sorted(rewrite.tasks.items()):
        op = "replace" if "policies" in tasks[index] else "add"
        ops.append({"op": op, "path": f"/spec/tasks/{index}/policies", "value": policies})
    return Plan(
        ops,
        [
            "kontinue: lifecycle policies changed so a checkpointed preemption (exit 143, then "
            "PodEvicted) recreates the pod without using maxRetry; real failures keep your "
            "policies: " + " | ".join(rewrite.changes)
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
