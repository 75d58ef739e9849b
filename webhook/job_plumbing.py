"""Pure: the JSON Patch that plumbs an opted-in ``batch/v1`` Job at CREATE. No I/O.

Job (``batch/v1``, CREATE): ``podReplacementPolicy: Failed`` and the podFailurePolicy rule
``{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}`` ahead of the user's rules
(kubernetes/kubernetes pkg/controller/job: a pod with a ``DisruptionTarget`` condition
matched by an ``Ignore`` rule is not counted as failed). A Job whose pods restart ``OnFailure``
cannot take a podFailurePolicy (apiserver validation): admitted unchanged, with a warning.

A NonIndexed Job with ``parallelism > 1`` has no stable pod identities (kontinue/identity.py):
it is admitted unchanged apart from the above, with a warning that its pods can only share one
state (docs/api.md, "NonIndexed Jobs").
"""

from __future__ import annotations

from typing import Any

from kontinue import keys
from webhook import plumbing, review

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


def plumb_job(job: Obj) -> Plan:
    """The patch for an opted-in ``batch/v1`` Job on CREATE (see the module docstring)."""
    spec: Obj = job.get("spec") or {}
    template_spec: Obj = (spec.get("template") or {}).get("spec") or {}
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
    if rules and _is_disruption_rule(rules[0]):
        return Plan(ops, warnings)
    if len(rules) >= MAX_POD_FAILURE_RULES:
        warnings.append(
            f"kontinue: podFailurePolicy already has {len(rules)} rules (the maximum); a "
            "preemption of this Job may count against backoffLimit"
        )
        return Plan(ops, warnings)
    if policy is None:
        ops.append(
            {"op": "add", "path": "/spec/podFailurePolicy", "value": {"rules": [DISRUPTION_RULE]}}
        )
    elif "rules" not in policy:
        ops.append(
            {"op": "add", "path": "/spec/podFailurePolicy/rules", "value": [DISRUPTION_RULE]}
        )
    else:
        ops.append(
            {"op": "add", "path": "/spec/podFailurePolicy/rules/0", "value": DISRUPTION_RULE}
        )
    return Plan(ops, warnings)


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
