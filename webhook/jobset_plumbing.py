"""Pure: the JSON Patch that plumbs an opted-in JobSet (``jobset.x-k8s.io/v1alpha2``) at CREATE.
No I/O.

A JobSet is admitted by Kueue as one Workload, through the queue label on the JobSet; the JobSet
controller then creates each child Job from ``spec.replicatedJobs[i].template``, copying the
template's spec verbatim (kubernetes-sigs/jobset pkg/controllers/jobset_controller.go
``constructJob``: ``Spec: *rjob.Template.Spec.DeepCopy()``) and labelling the Job with the
JobSet's keys, not with Kueue's queue label. So the Job webhook never sees a child Job it could
opt in, and the place to make a JobSet's Jobs preemption-safe is the JobSet's own CREATE: each
replicated Job's template (a ``JobTemplateSpec``: ``metadata`` and a Job's ``spec``) is plumbed
exactly as :func:`webhook.job_plumbing.plumb_job` plumbs a Job — ``podReplacementPolicy:
Failed``, the two podFailurePolicy rules ahead of the user's, the restore container's stand-in —
and every child Job, including those the JobSet controller recreates on a restart, inherits it.
Only CREATE can do it: the JobSet webhook refuses any later change of ``spec.replicatedJobs``
beyond the pod template's labels, annotations, nodeSelector, tolerations and scheduling gates
(kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go ``ValidateUpdate``), and a Job's
podFailurePolicy cannot be added after its creation either.

Per replicated Job, as for a Job:

- a pod template whose ``restartPolicy`` is not ``Never`` cannot take a podFailurePolicy
  (apiserver validation of the child Job): left unchanged, with a warning naming it. An *unset*
  ``restartPolicy`` counts as ``OnFailure``: that is what JobSet's defaulting webhook makes it
  (``jobset_webhook.go`` ``Default``). Its configuration, ``jobset-mutating-webhook-configuration``,
  is called before ``kontinue-webhook`` (mutating configurations are called in name order:
  kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/configuration/
  mutating_webhook_manager.go), so we usually see ``OnFailure`` already; and were it called
  after us, rules added to an unset template would make every child Job it defaults invalid;
- more than 20 rules with ours: its rules are left alone, with a warning;
- a NonIndexed template with ``parallelism > 1``: the identity warning.

Opt-out: the JobSet controller copies neither the JobSet's annotations nor its labels to the
child Jobs or their pods (``labelAndAnnotateObject``), so ``kontinue.dev/checkpoint: "false"`` on
the JobSet is copied into every replicated Job's pod template
(:func:`webhook.job_plumbing.propagate_opt_out`), and the same annotation on one replicated Job's
template (which its child Jobs carry) does the same for that replicated Job only.
"""

from __future__ import annotations

from typing import Any

from kontinue import optin
from webhook import job_plumbing, plumbing, review

Obj = dict[str, Any]
Plan = plumbing.Plan
RESTART_POLICY_WARNING = (
    "kontinue: replicatedJob {name}: restartPolicy {policy} cannot take a podFailurePolicy: its "
    "preemptions count against backoffLimit; set restartPolicy: Never (JobSet defaults it to "
    "OnFailure)"
)


def _replicated(jobset: Obj) -> list[tuple[str, str, Obj]]:
    """``(name, patch path, template)`` of each replicated Job (shape: webhook/shape.py)."""
    replicated: list[Obj] = (jobset.get("spec") or {}).get("replicatedJobs") or []
    return [
        (str(rj.get("name") or i), f"/spec/replicatedJobs/{i}/template", rj["template"])
        for i, rj in enumerate(replicated)
    ]


def _under(prefix: str, plan: Plan) -> list[review.JsonPatchOp]:
    """A plan for a Job, moved under ``prefix`` (the template stands where the Job would)."""
    return [{**op, "path": prefix + op["path"]} for op in plan.patch]


def _named(name: str, warnings: list[str]) -> list[str]:
    return [f"kontinue: replicatedJob {name}: {w.removeprefix('kontinue: ')}" for w in warnings]


def plumb_jobset(jobset: Obj, *, image: str) -> Plan:
    """The patch for an opted-in JobSet on CREATE (see the module docstring).

    ``image``: the Kontinue image, for the restore container's stand-in.
    """
    ops: list[review.JsonPatchOp] = []
    warnings: list[str] = []
    for name, prefix, template in _replicated(jobset):
        if optin.opted_out(optin.Marks.of(template)):
            ops += _under(prefix, job_plumbing.propagate_opt_out(template))
            continue
        pod_spec: Obj = ((template.get("spec") or {}).get("template") or {}).get("spec") or {}
        policy = pod_spec.get("restartPolicy")
        if policy != "Never":
            warnings.append(RESTART_POLICY_WARNING.format(name=name, policy=policy or "unset"))
            continue
        plan = job_plumbing.plumb_job(template, image=image)
        ops += _under(prefix, plan)
        warnings += _named(name, [*plan.warnings, *job_plumbing.identity_warning(template)])
    return Plan(ops, warnings)


def propagate_opt_out(jobset: Obj) -> Plan:
    """Copy a JobSet's opt-out annotation onto every replicated Job's pod template (neither the
    child Jobs nor their pods inherit the JobSet's annotations)."""
    ops: list[review.JsonPatchOp] = []
    for _, prefix, template in _replicated(jobset):
        ops += _under(prefix, job_plumbing.propagate_opt_out(template))
    return Plan(ops, [])
