"""The bridge's decisions that read more than one object, as pure functions of a State.

Each takes the read-only :class:`queue_bridge.state.State` and plain objects, and returns an
answer; none writes, sleeps or calls the API, so each is tested from plain objects
(tests/unit/queue_bridge/test_deciding.py) and the handlers in :mod:`queue_bridge.handlers` only
read caches, call these, and write through :mod:`queue_bridge.acting`.
"""

from __future__ import annotations

import logging

from kontinue import catalog, keys, lineage, optin, restore_plan
from kontinue.models import checkpoint, core, kueue
from kontinue.models import errors as model_errors
from kontinue.models import policy as policy_model
from queue_bridge import disruptions, job_safety, reconciling
from queue_bridge import state as state_module

log = logging.getLogger("kontinue.bridge")

State = state_module.State


def owner_uid(annotation: str | None) -> str | None:
    """The owner UID from a ``kontinue.dev/lineage`` annotation, without validating the rest."""
    if not annotation or annotation.count("/") != 3:
        return None
    return annotation.rsplit("/", 1)[1] or None


def opt_in(state: State, workload: kueue.Workload) -> reconciling.OptIn:
    """Whether ``workload``'s ClusterQueue opted in, and its policy."""
    return reconciling.opt_in(
        workload,
        cluster_queue=state.cluster_queue,
        local_queue=state.local_queue,
        policy=state.policy,
    )


def policy_of(state: State, cp: checkpoint.Checkpoint) -> policy_model.CheckpointPolicy:
    """The policy ``cp`` names, else the built-in default."""
    return reconciling.policy_named(cp.spec.policy_name, policy=state.policy) or (
        policy_model.DEFAULT
    )


def pod_decision(state: State, pod: core.Pod) -> optin.Decision:
    """The webhook's opt-in rule, applied to a cached pod (the pod path)."""
    return optin.decide(optin.Marks.from_meta(pod.metadata), namespace=pod.namespace, state=state)


def taken(state: State, owner: checkpoint.Lineage) -> set[str]:
    """UIDs of the lineage's pods already members of an unexpired Checkpoint (any path)."""
    return {
        m.pod_uid
        for cp in state.checkpoints_of_owner(owner.owner_uid)
        if cp.status.phase is not checkpoint.Phase.EXPIRED
        for m in cp.spec.members
    }


def eviction_pending(state: State, pod: core.Pod) -> bool:
    """A Kueue eviction of the pod's Workload is in force and not yet recorded (Kueue path's)."""
    owner = owner_uid(pod.metadata.annotation(keys.LINEAGE_ANNOTATION))
    for workload in state.workloads_of_owner(owner or ""):
        try:
            found = reconciling.eviction(workload, decision=opt_in(state, workload))
        except model_errors.InvalidObject:
            continue
        if (
            found is not None
            and state.checkpoint(workload.namespace, found.name) is None
            and reconciling.is_member_candidate(pod, owner=found.lineage)
        ):
            return True
    return False


def disrupted(state: State, pod: core.Pod, *, taken: set[str]) -> disruptions.Disrupted | None:
    """``pod`` as a pod-path victim still to record, else ``None`` (module doc of
    :mod:`queue_bridge.disruptions`)."""
    annotation = pod.metadata.annotation(keys.LINEAGE_ANNOTATION)
    if not annotation or pod.metadata.uid in taken or not disruptions.has_disruption(pod):
        return None
    try:
        owner = lineage.parse_annotation(annotation)
    except model_errors.InvalidObject as exc:
        log.warning("pod=%s/%s: %s", pod.namespace, pod.name, exc)
        return None
    if not reconciling.is_member_candidate(pod, owner=owner):
        return None
    decision = pod_decision(state, pod)
    trigger = disruptions.pod_trigger(pod, decision=decision)
    if trigger is None or decision.policy is None or eviction_pending(state, pod):
        return None  # not opted in, a reason the policy skips, or the Kueue path's
    return disruptions.Disrupted(pod=pod, trigger=trigger, lineage=owner, policy=decision.policy)


def disruption_pending(state: State, pod: core.Pod) -> bool:
    """A pod-path victim not yet in any Checkpoint: its finalizer waits for that record."""
    if not disruptions.has_disruption(pod) or state.checkpoints_of_pod(pod.metadata.uid or ""):
        return False
    return disrupted(state, pod, taken=set()) is not None


def gated(pod: core.Pod) -> bool:
    """Whether ``pod`` waits behind the ``kontinue.dev/set-verdict`` scheduling gate."""
    return any(g.get("name") == keys.SET_VERDICT_GATE for g in pod.spec.scheduling_gates or [])


def set_verdict(state: State, pod: core.Pod) -> restore_plan.Verdict | None:
    """The verdict for a pod gated on the set its ``kontinue.dev/restore-from`` names, by the
    pod's own identity and policy; ``None`` for a pod that is not gated (or cannot be judged:
    then the gate stays and the restore, if ever started, falls back on its own)."""
    if not gated(pod) or pod.metadata.deletion_timestamp is not None:
        return None
    name = pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION)
    who = reconciling.member_identity(pod)
    if not name or who is None:
        return None
    awaited = state.checkpoint(pod.namespace, name)
    decision = pod_decision(state, pod)
    chosen = decision.policy or (policy_of(state, awaited) if awaited else None)
    if chosen is None:
        return None
    return restore_plan.verdict(awaited, identity=who, policy=chosen)


def queue_object(state: State, pod: core.Pod, owner: checkpoint.Lineage) -> str | None:
    """The queue-system object the pod belongs to: its Workload, else its PodGroup."""
    workloads = state.workloads_of_owner(owner.owner_uid)
    if workloads:
        return workloads[0].name
    return pod.metadata.annotation(keys.VOLCANO_PODGROUP_ANNOTATION)


def in_use(state: State, owner: checkpoint.Lineage) -> set[str]:
    """Names of the lineage's Checkpoints a live pod restores from (never expired)."""
    return {
        name
        for pod in state.lineage_pods(owner)
        if not reconciling.is_terminal(pod)
        and (name := pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION))
    }


def doomed(
    state: State, cp: checkpoint.Checkpoint, *, policy: policy_model.CheckpointPolicy
) -> dict[str, str]:
    """Checkpoints to expire once ``cp`` is terminal, name -> reason: the lineage's retention,
    and ``cp`` itself when its owner Job finished or is gone."""
    owner = cp.spec.lineage
    lineage_cps = state.checkpoints_of_owner(owner.owner_uid)
    found = {
        d.name: f"retention: more than {policy.spec.retention.keep} newer checkpoints kept"
        for d in catalog.retention(lineage_cps, policy=policy, in_use=in_use(state, owner))
    }
    if owner.owner_kind == "Job" and state.jobs_synced:
        job = state.job(owner.namespace, owner.owner_name)
        live = {job.metadata.uid} if job is not None and job.metadata.uid else set()
        finished = live if job is not None and job_safety.job_finished(job) else set()
        for gone in catalog.expire_on_owner_gone(
            [cp], policy=policy, live_owner_uids=live, finished_owner_uids=finished
        ):
            found.setdefault(
                gone.name,
                f"owner Job {owner.owner_name} " + ("finished" if finished else "was deleted"),
            )
    return found
