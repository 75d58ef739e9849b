"""Pure reconcile decisions of the Kueue path: typed objects in, a decision out, no I/O.

:mod:`queue_bridge.handlers` read the caches, call these, and hand the answers to
:mod:`queue_bridge.acting`. Every decision is a function of cluster state alone (plus ``now``),
so a restarted or newly elected bridge reaches the same answers (level-triggered).

What is decided here:

- **opt-in** of a Workload: its ClusterQueue (``status.admission.clusterQueue``, else the
  LocalQueue's ``spec.clusterQueue`` from ``spec.queueName`` — admission is cleared when an
  eviction completes) carries ``kontinue.dev/enabled: "true"``; the policy is the one its
  ``kontinue.dev/policy`` label names (missing -> not opted in, as the webhook does), else
  ``default`` if defined, else the built-in default.
- **members** of a new Checkpoint: the pods of the Workload's lineage (by the webhook's
  ``kontinue.dev/lineage`` annotation, which also covers JobSet lineages) that are still running
  — or already ended but were deleted and are held by our finalizer (the bridge was slow; their
  final status is exactly what we must record) — and are not members of another Checkpoint.
- **deadlines** on a Checkpoint: a member still Terminating ``margin`` after its grace period
  ended, or never told to stop ``pending_timeout`` after the eviction, is failed with the reason.
- **the finalizer** ``kontinue.dev/checkpoint`` of one pod: removed once its result is recorded
  (or it is no member of anything and ended), held while an eviction may still claim it, and
  removed at the latest ``2 x margin`` after its grace period ended, whatever else failed.
- **failed restores**: the ``kontinue-restore`` init container ended with any non-zero exit code
  (its own documented codes, a crash, an OOM kill), unless it was killed because the pod was
  being deleted (:func:`kontinue.restore.failed`).

Job safety (is an opted-in Job preemption-safe, has it finished) is :mod:`queue_bridge.job_safety`.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Collection, Iterable

from kontinue import identity, keys, lineage, optin, restore
from kontinue.models import base, checkpoint, core, kueue
from kontinue.models import policy as policy_model
from queue_bridge import lifecycle, naming
from queue_bridge.sources import kueue as kueue_source

TERMINAL_POD_PHASES = ("Succeeded", "Failed")
_TERMINAL_MEMBER = (
    checkpoint.MemberState.SAVED,
    checkpoint.MemberState.FAILED,
    checkpoint.MemberState.CARRIED_FORWARD,
    checkpoint.MemberState.UNREPORTED,
)


# --- opt-in ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OptIn:
    """Whether a Workload's queue opted in; ``policy`` is set exactly when it did."""

    opted_in: bool
    reason: str
    cluster_queue: str = ""
    policy: policy_model.CheckpointPolicy | None = None


def cluster_queue_name(
    workload: kueue.Workload, *, local_queue: Callable[[str, str], kueue.LocalQueue | None]
) -> str | None:
    """The Workload's ClusterQueue: from its admission, else through its LocalQueue."""
    if workload.status is not None and workload.status.admission is not None:
        return workload.status.admission.cluster_queue
    if not workload.spec.queue_name:
        return None
    queue = local_queue(workload.namespace, workload.spec.queue_name)
    return queue.spec.cluster_queue if queue is not None else None


policy_named = optin.policy_named
"""The policy a queue label or a Checkpoint's ``spec.policyName`` names (kontinue/optin.py)."""


def opt_in(
    workload: kueue.Workload,
    *,
    cluster_queue: Callable[[str], kueue.ClusterQueue | None],
    local_queue: Callable[[str, str], kueue.LocalQueue | None],
    policy: Callable[[str], policy_model.CheckpointPolicy | None],
) -> OptIn:
    """The Workload's opt-in: its ClusterQueue (:func:`cluster_queue_name`) through the webhook's
    own rule, :func:`kontinue.optin.cluster_queue_decision`."""
    name = cluster_queue_name(workload, local_queue=local_queue)
    if name is None:
        return OptIn(False, f"Workload {workload.name}: no ClusterQueue known")
    decision = optin.cluster_queue_decision(name, cluster_queue=cluster_queue, policy=policy)
    return OptIn(decision.opted_in, decision.reason, cluster_queue=name, policy=decision.policy)


def workload_lineage(workload: kueue.Workload) -> checkpoint.Lineage | None:
    """The lineage of the Workload's owner (its controller: a Job, a JobSet, ...), or ``None``."""
    ref = workload.metadata.controller_ref()
    if ref is None or not workload.namespace:
        return None
    kind = lineage.owner_kind(api_version=ref.api_version, kind=ref.kind)
    return base.parse(
        checkpoint.Lineage,
        {
            "namespace": workload.namespace,
            "ownerKind": kind,
            "ownerName": ref.name,
            "ownerUid": ref.uid,
        },
    )


