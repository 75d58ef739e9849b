"""Pure dispatch: one parsed AdmissionRequest + cache state -> one :class:`~webhook.review.Verdict`.

The HTTP layer (:mod:`webhook.app`) only parses and serialises; everything between is here and
in the rule modules, so the benchmark and the unit tests exercise exactly what is served.

Mutating (``/mutate``): Pod CREATE -> :func:`mutate_pod`, ``batch/v1`` Job CREATE ->
:func:`mutate_job`, ``jobset.x-k8s.io`` JobSet CREATE -> :func:`mutate_jobset`,
``batch.volcano.sh`` Job CREATE -> :func:`mutate_vcjob`; anything else (and every dry run of
anything else) is allowed untouched.
A pod that does not opt in gets no patch at all, and neither does an opted-in pod, Job, JobSet or
Volcano Job whose namespace lacks its policy's checkpoint claim (:mod:`webhook.claims`: plumbed,
it would stay Pending). A pod whose object we cannot read is allowed untouched with a warning
rather than denied: the mutating webhook must never be the reason an unrelated workload cannot
start (its validation is the apiserver's job).

Validating (``/validate``): our CRDs (422 with field paths), queue opt-in labels (422), pods'
reserved keys (403). Requests from Kontinue's own service accounts pass the pod rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kontinue import catalog, identity, keys, lineage, optin, restore_plan, workload
from kontinue.models import base, core, errors
from webhook import (
    claims,
    freshness,
    job_plumbing,
    jobset_plumbing,
    metrics,
    placement,
    plumbing,
    review,
    settings,
    validation,
    vcjob_plumbing,
)
from webhook import state as state_module

Obj = dict[str, Any]


def _pod_object(request: review.AdmissionRequest) -> tuple[Obj, str]:
    obj = request.object or {}
    namespace = request.namespace or (obj.get("metadata") or {}).get("namespace") or ""
    return obj, namespace


def _rendered(plan: restore_plan.Plan) -> plumbing.Restore | None:
    """The plan's sources as paths for :func:`webhook.plumbing.plumb_pod` (``None``: cold)."""
    if plan.cold_start:
        return None
    source, awaited = plan.source, plan.wait_for
    return plumbing.Restore(
        checkpoint=source.name if source else "",
        source=source.path if source else "",
        wait_for_checkpoint=awaited.name if awaited else "",
        wait_for=awaited.path if awaited else "",
        node_labels=dict(plan.node_labels),
        gated=plan.await_verdict,
        member=plan.identity,
        wait_seconds=0 if plan.verify_only else None,
    )


def _claim_missing(missing: claims.Missing, kind: str) -> review.Verdict:
    """An opted-in object left untouched because its namespace lacks the policy's claim
    (webhook/claims.py): a warning; a pod's also a ``CheckpointVolumeMissing`` Event."""
    return review.allow(
        warnings=[missing.warning(kind)],
        decision=metrics.CLAIM_MISSING,
        why=missing.message(),
        claim=missing.claim,
    )


def _not_plumbed(warning: str) -> review.Verdict:
    """An opted-in pod left untouched: a warning, and a ``NotPlumbed`` Event on its owner."""
    return review.allow(warnings=[warning], decision=metrics.NOT_PLUMBED, why=warning)


