"""Pure: whether an opted-in Job survives preemptions, and whether a Job has finished.

A Job's pods evicted by a scheduler preemption or a drain count as failed unless the Job has
``podReplacementPolicy: Failed`` and a ``podFailurePolicy`` rule ``{action: Ignore,
onPodConditions: DisruptionTarget}`` (tests/fixtures/cluster/job-accounting.md); the webhook adds
both to Jobs created after Kontinue was installed (:mod:`webhook.job_plumbing`), the bridge warns
once about the others (:mod:`queue_bridge.handlers.job`).
"""

from __future__ import annotations

from kontinue import keys
from kontinue.models import base, core


def _ignores_disruption(job: core.Job) -> bool:
    rules = (job.spec.pod_failure_policy or {}).get("rules") or []
    for rule in rules:
        conditions = rule.get("onPodConditions") or []
        if rule.get("action") == "Ignore" and any(
            c.get("type") == keys.POD_CONDITION_DISRUPTION_TARGET
            and c.get("status", "True") == "True"
            for c in conditions
        ):
            return True
    return False


def job_risk(job: core.Job) -> str | None:
    """Why preemptions of this opted-in Job may use up ``backoffLimit`` or complete it, or
    ``None`` when it has ``podReplacementPolicy: Failed`` and the ``DisruptionTarget`` Ignore
    rule (tests/fixtures/cluster/job-accounting.md)."""
    problems: list[str] = []
    if job.spec.template.spec.restart_policy == "OnFailure":
        problems.append("restartPolicy OnFailure (a podFailurePolicy needs Never)")
    if job.spec.pod_replacement_policy != "Failed":
        problems.append("no podReplacementPolicy: Failed")
    if not _ignores_disruption(job):
        problems.append(
            "no podFailurePolicy rule {action: Ignore, onPodConditions: DisruptionTarget}"
        )
    if not problems:
        return None
    return (
        "this Job's pods evicted by a scheduler preemption or a drain count as failed, so "
        f"repeated preemptions can exhaust backoffLimit and fail it: {'; '.join(problems)} "
        "(created before Kontinue was installed?)"
    )


def job_finished(job: core.Job) -> bool:
    conditions = job.status.conditions if job.status else None
    return base.is_true(conditions, "Complete") or base.is_true(conditions, "Failed")