# --- eviction -> Checkpoint ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Eviction:
    """An eviction in force on an opted-in Workload and the Checkpoint name it maps to."""

    trigger: checkpoint.Trigger
    lineage: checkpoint.Lineage
    name: str
    policy: policy_model.CheckpointPolicy


def eviction(workload: kueue.Workload, *, decision: OptIn) -> Eviction | None:
    """The eviction in force (``Evicted=True`` of a reason the policy lists), else ``None``.

    Level-triggered: the previous version is not consulted; the deterministic name makes a
    second sighting of one eviction (Kueue's two suspend updates, a relist, the other replica)
    name the same Checkpoint.
    """
    if not decision.opted_in or decision.policy is None:
        return None
    trigger = kueue_source.eviction(workload, previous=None, policy=decision.policy)
    owner = workload_lineage(workload)
    if trigger is None or owner is None:
        return None
    name = naming.checkpoint_name(owner, trigger=trigger, workload_uid=workload.metadata.uid)
    return Eviction(trigger=trigger, lineage=owner, name=name, policy=decision.policy)


def is_terminal(pod: core.Pod) -> bool:
    return pod.status is not None and pod.status.phase in TERMINAL_POD_PHASES


def has_finalizer(pod: core.Pod) -> bool:
    return keys.CHECKPOINT_FINALIZER in (pod.metadata.finalizers or [])


def is_member_candidate(pod: core.Pod, *, owner: checkpoint.Lineage) -> bool:
    """A pod of ``owner``'s lineage whose eviction result is still to be recorded."""
    if pod.metadata.annotation(keys.LINEAGE_ANNOTATION) != lineage.annotation_value(owner):
        return False
    if not pod.metadata.uid or not pod.metadata.name:
        return False
    if not is_terminal(pod):
        return True
    return pod.metadata.deletion_timestamp is not None and has_finalizer(pod)


def member_identity(pod: core.Pod) -> str | None:
    """The pod's member identity (kontinue/identity.py, the webhook's), ``None`` if malformed."""
    try:
        return identity.of(pod.metadata.labels, pod.metadata.annotations)
    except ValueError:
        return None


def members_of(
    pods: Iterable[core.Pod], *, owner: checkpoint.Lineage, taken: Collection[str] = ()
) -> list[checkpoint.Member]:
    """The members of a new Checkpoint of ``owner`` (see the module doc), by identity.

    ``taken``: UIDs of pods already members of another (unexpired) Checkpoint. Each member
    records the pod's identity (kontinue/identity.py), the one the webhook gave it as
    ``KONTINUE_MEMBER``; a pod whose identity keys are malformed was never plumbed by the
    webhook and is not a member.
    """
    found = [
        (who, pod)
        for pod in pods
        if is_member_candidate(pod, owner=owner)
        and pod.metadata.uid not in taken
        and (who := member_identity(pod)) is not None
    ]
    found.sort(key=lambda item: (identity.sort_key(item[0]), item[1].name))
    return [
        checkpoint.Member(
            pod_name=pod.name,
            pod_uid=pod.metadata.uid or "",
            node=pod.spec.node_name or "",
            identity=who,
            index=identity.index_of(who),
        )
        for who, pod in found
    ]


def new_checkpoint(
    *,
    workload: str | None,
    found: Eviction,
    members: list[checkpoint.Member],
    fingerprint: checkpoint.Fingerprint,
    annotations: dict[str, str] | None = None,
) -> checkpoint.Checkpoint:
    """The Checkpoint to create for ``found`` (no ownerReference: it outlives its Job on purpose,
    so expiry is a recorded phase, not a garbage collection). ``workload``: the name of the
    queue-system object evicted (Kueue Workload, Volcano PodGroup), when known. ``annotations``:
    carried from the victims (the move a user asked for, kontinue/moving.py)."""
    return checkpoint.Checkpoint(
        metadata=base.ObjectMeta(
            name=found.name,
            namespace=found.lineage.namespace,
            labels={
                keys.CHECKPOINT_LINEAGE_LABEL: found.lineage.hash,
                keys.CHECKPOINT_OWNER_UID_LABEL: found.lineage.owner_uid,
            },
            annotations=annotations or None,
        ),
        spec=checkpoint.CheckpointSpec(
            lineage=found.lineage,
            trigger=found.trigger,
            members=members,
            fingerprint=fingerprint,
            policy_name=found.policy.name or keys.DEFAULT_POLICY_NAME,
            consistency=found.policy.spec.restore.consistency.value,
            workload=workload,
        ),
    )


# --- follow-through --------------------------------------------------------------------------


