"""Pure: a checkpoint set's progress from its members' real container states.

The workload contract (docs/workload-contract.md, engine ``signal``): on SIGTERM the workload
saves, writes one line of JSON ``{"kontinue": "saved", ...}`` to its termination message file
once the save is durable, and exits non-zero (143). A member is saved only if all of that is
visible in the kubelet's final status of the pod's workload containers (kontinue/workload.py: the
``kontinue.dev/workload-containers`` annotation, else the accelerator containers, else the
first; other containers are neither judged nor waited for); anything else is a failed member
with the reason recorded:

- SIGKILL (exit 137, also at the end of the grace period) or ``OOMKilled``, marker or not: the
  process did not finish on its own terms;
- exit 0: the save cannot be trusted to be the preemption's, and a Succeeded preempted pod can
  *complete* its Job (tests/fixtures/cluster/job-accounting.md);
- a missing, multi-line or malformed message, or one without the marker (``FallbackToLogsOnError``
  puts a log tail there);
- finished after the deletion deadline (``deletionTimestamp`` is the end of the grace period).

A member whose pod is gone before its result was recorded, or (queue_bridge/reconciling.py)
still Terminating past its deadline, is ``Unreported``: no final status came, so whether it
saved is unknown. The set ends ``Failed`` so the cluster moves on, but the member's directory is
still offered to the next pod of its identity, which restores from it only if it verifies
(kontinue/restore_plan.py, "unknown but verifiable").

A member whose pod never started its main container (unscheduled, gated, pulling its image, or
still in its init containers such as the restore) saved nothing and changed nothing: it is
``CarriedForward``, not failed, once its pod ended (or at once when it was never scheduled), and
``carriedFrom`` records the Checkpoint its pod was told to restore from. Its identity resumes
from that older state (kontinue/restore_plan.py looks through it); it never fails the set.

Shapes follow the kubelet recordings (tests/fixtures/bridge/kubelet-*.json): the message is
copied verbatim, with no trailing newline added; a container that wrote nothing has no
``message``; times have second resolution.

One exception, :func:`late_status`: a ``Failed`` set whose members are ``Unreported`` is
upgraded when the reports arrive late and show saves inside the grace period.

The set's phase only moves forward: ``Pending`` (no member told to stop yet) -> ``InProgress``
(any member terminating or done) -> ``Succeeded`` (every member saved or carried forward) |
``Failed`` (every member done, one or more failed). It is terminal only when *every* member is,
so a restore never starts while one of them may still be writing.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterable

from kontinue import keys, lineage, workload
from kontinue.models import base, checkpoint, core
from kontinue.models import policy as policy_model

MemberResult = checkpoint.MemberResult
S = checkpoint.MemberState
SIGKILL_EXIT = 137
EXPECTED_EXIT = 143
NO_REPORT = "no final container status from the kubelet"
GRACE_TOLERANCE = datetime.timedelta(seconds=1)
"""``deletionTimestamp`` and ``finishedAt`` are truncated to seconds by different clocks."""

_ORDER = {
    checkpoint.Phase.PENDING: 0,
    checkpoint.Phase.IN_PROGRESS: 1,
    checkpoint.Phase.SUCCEEDED: 2,
    checkpoint.Phase.FAILED: 2,
    checkpoint.Phase.EXPIRED: 3,
}


@dataclasses.dataclass(frozen=True)
class Message:
    """A parsed termination message: ``saved`` only with the exact marker."""

    saved: bool
    bytes: int | None = None
    problem: str | None = None
    step: int | None = None
    """The workload's own progress counter, when it reports one (shown by kubectl kontinue)."""


def parse_message(text: str | None) -> Message:
    """Read one termination message; ``problem`` says what is wrong when it is not a save."""
    if text is None or not text.strip():
        return Message(False, problem="no termination message")
    body = text[:-1] if text.endswith("\n") else text
    if "\n" in body:
        return Message(False, problem="termination message is not one line")
    try:
        data = json.loads(body)
    except ValueError:
        return Message(False, problem=f"termination message is not JSON: {_clip(body)}")
    if not isinstance(data, dict):
        return Message(False, problem=f"termination message is not a JSON object: {_clip(body)}")
    marker = data.get(keys.SAVED_MARKER_KEY)
    if marker != keys.SAVED_MARKER_VALUE:
        detail = data.get("error") or data.get("reason")
        said = f"workload reported {keys.SAVED_MARKER_KEY}={marker!r}"
        return Message(False, problem=f"{said}: {detail}" if detail else said)
    size, step = data.get("bytes"), data.get("step")
    return Message(True, bytes=size if _count(size) else None, step=step if _count(step) else None)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _status(pod: core.Pod, container: str | None) -> core.ContainerStatus | None:
    name = container or (pod.spec.containers[0].name if pod.spec.containers else None)
    statuses = (pod.status.container_statuses if pod.status else None) or []
    return next((s for s in statuses if s.name == name), None)