def mutate_pod(
    request: review.AdmissionRequest, *, state: state_module.State, config: settings.Settings
) -> review.Verdict:
    obj, namespace = _pod_object(request)
    try:
        # Labels and annotations alone decide opt-in, and most pods stop there: the whole pod
        # is parsed only for those that opted in.
        decision = optin.decide(optin.Marks.of(obj), namespace=namespace, state=state)
        if not decision.opted_in:
            return review.allow(warnings=decision.warnings, decision=metrics.NOT_OPTED_IN)
        assert decision.policy is not None
        missing = claims.missing(decision.policy, namespace=namespace, state=state)
        if missing is not None:
            return _claim_missing(missing, "pod")
        pod = base.parse(core.Pod, obj)
    except (errors.InvalidObject, ValueError) as exc:
        return _not_plumbed(f"kontinue: pod not plumbed: {exc}")
    pod.metadata.namespace = pod.metadata.namespace or namespace
    try:
        pod_lineage = lineage.of_pod(pod)
    except errors.InvalidObject as exc:
        return _not_plumbed(f"kontinue: pod not plumbed: {exc}")
    if pod_lineage is None:
        return _not_plumbed(
            "kontinue: pod has no controller (Job, JobSet, ...), so nothing would restore "
            "it; left without checkpoints"
        )
    try:
        fingerprint = catalog.fingerprint_of(pod)
    except ValueError as exc:
        return _not_plumbed(f"kontinue: pod not plumbed: {exc}")
    try:
        member = identity.of(pod.metadata.labels, pod.metadata.annotations)
    except ValueError as exc:
        return _not_plumbed(f"kontinue: pod not plumbed: no member identity: {exc}")
    held = freshness.held(state, pod_lineage, hold=config.unrecorded_wait_seconds)
    if held.deny:  # a predecessor that may have saved is in no set yet (webhook/unrecorded.py)
        return review.Verdict(allowed=False, code=429, reason="TooManyRequests", message=held.deny)
    plan = restore_plan.plan(
        state.checkpoints_of(pod_lineage),
        owner=pod_lineage,
        identity=member,
        policy=decision.policy,
        pod_fingerprint=fingerprint,
        nodes=state.nodes(),
        pinned=pod.spec.node_selector,
    )
    restore = _rendered(plan)
    cold_start_reason = plan.reason
    chosen = workload.of_spec(obj.get("spec") or {}, (obj.get("metadata") or {}).get("annotations"))
    rendered = plumbing.plumb_pod(
        obj,
        pod_lineage=pod_lineage,
        policy=decision.policy,
        restore=restore,
        cold_start_reason=cold_start_reason,
        image=config.image,
        member=member,
        chosen=chosen,
    )
    # A user's move (kubectl kontinue move/drain/defrag) places the pods restoring from it.
    move = placement.asked(plan) if restore is not None and rendered.patch else None
    patch = placement.with_move(rendered.patch, spec=obj.get("spec") or {}, move=move)
    # notes: the view's own warnings (a failed live read of the lineage: webhook/freshness.py)
    notes = [*freshness.notes_of(state), *([held.warning] if held.warning else [])]
    warnings = [*decision.warnings, *rendered.warnings, *chosen.warnings, *notes]
    if not patch:
        return review.allow(
            warnings=warnings, decision=metrics.NOT_PLUMBED, why="; ".join(warnings)
        )
    decided = metrics.pod_decision(patch)
    why = metrics.annotation_set(patch, keys.COLD_START_REASON_ANNOTATION) or ""
    source = plan.wait_for or plan.source
    cause = ""
    if decided == metrics.RESTORE and source is not None:
        cause = source.checkpoint.metadata.annotation(keys.TRACEPARENT_ANNOTATION) or ""
    return review.allow(patch, warnings, decision=decided, why=why, cause=cause)


def _mutate_queued(
    request: review.AdmissionRequest,
    *,
    state: state_module.State,
    kind: str,
    plumb: Callable[[Obj], plumbing.Plan],
    opt_out: Callable[[Obj], plumbing.Plan],
) -> review.Verdict:
    """A Job or JobSet of a Kueue queue (its own queue label decides): ``plumb`` when it opted
    in, ``opt_out`` (the opt-out copied to its pod templates) when its annotation opts it out."""
    obj, namespace = _pod_object(request)
    try:
        meta = optin.Marks.of(obj)
    except ValueError as exc:
        return review.allow(
            warnings=[f"kontinue: {kind} not plumbed: {exc}"],
            decision=metrics.NOT_PLUMBED,
            why=str(exc),
        )
    decision = optin.decide_queue(meta, namespace=namespace, state=state)
    if not decision.opted_in:
        return review.allow(warnings=decision.warnings, decision=metrics.NOT_OPTED_IN)
    opted_out = optin.opted_out(meta)
    assert decision.policy is not None
    missing = claims.missing(decision.policy, namespace=namespace, state=state)
    if missing is not None and not opted_out:
        return _claim_missing(missing, kind)
    plan = opt_out(obj) if opted_out else plumb(obj)
    decided = metrics.NOT_OPTED_IN if opted_out else metrics.PLUMBED
    return review.allow(plan.patch, [*decision.warnings, *plan.warnings], decision=decided)


def mutate_job(
    request: review.AdmissionRequest, *, state: state_module.State, config: settings.Settings
) -> review.Verdict:
    """A ``batch/v1`` Job: preemption-safe podFailurePolicy (:mod:`webhook.job_plumbing`)."""

    def plumb(job: Obj) -> plumbing.Plan:
        plan = job_plumbing.plumb_job(job, image=config.image)
        return plumbing.Plan(plan.patch, [*plan.warnings, *job_plumbing.identity_warning(job)])

    return _mutate_queued(
        request, state=state, kind="Job", plumb=plumb, opt_out=job_plumbing.propagate_opt_out
    )


