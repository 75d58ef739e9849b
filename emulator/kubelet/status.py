"""The pod status a v1.36 kubelet writes, computed from what the runtime reports (pure).

Ported from kubernetes/kubernetes v1.36:
- pkg/kubelet/kubelet_pods.go ``generateAPIPodStatus`` (conditions appended in the order
  PodReadyToStartContainers, Initialized, Ready, ContainersReady, PodScheduled after the
  conditions the kubelet does not own), ``getPhase`` (native sidecars included),
  ``convertToAPIContainerStatuses`` (default waiting reason ``ContainerCreating``, or
  ``PodInitializing`` when the pod has init containers; regular containers sorted by name);
- pkg/kubelet/status/generate.go (``GeneratePodReadyCondition``,
  ``GenerateContainersReadyCondition``, ``GeneratePodInitializedCondition``; reasons
  ``ContainersNotReady``, ``ContainersNotInitialized``, ``PodCompleted``, ``PodFailed``);
- pkg/kubelet/status/status_manager.go ``mergePodStatus``: a terminal phase is not written while
  the pod worker could still have running containers (so after a natural exit one write shows the
  containers terminated with phase still Running), and a terminal phase never goes back;
  ``updateLastTransitionTime``.
Checked field by field against tests/fixtures/kubelet (real v1.36.2 kubelet watch streams).

Left out: ``status.resources`` (a cgroup read-back that came and went between runs), readiness
and startup probes (a running container is ready and started), restarts (restartPolicy Never
pods only: restartCount stays 0, lastState stays empty), the 12 KiB pod-wide message budget.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from emulator.kubelet import state

KUBELET_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclasses.dataclass(frozen=True)
class PodView:
    """What the kubelet knows when it writes: runtime records plus its pod worker's stage.

    ``records``: container name -> record; a container the runtime never created is absent (or
    present as ``Waiting``, e.g. ``CreateContainerConfigError``).
    ``pod_is_terminal``: the pod worker is terminating the pod (deleted, or all done) -- feeds
    ``getPhase``. ``could_have_running_containers``: the pod worker has not finished stopping
    everything; while true a terminal phase is held back (``mergePodStatus``).
    """

    records: Mapping[str, state.ContainerRecord]
    sandbox_ready: bool
    start_time: datetime.datetime
    host_ip: str
    pod_ip: str | None
    pod_is_terminal: bool = False
    could_have_running_containers: bool = True


def _time(at: datetime.datetime | None) -> str | None:
    if at is None:
        return None
    return at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _volume_mounts(container: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = []
    for mount in container.get("volumeMounts") or []:
        item: dict[str, Any] = {"name": mount["name"], "mountPath": mount["mountPath"]}
        if mount.get("readOnly"):
            item["readOnly"] = True
            item["recursiveReadOnly"] = mount.get("recursiveReadOnly") or "Disabled"
        found.append(item)
    return found


def container_status(
    container: Mapping[str, Any],
    record: state.ContainerRecord | None,
    *,
    default_waiting: str,
    init: bool,
) -> dict[str, Any]:
    """One ``v1.ContainerStatus`` (no probes: a running container is started and ready)."""
    current: state.State = record.state if record else state.Waiting(default_waiting)
    out: dict[str, Any] = {"name": container["name"]}
    ready = False
    started = False
    if isinstance(current, state.Waiting):
        waiting: dict[str, Any] = {"reason": current.reason}
        if current.message:
            waiting["message"] = current.message
        out["state"] = {"waiting": waiting}
    elif isinstance(current, state.Running):
        out["state"] = {"running": {"startedAt": _time(current.started_at)}}
        started = True
        ready = not init or is_sidecar(container)
    else:
        terminated: dict[str, Any] = {"exitCode": current.exit_code, "reason": current.reason}
        if current.message:
            terminated["message"] = current.message
        terminated["startedAt"] = _time(current.started_at)
        terminated["finishedAt"] = _time(current.finished_at)
        if record is not None and record.container_id:
            terminated["containerID"] = record.container_id
        out["state"] = {"terminated": terminated}
        ready = init and not is_sidecar(container) and current.exit_code == 0
    out["lastState"] = {}
    out["ready"] = ready
    out["restartCount"] = record.restart_count if record else 0
    out["image"] = container.get("image", "")
    created = record is not None and record.container_id is not None
    out["imageID"] = record.image_id if record is not None and created else ""
    if created and record is not None:
        out["containerID"] = record.container_id
    out["started"] = started
    if created:
        out["resources"] = {}
    mounts = _volume_mounts(container)
    if mounts:
        out["volumeMounts"] = mounts
    return out


def _state_of(status: Mapping[str, Any]) -> str:
    (kind,) = status["state"]
    return str(kind)


def get_phase(
    spec: Mapping[str, Any],
    statuses: Mapping[str, Mapping[str, Any]],
    *,
    pod_is_terminal: bool,
    pod_has_initialized: bool,
) -> str:
    """``getPhase`` for restartPolicy Never/OnFailure/Always, native sidecars included."""
    restart = spec.get("restartPolicy", "Always")
    pending_init = pending_sidecar = failed_init = 0
    unknown = running = waiting = stopped = succeeded = 0
    for container in spec.get("initContainers") or []:
        found = statuses.get(container["name"])
        if is_sidecar(container):
            if found is None:
                unknown += 1
                continue
            kind = _state_of(found)
            if kind == "running":
                if not found.get("started"):
                    pending_sidecar += 1
                running += 1
            elif kind == "waiting":
                pending_sidecar += 1
                waiting += 1
            continue
        if found is None:
            pending_init += 1
            continue
        kind = _state_of(found)
        if kind == "terminated":
            if found["state"]["terminated"]["exitCode"] != 0:
                failed_init += 1
        else:
            pending_init += 1
    for container in spec.get("containers") or []:
        found = statuses.get(container["name"])
        if found is None:
            unknown += 1
            continue
        kind = _state_of(found)
        if kind == "running":
            running += 1
        elif kind == "terminated":
            stopped += 1
            if found["state"]["terminated"]["exitCode"] == 0:
                succeeded += 1
        else:
            waiting += 1
    if failed_init > 0 and restart == "Never":
        return "Failed"
    if pending_init > 0 or (pending_sidecar > 0 and not pod_has_initialized) or waiting > 0:
        return "Pending"
    if running > 0 and unknown == 0:
        return "Running"
    if running == 0 and stopped > 0 and unknown == 0:
        if pod_is_terminal:
            return "Succeeded" if stopped == succeeded else "Failed"
        if restart == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if restart == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def _names(items: Sequence[str]) -> str:
    return "[" + " ".join(items) + "]"


def _containers_ready(
    spec: Mapping[str, Any], statuses: Mapping[str, Mapping[str, Any]], phase: str
) -> dict[str, Any]:
    unknown: list[str] = []
    unready: list[str] = []
    watched = [c for c in spec.get("initContainers") or [] if is_sidecar(c)]
    for container in [*watched, *(spec.get("containers") or [])]:
        found = statuses.get(container["name"])
        if found is None:
            unknown.append(container["name"])
        elif not found.get("ready"):
            unready.append(container["name"])
    if (phase == "Succeeded" and not unknown) or phase == "Failed":
        reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
        return {"type": "ContainersReady", "status": "False", "reason": reason}
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_names(unknown)}")
    if unready:
        messages.append(f"containers with unready status: {_names(unready)}")
    if messages:
        return {
            "type": "ContainersReady",
            "status": "False",
            "reason": "ContainersNotReady",
            "message": ", ".join(messages),
        }
    return {"type": "ContainersReady", "status": "True"}


def _initialized(
    spec: Mapping[str, Any], statuses: Mapping[str, Mapping[str, Any]], phase: str
) -> dict[str, Any]:
    unknown: list[str] = []
    incomplete: list[str] = []
    for container in spec.get("initContainers") or []:
        found = statuses.get(container["name"])
        if found is None:
            unknown.append(container["name"])
            continue
        if is_sidecar(container):
            if not found.get("started"):
                incomplete.append(container["name"])
        elif _state_of(found) != "terminated" or found["state"]["terminated"]["exitCode"] != 0:
            incomplete.append(container["name"])
    if phase == "Succeeded" and not unknown:
        return {"type": "Initialized", "status": "True", "reason": "PodCompleted"}
    regular_started = any(
        _state_of(statuses[c["name"]]) != "waiting"
        for c in spec.get("containers") or []
        if c["name"] in statuses
    )
    if regular_started:
        return {"type": "Initialized", "status": "True"}
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_names(unknown)}")
    if incomplete:
        messages.append(f"containers with incomplete status: {_names(incomplete)}")
    if messages:
        return {
            "type": "Initialized",
            "status": "False",
            "reason": "ContainersNotInitialized",
            "message": ", ".join(messages),
        }
    return {"type": "Initialized", "status": "True"}


def _finish_condition(
    condition: dict[str, Any],
    *,
    old: Mapping[str, Mapping[str, Any]],
    generation: int | None,
    now: datetime.datetime,
) -> dict[str, Any]:
    previous = old.get(condition["type"])
    if previous is not None and previous.get("status") == condition["status"]:
        transition = previous.get("lastTransitionTime")
    else:
        transition = _time(now)
    out: dict[str, Any] = {"type": condition["type"]}
    if generation is not None:
        out["observedGeneration"] = generation
    out["status"] = condition["status"]
    out["lastProbeTime"] = None
    out["lastTransitionTime"] = transition
    for key in ("reason", "message"):
        if key in condition:
            out[key] = condition[key]
    return out


UNKNOWN_REASON = "ContainerStatusUnknown"  # kubecontainer.ContainerReasonStatusUnknown
UNKNOWN_MESSAGE = "The container could not be located when the pod was terminated"


def _mark_unknown(statuses: list[dict[str, Any]], init_statuses: list[dict[str, Any]]) -> None:
    """A container last seen running that is gone when the pod is terminated: unknown, 137.

    ``convertToAPIContainerStatuses`` ("container ran and failed" is not "container never ran"):
    exit code 137, reason ``ContainerStatusUnknown``. A container that never started keeps its
    waiting state (``PodInitializing``, ``CreateContainerConfigError``).
    """
    unknown = {"exitCode": 137, "reason": UNKNOWN_REASON, "message": UNKNOWN_MESSAGE}
    for item in [*statuses, *init_statuses]:
        if _state_of(item) == "running":
            item["state"] = {"terminated": dict(unknown)}
            item["ready"] = False
            item["started"] = False


def pod_status(pod: Mapping[str, Any], view: PodView, *, now: datetime.datetime) -> dict[str, Any]:
    """The whole ``status`` the kubelet writes for ``pod`` (whose ``status`` is the API's view)."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    old = pod.get("status") or {}
    generation = meta.get("generation")
    init_containers = spec.get("initContainers") or []
    default_waiting = "PodInitializing" if init_containers else "ContainerCreating"
    init_statuses = [
        container_status(c, view.records.get(c["name"]), default_waiting=default_waiting, init=True)
        for c in init_containers
    ]
    regular = sorted(spec.get("containers") or [], key=lambda c: str(c["name"]))
    statuses = [
        container_status(
            c, view.records.get(c["name"]), default_waiting=default_waiting, init=False
        )
        for c in regular
    ]
    if view.pod_is_terminal and not view.could_have_running_containers:
        _mark_unknown(statuses, init_statuses)
    by_name = {s["name"]: s for s in [*init_statuses, *statuses]}
    has_initialized = any(_state_of(s) != "waiting" for s in statuses)
    phase = get_phase(
        spec, by_name, pod_is_terminal=view.pod_is_terminal, pod_has_initialized=has_initialized
    )
    old_phase = old.get("phase")
    if phase not in TERMINAL_PHASES and old_phase in TERMINAL_PHASES:
        phase = old_phase
    stopped = view.pod_is_terminal and not view.could_have_running_containers
    if stopped and phase not in TERMINAL_PHASES:
        # A pod whose worker has stopped everything is terminal: a pod deleted before its
        # containers ran (still Pending) ends Failed, not Pending (KEP-3329, kubelet_pods.go).
        phase = "Failed"
    generated = [
        {"type": "PodReadyToStartContainers", "status": "True" if view.sandbox_ready else "False"},
        _initialized(spec, by_name, phase),
    ]
    containers_ready = _containers_ready(spec, by_name, phase)
    ready = {**containers_ready, "type": "Ready"}
    generated += [ready, containers_ready, {"type": "PodScheduled", "status": "True"}]
    old_conditions = {c["type"]: c for c in old.get("conditions") or []}
    conditions = [c for c in old.get("conditions") or [] if c["type"] not in KUBELET_CONDITIONS]
    conditions += [
        _finish_condition(c, old=old_conditions, generation=generation, now=now) for c in generated
    ]
    # mergePodStatus: hold a terminal phase back until nothing can be running any more.
    written_phase = phase
    if (
        phase in TERMINAL_PHASES
        and old_phase not in TERMINAL_PHASES
        and view.could_have_running_containers
    ):
        written_phase = old_phase or "Pending"
    out: dict[str, Any] = {}
    if generation is not None:
        out["observedGeneration"] = generation
    out["phase"] = written_phase
    out["conditions"] = conditions
    out["hostIP"] = view.host_ip
    out["hostIPs"] = [{"ip": view.host_ip}]
    if view.pod_ip:
        out["podIP"] = view.pod_ip
        out["podIPs"] = [{"ip": view.pod_ip}]
    out["startTime"] = _time(view.start_time)
    if init_statuses:
        out["initContainerStatuses"] = init_statuses
    out["containerStatuses"] = statuses
    if "qosClass" in old:
        out["qosClass"] = old["qosClass"]
    for key in ("reason", "message", "nominatedNodeName"):
        if key in old and written_phase == old_phase:
            out[key] = old[key]
    return out