def _pod_done(pod: core.Pod) -> bool:
    return pod.status is not None and pod.status.phase in ("Succeeded", "Failed")


def never_started(pod: core.Pod, status: core.ContainerStatus | None) -> bool:
    """The main container never ran in this pod: no status, or only ``waiting`` with no earlier
    termination and no restart (it was unscheduled, gated, pulling its image, or still in its
    init containers, such as the restore)."""
    if status is None:
        return True
    if status.restart_count or (status.last_state and status.last_state.terminated):
        return False
    state = status.state
    return state is None or (state.running is None and state.terminated is None)


def member_result(
    pod: core.Pod, *, container: str | None, path: str | None = None
) -> checkpoint.MemberResult:
    """The result of one member from its pod's current status (rules in the module doc).

    ``container``: the one container to judge; ``None``: the pod's workload containers
    (kontinue/workload.py: the ``kontinue.dev/workload-containers`` annotation, else the
    containers requesting accelerators, else the first). Other containers (proxies, log
    shippers, helpers that ignore SIGTERM) are neither judged nor waited for. With several
    workload containers the member is saved only when each saved; the first failure decides.
    ``path``: where the member saves, recorded as is (the caller knows the layout). The node is
    the member's ``spec.members[].node``, recorded when the Checkpoint is created.
    """
    names = (container,) if container is not None else workload.of_pod(pod).names
    results = [_container_result(pod, name, path=path) for name in names or (None,)]
    if len(results) == 1:
        return results[0]
    failed = [(n, r) for n, r in zip(names, results, strict=True) if r.state is S.FAILED]
    if failed:
        name, result = failed[0]
        return result.model_copy(update={"reason": f"container {name}: {result.reason}"})
    open_ = [r for r in results if r.state is not S.SAVED]
    if open_:
        return open_[0]
    sizes = [r.bytes for r in results]
    return results[0].model_copy(
        update={
            "bytes": sum(b for b in sizes if b is not None) if None not in sizes else None,
            "finished_at": max(
                (r.finished_at for r in results if r.finished_at is not None), default=None
            ),
            "reason": f"saved, {len(results)} workload containers",
        }
    )


def _container_result(
    pod: core.Pod, container: str | None, *, path: str | None
) -> checkpoint.MemberResult:
    fields: dict[str, object] = {"pod_name": pod.name, "pod_uid": pod.metadata.uid, "path": path}
    status = _status(pod, container)
    state = status.state if status is not None else None
    terminated = state.terminated if state is not None else None
    if terminated is None:
        running = state.running if state is not None else None
        unscheduled = pod.metadata.deletion_timestamp is not None and not pod.spec.node_name
        if never_started(pod, status) and (_pod_done(pod) or unscheduled):
            source = pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION)
            fields["state"] = checkpoint.MemberState.CARRIED_FORWARD
            fields["carried_from"] = source
            fields["reason"] = (
                "never started its main container (unscheduled, gated, pulling, or restoring): "
                f"carried forward from {source or 'nothing (it was a cold start)'}"
            )
        elif _pod_done(pod):
            fields["state"] = checkpoint.MemberState.FAILED
            fields["reason"] = "pod ended" if running else "pod ended before the container started"
        elif pod.metadata.deletion_timestamp is not None and running is not None:
            fields["state"] = checkpoint.MemberState.SAVING
            fields["started_at"] = running.get("startedAt")
        return checkpoint.MemberResult.model_validate(fields)
    fields["exit_code"] = terminated.exit_code
    fields["started_at"] = terminated.started_at
    fields["finished_at"] = terminated.finished_at
    message = parse_message(terminated.message)
    failure = _failure(pod, terminated, message)
    if failure is not None:
        fields["state"] = checkpoint.MemberState.FAILED
        fields["reason"] = failure
    else:
        fields["state"] = checkpoint.MemberState.SAVED
        fields["reason"] = f"saved, exit {terminated.exit_code}"
        fields["bytes"] = message.bytes
        fields["step"] = message.step
    return checkpoint.MemberResult.model_validate(fields)