def mutate_jobset(
    request: review.AdmissionRequest, *, state: state_module.State, config: settings.Settings
) -> review.Verdict:
    """A JobSet: each replicated Job's template plumbed as a Job (:mod:`webhook.jobset_plumbing`),
    so the child Jobs the JobSet controller makes from them are preemption-safe."""
    return _mutate_queued(
        request,
        state=state,
        kind="JobSet",
        plumb=lambda jobset: jobset_plumbing.plumb_jobset(jobset, image=config.image),
        opt_out=jobset_plumbing.propagate_opt_out,
    )


def mutate_vcjob(request: review.AdmissionRequest, *, state: state_module.State) -> review.Verdict:
    """A Volcano Job in an opted-in Volcano Queue: preemption-safe lifecycle policies
    (:mod:`webhook.vcjob_plumbing`)."""
    obj, namespace = _pod_object(request)
    try:
        meta = optin.Marks.of(obj)
        spec = obj.get("spec") or {}
        queue = spec.get("queue") or "default"
        if not isinstance(queue, str):
            raise ValueError("spec.queue is not a string")
    except (ValueError, AttributeError) as exc:
        return review.allow(
            warnings=[f"kontinue: Volcano Job not plumbed: {exc}"],
            decision=metrics.NOT_PLUMBED,
            why=str(exc),
        )
    decision = optin.volcano_queue_decision(queue, state=state)
    if not decision.opted_in:
        return review.allow(warnings=decision.warnings, decision=metrics.NOT_OPTED_IN)
    if optin.opted_out(meta):
        plan = vcjob_plumbing.propagate_opt_out(obj)
        return review.allow(plan.patch, [*decision.warnings], decision=metrics.NOT_OPTED_IN)
    assert decision.policy is not None
    missing = claims.missing(decision.policy, namespace=namespace, state=state)
    if missing is not None:
        return _claim_missing(missing, "Volcano Job")
    plan = vcjob_plumbing.plumb_vcjob(obj)
    return review.allow(plan.patch, [*decision.warnings, *plan.warnings], decision=metrics.PLUMBED)


def mutate(
    request: review.AdmissionRequest, *, state: state_module.State, config: settings.Settings
) -> review.Verdict:
    if request.operation != "CREATE" or request.sub_resource:
        return review.allow()
    kind = request.kind
    if kind.group == "" and kind.kind == "Pod":
        return mutate_pod(request, state=state, config=config)
    if kind.group == "batch" and kind.kind == "Job":
        return mutate_job(request, state=state, config=config)
    if kind.group == keys.JOBSET_GROUP and kind.kind == "JobSet":
        return mutate_jobset(request, state=state, config=config)
    if kind.group == keys.VOLCANO_BATCH_GROUP and kind.kind == "Job":
        return mutate_vcjob(request, state=state)
    return review.allow()


def _deny(errors_found: list[errors.FieldError], *, kind: str, forbidden: bool) -> review.Verdict:
    message = f"{kind}: " + "; ".join(str(e) for e in errors_found)
    return review.forbidden(message) if forbidden else review.invalid(message)


def validate(
    request: review.AdmissionRequest, *, state: state_module.State, config: settings.Settings
) -> review.Verdict:
    if request.operation not in ("CREATE", "UPDATE") or request.sub_resource:
        return review.allow()
    kind = request.kind
    obj = request.object or {}
    found: list[errors.FieldError]
    if kind.group == keys.GROUP and kind.kind == "CheckpointPolicy":
        found = validation.policy_errors(obj)
    elif kind.group == keys.GROUP and kind.kind == "Checkpoint":
        found = validation.checkpoint_errors(obj)
    elif (kind.group, kind.kind) in (
        (keys.KUEUE_GROUP, "ClusterQueue"),
        (keys.VOLCANO_SCHEDULING_GROUP, "Queue"),
    ):
        old = request.old_object or {}
        found = validation.queue_label_errors(
            (obj.get("metadata") or {}).get("labels"),
            (old.get("metadata") or {}).get("labels"),
            state=state,
        )
    elif kind.group == "" and kind.kind == "Pod":
        if request.user_info.username in config.own_users:
            return review.allow()
        _, namespace = _pod_object(request)
        if request.operation == "UPDATE":
            found = validation.changed_reserved_annotations(obj, request.old_object or {})
        else:
            found = validation.forged_reserved_keys(obj, namespace=namespace, state=state)
        return _deny(found, kind="Pod", forbidden=True) if found else review.allow()
    else:
        return review.allow()
    return _deny(found, kind=kind.kind, forbidden=False) if found else review.allow()
