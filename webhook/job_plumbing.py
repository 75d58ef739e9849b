"""Pure: the JSON Patch that plumbs an opted-in ``batch/v1`` Job at CREATE. No I/O.

Job (``batch/v1``, CREATE): ``podReplacementPolicy: Failed`` and, ahead of the user's rules,
two podFailurePolicy rules:

- ``{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}`` (kubernetes/kubernetes
  pkg/controller/job: a pod with a ``DisruptionTarget`` condition matched by an ``Ignore`` rule is
  not counted as failed);
- :data:`kontinue.restore.POD_FAILURE_RULE`, ``Ignore`` on every non-zero exit of the
  ``kontinue-restore`` init container: a failed restore costs a retry, then (after the policy's
  ``attemptsBeforeFallback``) a cold start, never the Job. The apiserver accepts a rule naming a
  container only if the pod template has it, so the template gets the restore container's
  stand-in (:func:`kontinue.restore.stand_in`), which the pod webhook replaces or removes. It
  goes where the pod's restore container will: after the template's native sidecars.

A Job whose pods restart ``OnFailure`` cannot take a podFailurePolicy (apiserver validation):
admitted unchanged, with a warning.

A NonIndexed Job with ``parallelism > 1`` has no stable pod identities (kontinue/identity.py):
it is admitted unchanged apart from the above, with a warning that its pods can only share one
state (docs/api.md, "NonIndexed Jobs").
"""

from __future__ import annotations

from typing import Any

from kontinue import keys, workload
from kontinue import restore as restore_program
from webhook import init_order, plumbing, review

Obj = dict[str, Any]
Plan = plumbing.Plan
MAX_POD_FAILURE_RULES = 20  # k8s.io/kubernetes pkg/apis/batch/validation maxPodFailurePolicyRules
DISRUPTION_RULE: Obj = {
    "action": "Ignore",
    "onPodConditions": [{"type": keys.POD_CONDITION_DISRUPTION_TARGET, "status": "True"}],
}
NON_INDEXED_WARNING = (
    "kontinue: a NonIndexed Job with parallelism {n} has no stable pod identities: every pod is "
    "member index=0 and restores the one index=0 member a checkpoint picks (shared state); use "
    "completionMode: Indexed for per-pod state"
)


def identity_warning(job: Obj) -> list[str]:
    """The warning for a Job whose pods cannot have distinct member identities."""
    spec: Obj = job.get("spec") or {}
    parallelism = spec.get("parallelism")
    parallelism = 1 if parallelism is None else parallelism
    if spec.get("completionMode") == "Indexed" or not isinstance(parallelism, int):
        return []
    return [NON_INDEXED_WARNING.format(n=parallelism)] if parallelism > 1 else []


def plumb_job(job: Obj, *, image: str) -> Plan:
    """The patch for an opted-in ``batch/v1`` Job on CREATE (see the module docstring).

    ``image``: the Kontinue image, for the restore container's stand-in.
    """
    spec: Obj = job.get("spec") or {}
    template_spec: Obj = (spec.get("template") or {}).get("spec") or {}
    template_meta: Obj = (spec.get("template") or {}).get("metadata") or {}
    if template_spec.get("restartPolicy") == "OnFailure":
        return Plan(
            [],
            [
                "kontinue: restartPolicy OnFailure cannot take a podFailurePolicy, so a "
                "preemption of this Job counts against backoffLimit; use restartPolicy Never"
            ],
        )
    ops: list[review.JsonPatchOp] = []
    warnings: list[str] = []
    current = spec.get("podReplacementPolicy")
    if current != "Failed":
        op = "add" if current is None else "replace"
        ops.append({"op": op, "path": "/spec/podReplacementPolicy", "value": "Failed"})
    policy = spec.get("podFailurePolicy")
    rules: list[Obj] = list((policy or {}).get("rules") or [])
    ours = [DISRUPTION_RULE, restore_program.POD_FAILURE_RULE]
    theirs = [r for r in rules if not _is_disruption_rule(r) and not _is_restore_rule(r)]
    wanted = ours + theirs
    if wanted == rules:
        return Plan(
            ops
            + _stand_in_ops(
                template_spec, image=image, template_annotations=template_meta.get("annotations")
            ),
            warnings,
        )
    if len(wanted) > MAX_POD_FAILURE_RULES:
        warnings.append(
            f"kontinue: podFailurePolicy already has {len(theirs)} rules, and Kontinue's "
            f"{len(ours)} would pass the maximum of {MAX_POD_FAILURE_RULES}; a preemption or a "
            "failed restore of this Job may count against backoffLimit"
        )
        return Plan(ops, warnings)
    if policy is None:
        ops.append({"op": "add", "path": "/spec/podFailurePolicy", "value": {"rules": wanted}})
    else:
        op = "replace" if "rules" in policy else "add"
        ops.append({"op": op, "path": "/spec/podFailurePolicy/rules", "value": wanted})
    return Plan(
        ops
        + _stand_in_ops(
            template_spec, image=image, template_annotations=template_meta.get("annotations")
        ),
        warnings,
    )


def _stand_in_ops(
    template_spec: Obj, *, image: str, template_annotations: Obj | None
) -> list[review.JsonPatchOp]:
    """Add the restore container's stand-in where the pod's restore container will go: after
    the template's native sidecars, before its other init containers (webhook/init_order.py)."""
    inits = template_spec.get("initContainers")
    if any(c.get("name") == keys.RESTORE_INIT_CONTAINER for c in inits or []):
        return []
    names = workload.of_spec(template_spec, template_annotations).names
    first: Obj = next(
        (c for c in template_spec.get("containers") or [] if c.get("name") in names[:1]), {}
    )
    stand_in = restore_program.stand_in(image, security_context=first.get("securityContext"))
    if inits is None:
        return [{"op": "add", "path": "/spec/template/spec/initContainers", "value": [stand_in]}]
    at = init_order.restore_index(inits)
    return [{"op": "add", "path": f"/spec/template/spec/initContainers/{at}", "value": stand_in}]


def _is_restore_rule(rule: Obj) -> bool:
    return rule == restore_program.POD_FAILURE_RULE


def _is_disruption_rule(rule: Obj) -> bool:
    conditions = rule.get("onPodConditions") or []
    return (
        rule.get("action") == "Ignore"
        and len(conditions) == 1
        and conditions[0].get("type") == keys.POD_CONDITION_DISRUPTION_TARGET
        and conditions[0].get("status", "True") == "True"
    )


def propagate_opt_out(job: Obj) -> Plan:
    """Copy a Job's opt-out annotation onto its pod template (pods do not inherit annotations).

    Without this, every pod of an opted-out Job in an opted-in queue would be plumbed, because
    the admission path reads only the pod and caches, not the owner.
    """
    template: Obj = (job.get("spec") or {}).get("template") or {}
    meta: Obj = template.get("metadata") or {}
    value = "false"
    if (meta.get("annotations") or {}).get(keys.CHECKPOINT_OPT_OUT_ANNOTATION) == value:
        return Plan([], [])
    if "metadata" not in template:
        return Plan(
            [
                {
                    "op": "add",
                    "path": "/spec/template/metadata",
                    "value": {"annotations": {keys.CHECKPOINT_OPT_OUT_ANNOTATION: value}},
                }
            ],
            [],
        )
    ops = [
        {**op, "path": "/spec/template" + op["path"]}
        for op in plumbing.annotation_ops(meta, {keys.CHECKPOINT_OPT_OUT_ANNOTATION: value})
    ]
    return Plan(ops, [])
