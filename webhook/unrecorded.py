"""A predecessor that was told to stop and is in no set yet: its replacement waits, a bounded time.

A live read (webhook/freshness.py) sees every set that exists; it cannot see one the bridge has
not created yet. When the bridge is down, or its ``create`` is still being retried, an evicted
pod can save, end, and be replaced before its set exists: the replacement would be planned
without the newest save (an older set, or a cold start), silently. Its predecessor is still
visible, though: the pod holds ``kontinue.dev/checkpoint`` (the bridge has not recorded its
final status), it ran and was told to stop (``deletionTimestamp``, or ``DisruptionTarget=True``),
and no set of the view names it as a member.

While such a pod stopped less than ``hold`` seconds ago, the webhook denies the replacement's
CREATE (429, saying why) and its controller retries: the job controller's failed pod creation
fails the sync, whose key is requeued rate-limited (kubernetes/kubernetes
``pkg/controller/job/job_controller.go``, ``DefaultJobApiBackOff`` 1 s doubling to
``MaxJobApiBackOff`` 60 s); by then the set usually exists. Past ``hold`` the pod is admitted,
planned without that save, with a warning naming it: a bridge that stays down never blocks the
cluster for longer than ``hold`` (plus the controller's backoff).

Pure: the caller reads the pods (freshness) and the clock.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Sequence

from kontinue import keys
from kontinue import lineage as lineage_module
from kontinue.models import base, checkpoint, core


@dataclasses.dataclass(frozen=True)
class Victim:
    name: str
    uid: str
    stopped: datetime.datetime
    """When it ended (its containers' last ``finishedAt``, capped by its ``deletionTimestamp``),
    else its ``deletionTimestamp``, else when ``DisruptionTarget`` became true: where the bound
    starts (``_stopped``: a node clock ahead of ours is not believed)."""


@dataclasses.dataclass(frozen=True)
class Hold:
    deny: str = ""
    """The denial's message (non-empty: deny the CREATE, the controller retries)."""
    warning: str = ""
    """Admitted without a predecessor's save (the bound has passed)."""


def _ran(pod: core.Pod) -> bool:
    """Some container of the pod started (running, or terminated): only then can it have saved.
    A pod evicted while Pending is no one's predecessor worth waiting for."""
    return any(
        s.state is not None and (s.state.running is not None or s.state.terminated is not None)
        for s in (pod.status.container_statuses if pod.status else None) or []
    )


def _told_to_stop(pod: core.Pod) -> bool:
    """Deleted (``deletionTimestamp``: Kueue's preemption, Volcano's eviction, the Eviction API)
    or ``DisruptionTarget=True`` (the kubelet's node-pressure eviction, kube-scheduler's
    preemption). A pod that failed on its own (a crash, an OOM kill) is no one's predecessor
    worth waiting for: the bridge records no set for it (queue_bridge/reconciling.py
    ``finalizer`` releases it as "ended without being a member of any checkpoint")."""
    if pod.metadata.deletion_timestamp is not None:
        return True
    conditions = pod.status.conditions if pod.status else None
    return base.is_true(conditions, keys.POD_CONDITION_DISRUPTION_TARGET)


SKEW = datetime.timedelta(seconds=5)
"""How far a node's clock may run ahead of the webhook's before its times are not believed."""


def _stopped(pod: core.Pod, now: datetime.datetime) -> datetime.datetime | None:
    """Where the bound starts: when the pod ended, never later than its ``deletionTimestamp``.

    ``finishedAt`` and a kubelet's ``DisruptionTarget`` time come from the node's clock; a clock
    running ahead would stretch the hold without limit (every retry would find the end still in
    the future). ``deletionTimestamp`` is the apiserver's (the delete request's time plus the
    grace period, so a pod still saving has it in the future, legitimately): it caps the node's
    time, and a node time more than ``SKEW`` ahead of ``now`` is not believed at all (with no
    ``deletionTimestamp`` to fall back on, the pod holds nothing back)."""
    status = pod.status
    deletion = pod.metadata.deletion_timestamp
    node: datetime.datetime | None = None
    if status is not None and status.phase in ("Failed", "Succeeded"):
        ends = [
            s.state.terminated.finished_at
            for s in status.container_statuses or []
            if s.state is not None
            and s.state.terminated is not None
            and s.state.terminated.finished_at is not None
        ]
        node = max(ends) if ends else None
    if node is None and deletion is None:
        for condition in (status.conditions if status else None) or []:
            if (
                condition.type == keys.POD_CONDITION_DISRUPTION_TARGET
                and condition.status == "True"
                and condition.last_transition_time is not None
            ):
                node = condition.last_transition_time
    if node is not None and node > now + SKEW:
        node = None
    if deletion is not None:
        return min(node, deletion) if node is not None else deletion
    return node


def victims(
    pods: Iterable[core.Pod],
    checkpoints: Iterable[checkpoint.Checkpoint],
    *,
    owner: checkpoint.Lineage,
    now: datetime.datetime,
) -> list[Victim]:
    """Pods of ``owner`` (by the lineage annotation the webhook gave them, in its namespace)
    holding ``kontinue.dev/checkpoint``, that ran, were told to stop, and are a member of none of
    ``checkpoints``."""
    recorded = {m.pod_uid for cp in checkpoints for m in cp.spec.members}
    wanted = lineage_module.annotation_value(owner)
    found = []
    for pod in pods:
        meta = pod.metadata
        if (
            meta.namespace != owner.namespace
            or meta.annotation(keys.LINEAGE_ANNOTATION) != wanted
            or keys.CHECKPOINT_FINALIZER not in (meta.finalizers or [])
            or not meta.uid
            or meta.uid in recorded
            or not _ran(pod)
            or not _told_to_stop(pod)
        ):
            continue
        stopped = _stopped(pod, now)
        if stopped is not None:
            found.append(Victim(pod.name, meta.uid, stopped))
    return found


def decide(found: Sequence[Victim], *, now: datetime.datetime, hold: float) -> Hold:
    """Deny while some victim stopped less than ``hold`` seconds ago; past that, a warning."""
    if not found:
        return Hold()
    names = ", ".join(sorted(v.name for v in found))
    latest = max(v.stopped for v in found)
    until = latest + datetime.timedelta(seconds=hold)
    if now < until:
        left = (until - now).total_seconds()
        return Hold(
            deny=(
                f"kontinue: {names} of this workload stopped and may have saved, but no "
                "Checkpoint records it yet (the queue bridge has not seen it); retry: the "
                f"pod is admitted once it is recorded, or in at most {left:.0f}s without it"
            )
        )
    return Hold(
        warning=(
            f"kontinue: {names} stopped more than {hold:g}s ago and no Checkpoint records it "
            "(is the queue bridge running?): planned without its save"
        )
    )
