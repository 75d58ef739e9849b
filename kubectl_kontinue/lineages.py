"""Pure: one summary per lineage (``kubectl kontinue list``) from a :class:`~.gathering.World`.

A lineage is a workload across its incarnations (:mod:`kontinue.lineage`): the owner's
namespace, kind, name and UID. Lineages are found from two places, because each sees what the
other cannot: ``Checkpoint.spec.lineage`` (every eviction ever recorded and not yet expired) and
the ``kontinue.dev/lineage`` annotation the webhook stamps on every pod it plumbs (a workload
that was never evicted has no Checkpoint yet).

What a pod says about its start is what the webhook wrote on it: ``kontinue.dev/restore-from``
names the Checkpoint it restores, ``kontinue.dev/cold-start-reason`` why it started from zero
(webhook/plumbing.py). Pods that were evicted are gone from the API, so restores and cold
starts are counted over the pods that still exist; the Checkpoints keep the evictions.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Sequence

from kontinue import keys, lineage, optin
from kontinue.models import checkpoint, core
from kontinue.models import errors as model_errors
from kubectl_kontinue import gathering, printing
from kubectl_kontinue.printing import Column

Phase = checkpoint.Phase


def owner_ref(lin: checkpoint.Lineage) -> str:
    """How the owner is written on the command line: ``job/NAME``, ``job.batch.volcano.sh/N``."""
    return f"{lin.owner_kind.lower()}/{lin.owner_name}"


def pod_lineage(pod: core.Pod) -> checkpoint.Lineage | None:
    """The lineage the webhook stamped on ``pod``, ``None`` for a pod Kontinue never plumbed."""
    value = pod.metadata.annotation(keys.LINEAGE_ANNOTATION)
    if not value:
        return None
    try:
        return lineage.parse_annotation(value)
    except model_errors.InvalidObject:
        return None


def _key(lin: checkpoint.Lineage) -> tuple[str, str, str, str]:
    return (lin.namespace, lin.owner_kind, lin.owner_name, lin.owner_uid)


def trigger_time(cp: checkpoint.Checkpoint) -> datetime.datetime:
    return cp.spec.trigger.time


def is_live(pod: core.Pod) -> bool:
    """Not terminated and not being deleted: an incarnation that holds (or will hold) a node."""
    phase = pod.status.phase if pod.status else None
    return phase not in ("Succeeded", "Failed") and pod.metadata.deletion_timestamp is None


def set_step(cp: checkpoint.Checkpoint) -> int | None:
    """The training step the set saved, when every member reported the same one.

    Read from the saved members' ``status.members[].step`` (the bridge records what the
    workload's termination message says); ``None`` when unknown or when members disagree.
    """
    steps = {m.step for m in cp.status.members if m.state is checkpoint.MemberState.SAVED}
    if len(steps) != 1:
        return None
    (step,) = steps
    return step if isinstance(step, int) else None


@dataclasses.dataclass
class Lineage:
    """Everything ``list`` and ``describe`` know about one lineage."""

    lineage: checkpoint.Lineage
    checkpoints: list[checkpoint.Checkpoint] = dataclasses.field(default_factory=list)
    """Oldest first, by trigger time."""
    pods: list[core.Pod] = dataclasses.field(default_factory=list)
    """Oldest first, by creation time."""
    job: core.Job | None = None
    queue: optin.Decision | None = None

    @property
    def owner(self) -> str:
        return owner_ref(self.lineage)

    def count(self, phase: Phase) -> int:
        return sum(1 for cp in self.checkpoints if cp.status.phase is phase)

    @property
    def newest_good(self) -> checkpoint.Checkpoint | None:
        good = [cp for cp in self.checkpoints if cp.status.phase is Phase.SUCCEEDED]
        return good[-1] if good else None

    @property
    def newest(self) -> checkpoint.Checkpoint | None:
        live = [cp for cp in self.checkpoints if cp.status.phase is not Phase.EXPIRED]
        return live[-1] if live else None

    @property
    def restored(self) -> list[core.Pod]:
        return [p for p in self.pods if p.metadata.annotation(keys.RESTORE_FROM_ANNOTATION)]

    @property
    def cold_started(self) -> list[core.Pod]:
        return [p for p in self.pods if p.metadata.annotation(keys.COLD_START_REASON_ANNOTATION)]

    @property
    def live_pods(self) -> list[core.Pod]:
        return [p for p in self.pods if is_live(p)]


def collect(world: gathering.World) -> list[Lineage]:
    """Every lineage in ``world``, sorted by namespace, owner and UID."""
    found: dict[tuple[str, str, str, str], Lineage] = {}

    def entry(lin: checkpoint.Lineage) -> Lineage:
        return found.setdefault(_key(lin), Lineage(lineage=lin))

    for cp in world.checkpoints:
        entry(cp.spec.lineage).checkpoints.append(cp)
    for pod in world.pods:
        lin = pod_lineage(pod)
        if lin is not None:
            entry(lin).pods.append(pod)
    for item in found.values():
        item.checkpoints.sort(key=lambda cp: (trigger_time(cp), cp.name))
        item.pods.sort(key=lambda p: (p.metadata.creation_timestamp or _EPOCH, p.name))
        lin = item.lineage
        job = world.job(lin.namespace, lin.owner_name) if lin.owner_kind == "Job" else None
        item.job = job if job is not None and job.metadata.uid == lin.owner_uid else None
        item.queue = _queue(item, world)
    return sorted(found.values(), key=lambda i: _key(i.lineage))


_EPOCH = datetime.datetime.min.replace(tzinfo=datetime.UTC)


def _queue(item: Lineage, world: gathering.World) -> optin.Decision | None:
    """Opt-in as the webhook decides it, from the newest pod, else the Job."""
    sources: list[core.Pod | core.Job] = [*reversed(item.pods)]
    if item.job is not None:
        sources.append(item.job)
    first: optin.Decision | None = None
    for obj in sources:
        marks = optin.Marks(
            labels=obj.metadata.labels or {}, annotations=obj.metadata.annotations or {}
        )
        decision = optin.decide_queue(marks, namespace=item.lineage.namespace, state=world)
        if decision.opted_in:
            return decision
        first = first or decision
    return first


def normalize_owner(text: str) -> str:
    """``job/NAME`` as typed (``Job/NAME``, ``jobs/NAME``, bare ``NAME`` = a batch Job)."""
    kind, _, name = text.rpartition("/")
    kind = kind.lower() or "job"
    if kind in ("jobs", "job.batch", "jobs.batch"):
        kind = "job"
    return f"{kind}/{name}"


def select(items: Iterable[Lineage], *, owner: str | None, namespace: str | None) -> list[Lineage]:
    """Those in ``namespace`` (``None``: any) of ``owner`` (see :func:`normalize_owner`)."""
    wanted = normalize_owner(owner) if owner is not None else None
    return [
        item
        for item in items
        if (namespace is None or item.lineage.namespace == namespace)
        and (wanted is None or item.owner == wanted)
    ]


def row(item: Lineage, *, now: datetime.datetime) -> dict[str, object]:
    """One ``list`` row; keys match :func:`columns`."""
    good = item.newest_good
    restores = item.restored
    last_restore = restores[-1] if restores else None
    queue = item.queue
    return {
        "namespace": item.lineage.namespace,
        "owner": item.owner,
        "queue": _queue_text(queue),
        "checkpoints": f"{item.count(Phase.SUCCEEDED)}/{item.count(Phase.FAILED)}",
        "newest_good": (
            f"{_step_text(good)}{printing.age(trigger_time(good), now=now)} ago"
            if good is not None
            else ""
        ),
        "last_restore": (
            f"{last_restore.metadata.annotation(keys.RESTORE_FROM_ANNOTATION)} "
            f"({printing.age(last_restore.metadata.creation_timestamp, now=now)} ago)"
            if last_restore is not None
            else ""
        ),
        "cold_starts": len(item.cold_started),
        "pods": len(item.live_pods),
        "nodes": sorted({p.spec.node_name for p in item.live_pods if p.spec.node_name}),
        "newest_good_name": good.name if good is not None else "",
        "uid": item.lineage.owner_uid,
    }


def _step_text(cp: checkpoint.Checkpoint) -> str:
    step = set_step(cp)
    return f"step {step}, " if step is not None else ""


def _queue_text(decision: optin.Decision | None) -> str:
    if decision is None:
        return ""
    if not decision.opted_in:
        return f"({decision.reason})"
    return decision.queue


def to_data(item: Lineage) -> dict[str, object]:
    """The machine-readable form (``-o json|yaml``): names, counts and times, no prose."""
    good = item.newest_good
    return {
        "lineage": item.lineage.key,
        "namespace": item.lineage.namespace,
        "owner": item.owner,
        "ownerUID": item.lineage.owner_uid,
        "queue": {
            "system": item.queue.system.value if item.queue and item.queue.system else None,
            "name": item.queue.queue if item.queue else None,
            "optedIn": bool(item.queue and item.queue.opted_in),
            "policy": item.queue.policy.name if item.queue and item.queue.policy else None,
        },
        "checkpoints": {
            "succeeded": item.count(Phase.SUCCEEDED),
            "failed": item.count(Phase.FAILED),
            "inProgress": item.count(Phase.IN_PROGRESS) + item.count(Phase.PENDING),
            "expired": item.count(Phase.EXPIRED),
        },
        "newestGood": (
            {"name": good.name, "time": trigger_time(good), "step": set_step(good)}
            if good is not None
            else None
        ),
        "restores": [
            {
                "pod": p.name,
                "node": p.spec.node_name,
                "checkpoint": p.metadata.annotation(keys.RESTORE_FROM_ANNOTATION),
                "created": p.metadata.creation_timestamp,
            }
            for p in item.restored
        ],
        "coldStarts": [
            {
                "pod": p.name,
                "reason": p.metadata.annotation(keys.COLD_START_REASON_ANNOTATION),
                "created": p.metadata.creation_timestamp,
            }
            for p in item.cold_started
        ],
        "pods": [{"name": p.name, "node": p.spec.node_name} for p in item.live_pods],
    }


def columns(*, all_namespaces: bool) -> Sequence[Column]:
    cols = [Column("NAMESPACE", "namespace")] if all_namespaces else []
    return [
        *cols,
        Column("OWNER", "owner"),
        Column("QUEUE", "queue"),
        Column("CHECKPOINTS(OK/FAILED)", "checkpoints"),
        Column("NEWEST GOOD", "newest_good"),
        Column("LAST RESTORE", "last_restore"),
        Column("COLD STARTS", "cold_starts"),
        Column("PODS", "pods", wide=True),
        Column("NODES", "nodes", wide=True),
        Column("NEWEST GOOD CHECKPOINT", "newest_good_name", wide=True),
        Column("OWNER UID", "uid", wide=True),
    ]