def _seconds(value: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=value)


def _overdue(
    member: checkpoint.Member,
    pod: core.Pod | None,
    *,
    trigger_time: datetime.datetime,
    now: datetime.datetime,
    margin: float,
    pending_timeout: float,
) -> tuple[checkpoint.MemberState, str] | None:
    """The state and reason of a member past its deadline, else ``None``. One told to stop that
    never reported is ``Unreported`` (it may have saved); one never told to stop ``Failed``."""
    if pod is None:
        return None  # lifecycle records "pod gone"
    deleted = pod.metadata.deletion_timestamp
    if deleted is not None:
        if now >= deleted + _seconds(margin):
            return checkpoint.MemberState.UNREPORTED, (
                f"still Terminating {margin:g}s after its grace period ended at "
                f"{base.format_time(deleted)}: {lifecycle.NO_REPORT}"
            )
        return None
    if now >= trigger_time + _seconds(pending_timeout):
        return checkpoint.MemberState.FAILED, (
            f"never told to stop within {pending_timeout:g}s of the eviction"
        )
    return None


def next_status(
    cp: checkpoint.Checkpoint,
    pods: Iterable[core.Pod],
    *,
    policy: policy_model.CheckpointPolicy,
    now: datetime.datetime,
    margin: float,
    pending_timeout: float,
) -> checkpoint.CheckpointStatus:
    """:func:`queue_bridge.lifecycle.next_status` plus the deadlines of the module doc."""
    pod_list = list(pods)
    status = lifecycle.next_status(cp, pod_list, policy=policy)
    if status.phase.terminal:
        return status
    by_uid = {p.metadata.uid: p for p in pod_list if p.metadata.uid}
    changed = False
    members: list[checkpoint.MemberResult] = []
    for member, result in zip(cp.spec.members, status.members, strict=True):
        if result.state not in _TERMINAL_MEMBER:
            why = _overdue(
                member,
                by_uid.get(member.pod_uid),
                trigger_time=cp.spec.trigger.time,
                now=now,
                margin=margin,
                pending_timeout=pending_timeout,
            )
            if why is not None:
                state, reason = why
                result = result.model_copy(update={"state": state, "reason": reason})
                changed = True
        members.append(result)
    if not changed:
        return status
    partial = status.model_copy(update={"members": members})
    return lifecycle.next_status(cp.model_copy(update={"status": partial}), pod_list, policy=policy)


def next_deadline(
    cp: checkpoint.Checkpoint,
    pods: Iterable[core.Pod],
    *,
    margin: float,
    pending_timeout: float,
) -> datetime.datetime | None:
    """When :func:`next_status` may next change without any pod event: the earliest deadline of
    a member not yet recorded, or ``None`` when the Checkpoint is terminal."""
    if cp.status.phase.terminal:
        return None
    by_uid = {p.metadata.uid: p for p in pods if p.metadata.uid}
    found: list[datetime.datetime] = []
    for member in cp.spec.members:
        recorded = checkpoint.result_of(cp.status.members, member)
        if recorded is not None and recorded.state in _TERMINAL_MEMBER:
            continue
        pod = by_uid.get(member.pod_uid)
        if pod is not None and pod.metadata.deletion_timestamp is not None:
            found.append(pod.metadata.deletion_timestamp + _seconds(margin))
        else:
            found.append(cp.spec.trigger.time + _seconds(pending_timeout))
    return min(found, default=None)


def status_changed(old: checkpoint.CheckpointStatus, new: checkpoint.CheckpointStatus) -> bool:
    return base.to_dict(old) != base.to_dict(new)


def transition_event(
    cp: checkpoint.Checkpoint, new: checkpoint.CheckpointStatus
) -> tuple[str, str, str] | None:
    """``(reason, message, type)`` of the Event a phase change deserves, or ``None``."""
    if cp.status.phase is new.phase:
        return None
    if new.phase is checkpoint.Phase.SUCCEEDED:
        rule = cp.spec.consistency or "coupled"
        return (
            keys.EVENT_CHECKPOINT_SUCCEEDED,
            f"Checkpoint {cp.name}: {new.message}; consistency {rule}: "
            + ", ".join(_restores_whom(cp, new)),
            "Normal",
        )
    if new.phase is checkpoint.Phase.FAILED:
        return (keys.EVENT_CHECKPOINT_FAILED, f"Checkpoint {cp.name}: {new.message}", "Warning")
    return None


