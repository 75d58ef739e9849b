"""Which queue a pod or Job belongs to, whether that queue opted in, and which policy applies.

Shared by the webhook (at admission) and the queue bridge (a pod-level disruption is only
checkpointed for an opted-in pod), so both answer the same way from their own caches.

Pure: reads only a :class:`Queues` (the webhook's :class:`~webhook.state.State` is one). The
lookups follow what the queue systems stamp on pods at creation (docs/cluster-emulation-queues.md;
kueue ``pkg/podset/podset.go``):

* **Kueue**: label ``kueue.x-k8s.io/cluster-queue-name`` (Kueue writes it into the Job template
  at admission, gate ``AssignQueueLabelsForPods``); else the LocalQueue named by
  ``kueue.x-k8s.io/local-queue-name`` or ``kueue.x-k8s.io/queue-name`` (plain-pod integration,
  and the Job itself) -> ``LocalQueue.spec.clusterQueue``.
* **Volcano**: annotation ``scheduling.k8s.io/group-name`` -> PodGroup -> ``spec.queue``; when
  the PodGroup is not (yet) cached or not named (the PodGroup controller patches the name onto
  plain pods only after creation), the queue annotation the PodGroup would take it from
  (``scheduling.volcano.sh/queue-name``, or ``volcano.sh/queue-name`` on vcjob pods).

A queue opts in with the label ``kontinue.dev/enabled: "true"``; ``kontinue.dev/policy`` names a
``CheckpointPolicy`` (else ``default``, else the built-in default). The annotation
``kontinue.dev/checkpoint: "false"`` on the object opts it out. A named policy missing from the
cache does not fall back to the default: the pod is left alone with a warning, because a policy
the admin chose (storage, grace period) silently replaced by another is worse than no checkpoint.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kontinue import keys
from kontinue.models import base, kueue, volcano
from kontinue.models import policy as policy_model


class Queues(Protocol):
    """The point lookups opt-in needs, answered from in-memory caches (never the API)."""

    def cluster_queue(self, name: str) -> kueue.ClusterQueue | None: ...

    def local_queue(self, namespace: str, name: str) -> kueue.LocalQueue | None: ...

    def volcano_queue(self, name: str) -> volcano.Queue | None: ...

    def pod_group(self, namespace: str, name: str) -> volcano.PodGroup | None: ...

    def policy(self, name: str) -> policy_model.CheckpointPolicy | None: ...


class QueueSystem(enum.StrEnum):
    KUEUE = "Kueue"
    VOLCANO = "Volcano"


@dataclasses.dataclass(frozen=True)
class Decision:
    """The answer for one object. ``policy`` is set exactly when ``opted_in``."""

    opted_in: bool
    reason: str
    system: QueueSystem | None = None
    queue: str = ""
    policy: policy_model.CheckpointPolicy | None = None
    warnings: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Marks:
    """The labels and annotations of a pod or Job: all that opt-in reads.

    Read straight from the review's object rather than through the ``ObjectMeta`` model: most
    pods stop at opt-in, and this is their whole cost (the apiserver has already validated the
    maps; :meth:`of` only checks their shape).
    """

    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Marks:
        """From a raw object; :class:`ValueError` names a ``metadata`` field that is not a map."""
        meta = obj.get("metadata") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        for field, value in (("labels", labels), ("annotations", annotations)):
            if not isinstance(value, dict):
                raise ValueError(f"metadata.{field} is not a map")
        return cls(labels, annotations)

    @classmethod
    def from_meta(cls, meta: base.ObjectMeta) -> Marks:
        return cls(meta.labels or {}, meta.annotations or {})

    def label(self, key: str) -> str | None:
        return self.labels.get(key)

    def annotation(self, key: str) -> str | None:
        return self.annotations.get(key)


def _out(reason: str, *, warnings: tuple[str, ...] = ()) -> Decision:
    return Decision(opted_in=False, reason=reason, warnings=warnings)


def _kueue_cluster_queue(meta: Marks, namespace: str, state: Queues) -> str | None:
    if name := meta.label(keys.KUEUE_CLUSTER_QUEUE_LABEL):
        return name
    local = meta.label(keys.KUEUE_LOCAL_QUEUE_LABEL) or meta.label(keys.KUEUE_QUEUE_NAME_LABEL)
    if not local:
        return None
    queue = state.local_queue(namespace, local)
    return queue.spec.cluster_queue if queue is not None else None


def _volcano_queue(meta: Marks, namespace: str, state: Queues) -> str | None:
    if group := meta.annotation(keys.VOLCANO_PODGROUP_ANNOTATION):
        pod_group = state.pod_group(namespace, group)
        if pod_group is not None and pod_group.spec.queue:
            return pod_group.spec.queue
    return (
        meta.annotation(keys.VOLCANO_POD_QUEUE_ANNOTATION)
        or meta.annotation(keys.VOLCANO_QUEUE_NAME_ANNOTATION)
        or meta.label(keys.VOLCANO_QUEUE_NAME_ANNOTATION)
    )


def policy_named(
    name: str | None, *, policy: Callable[[str], policy_model.CheckpointPolicy | None]
) -> policy_model.CheckpointPolicy | None:
    """The policy a queue's ``kontinue.dev/policy`` label (or a Checkpoint's ``spec.policyName``)
    names: no name, ``default`` if defined, else the built-in default; a name that is not defined,
    the built-in default only if it is ``default``, else ``None`` (the caller says why)."""
    if not name:
        return policy(keys.DEFAULT_POLICY_NAME) or policy_model.DEFAULT
    found = policy(name)
    if found is None and name == keys.DEFAULT_POLICY_NAME:
        return policy_model.DEFAULT
    return found


def _decide(
    system: QueueSystem,
    queue_name: str,
    labels: Mapping[str, str] | None,
    policy: Callable[[str], policy_model.CheckpointPolicy | None],
) -> Decision:
    labels = labels or {}
    kind = "ClusterQueue" if system is QueueSystem.KUEUE else "Queue"
    if labels.get(keys.ENABLED_LABEL) != "true":
        return _out(f"{system} {kind} {queue_name} has not opted in")
    chosen = policy_named(labels.get(keys.POLICY_LABEL), policy=policy)
    if chosen is None:
        missing = labels[keys.POLICY_LABEL]
        return _out(
            f"CheckpointPolicy {missing} of {system} {kind} {queue_name} not found",
            warnings=(
                f"kontinue: CheckpointPolicy {missing!r} (queue {queue_name}) does not exist; "
                "this workload runs without checkpoints",
            ),
        )
    return Decision(
        opted_in=True,
        reason=f"{system} {kind} {queue_name} opted in",
        system=system,
        queue=queue_name,
        policy=chosen,
    )


def cluster_queue_decision(
    name: str,
    *,
    cluster_queue: Callable[[str], kueue.ClusterQueue | None],
    policy: Callable[[str], policy_model.CheckpointPolicy | None],
) -> Decision:
    """Opt-in through the Kueue ClusterQueue ``name``: the one rule the webhook (for a pod or
    Job) and the bridge (for a Workload, queue_bridge/reconciling.py ``opt_in``) both apply."""
    cq = cluster_queue(name)
    if cq is None:
        return _out(f"Kueue ClusterQueue {name} not in cache")
    return _decide(QueueSystem.KUEUE, name, cq.metadata.labels, policy)


def volcano_queue_decision(name: str, *, state: Queues) -> Decision:
    """Opt-in through the Volcano Queue ``name`` (a vcjob's ``spec.queue``, ``default`` when
    unset as Volcano's jobs/mutate webhook defaults it)."""
    vq = state.volcano_queue(name)
    if vq is None:
        return _out(f"Volcano Queue {name} not in cache")
    return _decide(QueueSystem.VOLCANO, name, vq.metadata.labels, state.policy)


def opted_out(meta: Marks) -> bool:
    return meta.annotation(keys.CHECKPOINT_OPT_OUT_ANNOTATION) == "false"


def decide(meta: Marks, *, namespace: str, state: Queues) -> Decision:
    """Opt-in of a pod (or a Job: same labels) in ``namespace``, from caches only.

    ``namespace`` is passed explicitly because a CREATE review may leave it out of the object.
    """
    if opted_out(meta):
        return _out(f"opted out by annotation {keys.CHECKPOINT_OPT_OUT_ANNOTATION}")
    return decide_queue(meta, namespace=namespace, state=state)


def decide_queue(meta: Marks, *, namespace: str, state: Queues) -> Decision:
    """Like :func:`decide` but ignoring the object's own opt-out annotation."""
    if cluster_queue := _kueue_cluster_queue(meta, namespace, state):
        return cluster_queue_decision(
            cluster_queue, cluster_queue=state.cluster_queue, policy=state.policy
        )
    if volcano_queue := _volcano_queue(meta, namespace, state):
        return volcano_queue_decision(volcano_queue, state=state)
    return _out("no Kueue or Volcano queue")
