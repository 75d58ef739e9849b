"""Pure: a lineage's timeline (``kubectl kontinue describe``), oldest first.

Four kinds of entry, each from the object that records it:

- ``Evicted``: a Checkpoint's ``spec.trigger`` (source, reason, message, time) and its members
  (which pod on which node);
- ``Saved`` / ``SetFailed``: the same Checkpoint's ``status``: phase, members saved, bytes, how
  long the save took (from the trigger to the last member's ``finishedAt``), at that finish;
- ``Restored`` / ``ColdStart``: a pod the webhook plumbed: ``kontinue.dev/restore-from`` names
  the set it restores (with its node and how long the restore init-container ran),
  ``kontinue.dev/cold-start-reason`` why it started from zero;
- Events whose ``involvedObject`` is the owner, one of its pods or one of its Checkpoints
  (the bridge's ``CheckpointStarted``/``Succeeded``/``Failed``, the job controller's, ...).

Pods that were evicted are gone from the API; their start is then only known through the
Checkpoint that recorded them, so an old restore can be missing from the story — the
Checkpoints' evictions and saves never are (until retention deletes them).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from kontinue import keys
from kontinue.models import base, checkpoint, core
from kubectl_kontinue import lineages, printing

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Entry:
    time: datetime.datetime
    what: str
    detail: str
    data: dict[str, Any] = dataclasses.field(default_factory=dict)


def save_seconds(cp: checkpoint.Checkpoint) -> float | None:
    """From the eviction to the last member's exit: how long the set took to save.

    A member's ``startedAt`` is its container's start, not the save's, so the trigger time is
    the start (both have second resolution, as Kubernetes records times).
    """
    done = finished_at(cp)
    return max(0.0, (done - cp.spec.trigger.time).total_seconds()) if done is not None else None


def saved_bytes(cp: checkpoint.Checkpoint) -> int | None:
    sizes = [m.bytes for m in cp.status.members]
    if not sizes or any(s is None for s in sizes):
        return None
    return sum(s for s in sizes if s is not None)


def finished_at(cp: checkpoint.Checkpoint) -> datetime.datetime | None:
    times = [m.finished_at for m in cp.status.members if m.finished_at is not None]
    return max(times) if times else None


def init_seconds(pod: core.Pod) -> float | None:
    """How long the restore init-container ran, from its terminated state."""
    for status in (pod.status.init_container_statuses if pod.status else None) or []:
        if status.name != keys.RESTORE_INIT_CONTAINER or status.state is None:
            continue
        done = status.state.terminated
        if done is not None and done.started_at is not None and done.finished_at is not None:
            return (done.finished_at - done.started_at).total_seconds()
    return None


def _checkpoint_entries(cp: checkpoint.Checkpoint) -> list[Entry]:
    trigger = cp.spec.trigger
    members = ", ".join(
        f"{m.pod_name} on {m.node}" if m.node else m.pod_name for m in cp.spec.members
    )
    message = f": {trigger.message}" if trigger.message else ""
    entries = [
        Entry(
            trigger.time,
            "Evicted",
            f"{trigger.source.value} {trigger.reason}{message} ({members})",
            {
                "checkpoint": cp.name,
                "source": trigger.source.value,
                "reason": trigger.reason,
                "message": trigger.message,
                "members": [m.model_dump(by_alias=True) for m in cp.spec.members],
            },
        )
    ]
    phase = cp.status.phase
    if phase is checkpoint.Phase.PENDING or phase is checkpoint.Phase.IN_PROGRESS:
        return entries
    saved = sum(1 for m in cp.status.members if m.state is checkpoint.MemberState.SAVED)
    size = printing.size(saved_bytes(cp))
    took = save_seconds(cp)
    parts = [f"set {cp.name} {phase.value}: {saved}/{len(cp.spec.members)} members saved"]
    if size:
        parts.append(size)
    if took is not None:
        parts.append(f"save {printing.seconds(took)}")
    step = lineages.set_step(cp)
    if step is not None:
        parts.append(f"step {step}")
    if phase is not checkpoint.Phase.SUCCEEDED and cp.status.message:
        parts.append(cp.status.message)
    entries.append(
        Entry(
            finished_at(cp) or trigger.time,
            "Saved" if phase is checkpoint.Phase.SUCCEEDED else f"Set{phase.value}",
            ", ".join(parts),
            {
                "checkpoint": cp.name,
                "phase": phase.value,
                "membersSaved": saved,
                "members": len(cp.spec.members),
                "bytes": saved_bytes(cp),
                "saveSeconds": took,
                "step": step,
            },
        )
    )
    return entries


def _pod_entry(pod: core.Pod) -> Entry | None:
    created = pod.metadata.creation_timestamp
    if created is None:
        return None
    node = pod.spec.node_name or "(not scheduled)"
    restore = pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION)
    if restore:
        took = init_seconds(pod)
        init = f", init {printing.seconds(took)}" if took is not None else ""
        return Entry(
            created,
            "Restored",
            f"pod {pod.name} on {node} from set {restore}{init}",
            {
                "pod": pod.name,
                "node": pod.spec.node_name,
                "checkpoint": restore,
                "initSeconds": took,
            },
        )
    reason = pod.metadata.annotation(keys.COLD_START_REASON_ANNOTATION)
    if reason:
        return Entry(
            created,
            "ColdStart",
            f"pod {pod.name} on {node}: {reason}",
            {"pod": pod.name, "node": pod.spec.node_name, "reason": reason},
        )
    return None


def _event_time(event: Obj) -> datetime.datetime | None:
    for field in ("lastTimestamp", "eventTime", "firstTimestamp"):
        value = event.get(field) or ((event.get("series") or {}).get("lastObservedTime"))
        if value:
            try:
                return base.parse_time(str(value))
            except ValueError:
                continue
    created = (event.get("metadata") or {}).get("creationTimestamp")
    return base.parse_time(str(created)) if created else None


def _event_entries(item: lineages.Lineage, events: list[Obj]) -> list[Entry]:
    names = {item.lineage.owner_name}
    names |= {p.name for p in item.pods}
    names |= {m.pod_name for cp in item.checkpoints for m in cp.spec.members}
    names |= {cp.name for cp in item.checkpoints}
    entries = []
    for event in events:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        if involved.get("namespace", item.lineage.namespace) != item.lineage.namespace:
            continue
        if involved.get("name") not in names:
            continue
        uid = involved.get("uid")
        if (
            involved.get("kind") == item.lineage.owner_kind
            and uid
            and uid != item.lineage.owner_uid
        ):
            continue  # an earlier Job of the same name
        when = _event_time(event)
        if when is None:
            continue
        count = int(event.get("count") or 1)
        repeat = f" (x{count})" if count > 1 else ""
        kind = str(involved.get("kind") or "").lower()
        entries.append(
            Entry(
                when,
                f"Event {event.get('reason', '')}",
                f"{kind}/{involved.get('name')}: {event.get('message') or event.get('note', '')}"
                f"{repeat}",
                {
                    "type": event.get("type"),
                    "reason": event.get("reason"),
                    "object": f"{kind}/{involved.get('name')}",
                    "message": event.get("message") or event.get("note"),
                    "count": count,
                },
            )
        )
    return entries


def timeline(item: lineages.Lineage, events: list[Obj]) -> list[Entry]:
    entries: list[Entry] = []
    for cp in item.checkpoints:
        entries += _checkpoint_entries(cp)
    for pod in item.pods:
        if (entry := _pod_entry(pod)) is not None:
            entries.append(entry)
    entries += _event_entries(item, events)
    return sorted(entries, key=lambda e: e.time)


def header(item: lineages.Lineage) -> list[tuple[str, str]]:
    """The ``Key: value`` lines above the timeline."""
    queue = item.queue
    job = item.job
    lines = [
        ("Lineage", item.lineage.key),
        ("Owner UID", item.lineage.owner_uid),
        (
            "Queue",
            (
                f"{queue.system.value if queue.system else ''} {queue.queue}"
                f" ({'opted in' if queue.opted_in else queue.reason})"
            ).strip()
            if queue is not None
            else "<none>",
        ),
        ("Policy", queue.policy.name if queue is not None and queue.policy else "<none>"),
        (
            "Checkpoints",
            ", ".join(
                f"{item.count(phase)} {phase.value}"
                for phase in checkpoint.Phase
                if item.count(phase)
            )
            or "none",
        ),
        (
            "Pods",
            ", ".join(f"{p.name} on {p.spec.node_name or '(pending)'}" for p in item.live_pods)
            or "none running",
        ),
    ]
    if job is not None and job.status is not None:
        lines.append(
            (
                "Job status",
                f"active {job.status.active or 0}, succeeded {job.status.succeeded or 0}, "
                f"failed {job.status.failed or 0}",
            )
        )
    return lines


def render(item: lineages.Lineage, entries: list[Entry]) -> str:
    width = max(len(k) for k, _ in header(item)) + 2
    lines = [f"{k + ':':<{width}}{v}" for k, v in header(item)]
    lines.append("Timeline:")
    if not entries:
        lines.append("  <none>")
    rows = [{"time": base.format_time(e.time), "what": e.what, "detail": e.detail} for e in entries]
    if rows:
        columns = [
            printing.Column("TIME", "time"),
            printing.Column("WHAT", "what"),
            printing.Column("DETAIL", "detail"),
        ]
        lines += ["  " + line for line in printing.table(rows, columns, wide=False).splitlines()]
    return "\n".join(lines)


def to_data(item: lineages.Lineage, entries: list[Entry]) -> dict[str, Any]:
    return {
        **lineages.to_data(item),
        "timeline": [
            {"time": e.time, "what": e.what, "detail": e.detail, **e.data} for e in entries
        ],
    }
