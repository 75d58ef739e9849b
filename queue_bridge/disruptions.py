"""Pure decisions of the pod path: pod-level disruptions of opted-in pods -> Checkpoints.

The Kueue path (:mod:`queue_bridge.reconciling`) sees a Workload's ``Evicted=True``. Victims of
kube-scheduler preemption, Eviction API drains, the taint manager and Volcano's preempt/reclaim
carry no such Workload condition: their pods get ``DisruptionTarget=True`` (and, from Volcano,
``Ready=False`` reason ``Evict``) before a graceful DELETE. :mod:`queue_bridge.sources` turns
one pod into a trigger; this module groups the triggered pods into Checkpoints by the same rules
as the Kueue path:

- **opt-in** is the webhook's (:func:`kontinue.optin.decide`): the pod's Kueue ClusterQueue or
  Volcano Queue carries ``kontinue.dev/enabled: "true"``, and the policy it names lists the
  reason in ``triggers.disruptionReasons``;
- **one Checkpoint per eviction event**: the pods of one lineage disrupted by the same trigger
  (same source and reason, condition times within ``window`` seconds of the first) form one
  group. A group whose Checkpoint exists and is still ``Pending``/``InProgress`` gains the
  members seen later (a victim's status patch can reach the bridge after the Checkpoint was
  made); once it is terminal, a later victim starts a new Checkpoint;
- **never twice**: a pod already a member of an unexpired Checkpoint (either path) is skipped,
  and so is one whose Workload has a Kueue eviction in force that is not recorded yet (the
  Kueue path claims it; the caller decides that, from its caches);
- **names** are deterministic per lineage and trigger (:func:`checkpoint_name`), so a relist, a
  restart or the other replica finds the same Checkpoint instead of making a second one; a later
  victim of an event whose set is already terminal gets a name that also covers its own UID.

Limits: the grouping window is compared on condition times, which Kubernetes stores in whole
seconds, so one second is added to it; two distinct evictions of one lineage with the same
source and reason inside that window are recorded as one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from kontinue import keys, optin
from kontinue.models import base, checkpoint, core
from kontinue.models import policy as policy_model
from queue_bridge import naming, reconciling, sources

TIME_RESOLUTION_SECONDS = 1.0
"""Condition times are truncated to seconds: two writes 0.2 s apart can differ by 1 s."""


@dataclasses.dataclass(frozen=True)
class Disrupted:
    """One opted-in pod with a pod-level trigger not yet recorded in any Checkpoint."""

    pod: core.Pod
    trigger: checkpoint.Trigger
    lineage: checkpoint.Lineage
    policy: policy_model.CheckpointPolicy


@dataclasses.dataclass(frozen=True)
class Group:
    """Pods of one lineage disrupted by one trigger.

    ``existing`` is the open Checkpoint they join, else ``None`` and a Checkpoint named ``name``
    is to be created with ``trigger``.
    """

    name: str
    trigger: checkpoint.Trigger
    lineage: checkpoint.Lineage
    policy: policy_model.CheckpointPolicy
    pods: list[core.Pod]
    existing: checkpoint.Checkpoint | None = None


def has_disruption(pod: core.Pod) -> bool:
    """Cheap pre-filter for watch callbacks: a Kontinue pod with ``DisruptionTarget=True``."""
    if pod.status is None or not pod.metadata.annotation(keys.LINEAGE_ANNOTATION):
        return False
    return base.is_true(pod.status.conditions, keys.POD_CONDITION_DISRUPTION_TARGET)


def pod_trigger(pod: core.Pod, *, decision: optin.Decision) -> checkpoint.Trigger | None:
    """The pod-level trigger in force on ``pod`` for its queue's opt-in ``decision``.

    Level-triggered (no previous version): the deterministic name makes a second sighting of
    one eviction harmless. ``None`` for a queue that has not opted in and for a reason its
    policy does not list.
    """
    if not decision.opted_in or decision.policy is None:
        return None
    return sources.pod_eviction(pod, previous=None, policy=decision.policy)


def checkpoint_name(
    lineage: checkpoint.Lineage, trigger: checkpoint.Trigger, *, victim: str | None = None
) -> str:
    """The Checkpoint name of one pod-level eviction of ``lineage``.

    The digest covers the owner UID, the source and the reason as well as the time, so a
    taint-manager eviction and a scheduler preemption in the same second do not collide, and
    never with the Kueue path's names (those hash the Workload's UID).
    """
    key = f"{lineage.owner_uid}/{trigger.source.value}/{trigger.reason}"
    if victim:
        key += f"/{victim}"
    return naming.checkpoint_name(lineage, trigger=trigger, workload_uid=key)


def _same_event(trigger: checkpoint.Trigger, anchor: checkpoint.Trigger, *, window: float) -> bool:
    if trigger.source is not anchor.source or trigger.reason != anchor.reason:
        return False
    gap = abs((trigger.time - anchor.time).total_seconds())
    return gap <= window + TIME_RESOLUTION_SECONDS


def is_open(cp: checkpoint.Checkpoint) -> bool:
    """Still collecting results (``Pending``/``InProgress``): later victims may join it."""
    return not cp.status.phase.terminal


def group(
    disrupted: Iterable[Disrupted],
    *,
    checkpoints: Sequence[checkpoint.Checkpoint],
    window: float,
) -> list[Group]:
    """Group ``disrupted`` pods into Checkpoints to create or join (see the module doc).

    ``checkpoints``: the lineage's Checkpoints (any phase; only open pod-path ones are joined).
    Pods are taken in trigger-time order, so the earliest victim anchors a new group and the
    result does not depend on the order the caller found them in.
    """
    groups: list[Group] = []
    ordered = sorted(disrupted, key=lambda d: (d.trigger.time, d.pod.name))
    for item in ordered:
        owner = item.lineage.owner_uid
        found = next(
            (
                g
                for g in groups
                if g.lineage.owner_uid == owner
                and _same_event(item.trigger, g.trigger, window=window)
            ),
            None,
        )
        if found is not None:
            found.pods.append(item.pod)
            continue
        joined = next(
            (
                cp
                for cp in sorted(checkpoints, key=lambda cp: (cp.spec.trigger.time, cp.name))
                if is_open(cp)
                and cp.spec.lineage.owner_uid == owner
                and _same_event(item.trigger, cp.spec.trigger, window=window)
            ),
            None,
        )
        if joined is not None:
            groups.append(
                Group(
                    name=joined.name,
                    trigger=joined.spec.trigger,
                    lineage=joined.spec.lineage,
                    policy=item.policy,
                    pods=[item.pod],
                    existing=joined,
                )
            )
            continue
        name = checkpoint_name(item.lineage, item.trigger)
        if any(cp.name == name for cp in checkpoints):
            # The event's set is already terminal (a member that never ran is recorded at once,
            # so this happens within the same second): this later victim gets its own set,
            # named after it so that a relist finds the same one.
            name = checkpoint_name(item.lineage, item.trigger, victim=item.pod.metadata.uid)
        groups.append(
            Group(
                name=name,
                trigger=item.trigger,
                lineage=item.lineage,
                policy=item.policy,
                pods=[item.pod],
            )
        )
    return groups


def added_members(cp: checkpoint.Checkpoint, pods: Sequence[core.Pod]) -> list[checkpoint.Member]:
    """``cp``'s members followed by ``pods`` not already in it, as the new ``spec.members``;
    each new member records its pod's identity (kontinue/identity.py)."""
    present = {m.pod_uid for m in cp.spec.members}
    by_uid = {p.metadata.uid: p for p in pods if p.metadata.uid and p.metadata.uid not in present}
    fresh = reconciling.members_of(by_uid.values(), owner=cp.spec.lineage)
    return [*cp.spec.members, *fresh]


def eviction(found: Group) -> reconciling.Eviction:
    """The :class:`~queue_bridge.reconciling.Eviction` a new Checkpoint is built from."""
    return reconciling.Eviction(
        trigger=found.trigger, lineage=found.lineage, name=found.name, policy=found.policy
    )