def _failure(
    pod: core.Pod, terminated: core.ContainerStateTerminated, message: Message
) -> str | None:
    code = terminated.exit_code
    if terminated.reason == "OOMKilled":
        return f"OOMKilled (exit {code})"
    if code == SIGKILL_EXIT or terminated.signal == 9:
        return f"killed by SIGKILL (exit {code}): the save did not finish within the grace period"
    if code == 0:
        return "exited 0 after eviction: a preempted pod must exit non-zero (143)"
    if not message.saved:
        return f"{message.problem} (exit {code})"
    deadline = pod.metadata.deletion_timestamp
    if (
        deadline is not None
        and terminated.finished_at is not None
        and terminated.finished_at > deadline + GRACE_TOLERANCE
    ):
        return (
            f"finished at {_iso(terminated.finished_at)}, after the grace period ended "
            f"at {_iso(deadline)}"
        )
    return None


def _iso(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def phase(members: Iterable[checkpoint.MemberResult]) -> checkpoint.Phase:
    """The set's phase from its members' results (see module doc)."""
    states = [m.state for m in members]
    if not states or all(s is checkpoint.MemberState.PENDING for s in states):
        return checkpoint.Phase.PENDING
    if not all(s.terminal for s in states):
        return checkpoint.Phase.IN_PROGRESS
    if all(s.good for s in states):
        return checkpoint.Phase.SUCCEEDED
    return checkpoint.Phase.FAILED


def next_status(
    cp: checkpoint.Checkpoint,
    pods: Iterable[core.Pod],
    *,
    container: str | None = None,
    policy: policy_model.CheckpointPolicy | None = None,
    now: datetime.datetime | None = None,
) -> checkpoint.CheckpointStatus:
    """One reconcile step: the status ``cp`` should have given the member pods seen now.

    ``pods``: the caller's (synced) cache view; members, and their recorded results, are matched
    by pod UID, so a pod that reuses a member's name (Volcano names a vcjob's pods
    ``<job>-<task>-<index>`` in every incarnation) is not that member and never takes its
    result. A member's result, once terminal, is never recomputed (the pod may be gone after its
    finalizer is removed). A member whose pod is
    absent before its result was recorded is ``Unreported`` ("pod gone") — the finalizer exists
    to prevent exactly that. A terminal or ``Expired`` status is returned unchanged.

    ``now`` stamps the ``Saved`` condition when the set turns terminal (default: the latest
    member finish time, so the function stays pure).
    """
    current = cp.status
    if current.phase.terminal:
        return current
    by_uid = {p.metadata.uid: p for p in pods if p.metadata.uid}
    chosen_policy = policy or policy_model.DEFAULT
    results: list[checkpoint.MemberResult] = []
    for member in cp.spec.members:
        path = lineage.checkpoint_dir(chosen_policy, cp.spec.lineage, member.pod_uid)
        before = checkpoint.result_of(current.members, member)
        if before is not None and before.state.terminal:
            results.append(before)
            continue
        pod = by_uid.get(member.pod_uid)
        if pod is None:
            results.append(
                checkpoint.MemberResult(
                    pod_name=member.pod_name,
                    pod_uid=member.pod_uid,
                    state=checkpoint.MemberState.UNREPORTED,
                    reason=f"pod gone before its result was recorded: {NO_REPORT}",
                    path=path,
                )
            )
            continue
        results.append(member_result(pod, container=container, path=path))

    new_phase = phase(results)
    if _ORDER[new_phase] < _ORDER[current.phase]:
        new_phase = current.phase
    update: dict[str, object] = {
        "members": results,
        "phase": new_phase,
        "path": lineage.lineage_dir(cp.spec.lineage),
    }
    if new_phase.terminal:
        update["message"] = _summary(new_phase, results)
        stamp = now or max(
            (r.finished_at for r in results if r.finished_at is not None),
            default=cp.spec.trigger.time,
        )
        saved = new_phase is checkpoint.Phase.SUCCEEDED
        failed = any(r.state is S.FAILED for r in results)
        condition = base.Condition(
            type=keys.CONDITION_SAVED,
            status="True" if saved else "False",
            reason="AllMembersSaved" if saved else "MemberFailed" if failed else "MemberUnreported",
            message=str(update["message"]),
            last_transition_time=stamp,
        )
        others = [c for c in current.conditions if c.type != keys.CONDITION_SAVED]
        update["conditions"] = [*others, condition]
    return current.model_copy(update=update)


LATE_REPORT = "its final status arrived after the bridge's deadline"


def late_status(
    cp: checkpoint.Checkpoint, pods: Iterable[core.Pod], *, superseded: bool
) -> checkpoint.CheckpointStatus | None:
    """A ``Failed`` set upgraded by final statuses that came late, else ``None``.

    An ``Unreported`` member (no final status by its deadline: its kubelet was lost, the node
    partitioned; also ``Failed`` without an exit code, as such members were recorded before
    ``Unreported`` existed) is judged again when its pod's final status does arrive:
    a save that finished inside its grace period (the rules of :func:`member_result`, the
    deletion deadline included) makes it ``Saved``, and the set ``Succeeded`` once every member
    is good. Never when ``superseded`` (a newer set of the lineage exists: its state is later)
    nor for a member that did report a failure. A pod already running keeps what it restored
    from (its ``kontinue.dev/restore-from``); the upgrade serves the next incarnation.
    """
    current = cp.status
    if superseded or current.phase is not checkpoint.Phase.FAILED:
        return None
    by_uid = {p.metadata.uid: p for p in pods if p.metadata.uid}
    members: list[checkpoint.MemberResult] = []
    changed = False
    for result in current.members:
        member = next((m for m in cp.spec.members if result.is_of(m)), None)
        pod = by_uid.get(member.pod_uid) if member is not None else None
        unreported = result.state is S.UNREPORTED or (
            result.state is S.FAILED and result.exit_code is None
        )
        if unreported and pod is not None:
            late = member_result(pod, container=None, path=result.path)
            if late.state is S.SAVED:
                reason = f"{late.reason}; {LATE_REPORT}"
                result = late.model_copy(update={"reason": reason})
                changed = True
        members.append(result)
    if not changed:
        return None
    new_phase = phase(members)
    update: dict[str, object] = {"members": members, "phase": new_phase}
    if new_phase is checkpoint.Phase.SUCCEEDED:
        message = f"{_summary(new_phase, members)} ({LATE_REPORT})"
        update["message"] = message
        stamp = max(
            (r.finished_at for r in members if r.finished_at is not None),
            default=cp.spec.trigger.time,
        )
        condition = base.Condition(
            type=keys.CONDITION_SAVED,
            status="True",
            reason="LateReport",
            message=message,
            last_transition_time=stamp,
        )
        others = [c for c in current.conditions if c.type != keys.CONDITION_SAVED]
        update["conditions"] = [*others, condition]
    return current.model_copy(update=update)


def _summary(result: checkpoint.Phase, members: list[checkpoint.MemberResult]) -> str:
    if result is checkpoint.Phase.SUCCEEDED:
        saved = [m for m in members if m.state is checkpoint.MemberState.SAVED]
        carried = len(members) - len(saved)
        sizes = [m.bytes for m in saved if m.bytes is not None]
        size = f", {sum(sizes)} bytes" if saved and len(sizes) == len(saved) else ""
        if not carried:
            return f"{len(members)}/{len(members)} members saved{size}"
        return f"{len(saved)}/{len(members)} members saved{size}, {carried} carried forward"
    failed = [m for m in members if m.state is checkpoint.MemberState.FAILED]
    unreported = [m for m in members if m.state is checkpoint.MemberState.UNREPORTED]
    parts = []
    if failed:
        parts.append(f"{len(failed)}/{len(members)} members failed")
    if unreported:
        parts.append(
            f"{len(unreported)}/{len(members)} unreported (restored from only if its "
            "directory verifies)"
        )
    detail = "; ".join(f"{m.pod_name}: {m.reason}" for m in [*failed, *unreported])
    return f"{', '.join(parts)}: {detail}"