def _restores_whom(cp: checkpoint.Checkpoint, new: checkpoint.CheckpointStatus) -> list[str]:
    """Per member, whom the set restores: its own identity, or (carried forward) nobody from
    here: that identity resumes from its older state."""
    parts = []
    for member in cp.spec.members:
        who = identity.of_member(member)
        result = checkpoint.result_of(new.members, member)
        if result is not None and result.state is checkpoint.MemberState.CARRIED_FORWARD:
            parts.append(f"{who} carried forward (resumes from its older state)")
        else:
            parts.append(f"{who} restores from here")
    return parts


def started_message(cp: checkpoint.Checkpoint) -> str:
    trigger = cp.spec.trigger
    pods = ", ".join(
        f"{m.pod_name}@{m.node or '?'} ({identity.of_member(m)})" for m in cp.spec.members
    )
    text = f"Checkpoint {cp.name} of {len(cp.spec.members)} pod(s) ({pods}) for "
    text += f"{trigger.source.value} eviction {trigger.reason}"
    return text + (f": {trigger.message}" if trigger.message else "")


# --- the pod finalizer -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Release:
    """Whether to remove the pod's finalizer now; ``recheck_at`` when to look again if not."""

    release: bool
    reason: str
    recheck_at: datetime.datetime | None = None


def _result_for(cp: checkpoint.Checkpoint, pod: core.Pod) -> checkpoint.MemberResult | None:
    """The pod's result in ``cp``: by its UID, never by its name (a Volcano pod reuses the name
    of the member it replaced, whose result may be recorded already)."""
    member = next((m for m in cp.spec.members if m.pod_uid == pod.metadata.uid), None)
    return checkpoint.result_of(cp.status.members, member) if member is not None else None


def _finished_at(pod: core.Pod) -> datetime.datetime | None:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    times = [
        s.state.terminated.finished_at
        for s in statuses
        if s.state is not None
        and s.state.terminated is not None
        and s.state.terminated.finished_at is not None
    ]
    return max(times, default=None)


def finalizer(
    pod: core.Pod,
    *,
    checkpoints: Iterable[checkpoint.Checkpoint],
    eviction_pending: bool | Callable[[], bool],
    now: datetime.datetime,
    margin: float,
    settle: float,
) -> Release:
    """The finalizer decision for one pod (rules in the module doc).

    ``checkpoints``: those listing this pod (by UID) as a member. ``eviction_pending``: its
    Workload has an eviction in force whose Checkpoint does not exist yet — or a function of no
    arguments answering that, called only when the rules get that far (the common case, a pod
    whose Checkpoint holds its result, never needs the answer).
    """
    if not has_finalizer(pod):
        return Release(False, "no finalizer")
    deleted = pod.metadata.deletion_timestamp
    backstop = deleted + _seconds(2 * margin) if deleted is not None else None
    if backstop is not None and now >= backstop:
        return Release(True, f"backstop: {2 * margin:g}s past the end of the grace period")
    owning = [cp for cp in checkpoints if cp.status.phase is not checkpoint.Phase.EXPIRED]
    waiting = [
        cp
        for cp in owning
        if (result := _result_for(cp, pod)) is None or result.state not in _TERMINAL_MEMBER
    ]
    if waiting:
        names = ", ".join(cp.name for cp in waiting)
        return Release(False, f"result not yet recorded in {names}", recheck_at=backstop)
    if owning:
        return Release(True, "result recorded in " + ", ".join(cp.name for cp in owning))
    if eviction_pending() if callable(eviction_pending) else eviction_pending:
        return Release(False, "an eviction of its Workload is being recorded", recheck_at=backstop)
    if not is_terminal(pod):
        return Release(False, "running", recheck_at=backstop)
    finished = _finished_at(pod)
    if deleted is not None and finished is not None and now < finished + _seconds(settle):
        return Release(False, "ended moments ago", recheck_at=finished + _seconds(settle))
    return Release(True, "ended without being a member of any checkpoint")


# --- failed restores -------------------------------------------------------------------------


def failed_restore(pod: core.Pod) -> tuple[str, str] | None:
    """``(checkpoint name, reason)`` when the pod's restore init container failed and the
    failure is not yet counted, else ``None``."""
    name = pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION)
    if not name or pod.metadata.annotation(keys.RESTORE_FAILURE_COUNTED_ANNOTATION) == name:
        return None
    deleting = pod.metadata.deletion_timestamp is not None
    statuses = (pod.status.init_container_statuses if pod.status else None) or []
    for status in statuses:
        if status.name != keys.RESTORE_INIT_CONTAINER:
            continue
        for state in (status.state, status.last_state):
            terminated = state.terminated if state is not None else None
            if terminated is not None and restore.failed(
                terminated.exit_code, pod_deleting=deleting
            ):
                detail = terminated.message or terminated.reason or ""
                reason = f"restore init container exited {terminated.exit_code}"
                return name, f"{reason}: {detail.strip()}" if detail.strip() else reason
    return None
