"""The emulated kubelet replays every recorded v1.36.2 scenario with real processes and signals.

For each watch stream in tests/fixtures/kubelet the recorded pod (as bound by the scheduler) runs
on the emulated kubelet: its containers are real ``python3 -c`` processes, deletion sends real
SIGTERM/SIGKILL, termination messages come from real files. The sequence of statuses the worker
writes must equal the sequence the real kubelet wrote, field by field, with timestamps, IPs,
container and image IDs and ``status.resources`` (a cgroup read-back, see RECORDING.md) set aside.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from emulator.kubelet import launch, runtime, state, status, worker
from kontinue import keys
from tests.waiting import eventually

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet"
FAST = worker.Timing(relist_seconds=0.25, sandbox_seconds=0.05, terminal_delay_seconds=0.25)
NATURAL = [
    "01-run-to-success",
    "02-run-to-failure",
    "06-init-and-native-sidecar",
    "10-downward-env",
]
DELETED = [
    "03-sigterm-saved",
    "04-sigterm-ignored-killed",
    "05-prestop-then-sigterm",
    "07-sidecar-pod-deleted",
    "08-job-pod-suspended-pod",
    "09-finalizer-held",
]


def _events(scenario: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads((FIXTURES / f"{scenario}.json").read_text())
    first = events[0]["object"]["metadata"]["name"]
    return [e for e in events if e["object"]["metadata"]["name"] == first]


def _placeholder(value: Any, token: str) -> Any:
    return token if value else value


def normalize(pod_status: dict[str, Any]) -> dict[str, Any]:
    """A status with what differs between any two runs (times, IDs, IPs) replaced by tokens."""
    out = copy.deepcopy(pod_status)
    out.pop("resources", None)
    for key in ("startTime", "hostIP", "podIP"):
        if key in out:
            out[key] = f"<{key}>"
    for key in ("hostIPs", "podIPs"):
        if key in out:
            out[key] = [{"ip": "<ip>"} for _ in out[key]]
    for condition in out.get("conditions") or []:
        condition.pop("lastTransitionTime", None)
        condition.pop("lastProbeTime", None)
    for cs in [*(out.get("initContainerStatuses") or []), *(out.get("containerStatuses") or [])]:
        cs["imageID"] = _placeholder(cs.get("imageID"), "<image>")
        if "containerID" in cs:
            cs["containerID"] = "<id>"
        current = cs["state"]
        if "running" in current:
            current["running"]["startedAt"] = "<t>"
        if "terminated" in current:
            terminated = current["terminated"]
            for key in ("startedAt", "finishedAt"):
                terminated[key] = _placeholder(terminated.get(key), "<t>")
            if "containerID" in terminated:
                terminated["containerID"] = "<id>"
    return out


def _dedupe(statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in statuses:
        if not out or out[-1] != item:
            out.append(item)
    return out


def recorded_kubelet_statuses(scenario: str) -> list[dict[str, Any]]:
    """Every distinct status from the kubelet's first write on (DELETED repeats the last one)."""
    events = _events(scenario)
    statuses = [e["object"]["status"] for e in events if e["type"] != "DELETED"]
    first = next(i for i, s in enumerate(statuses) if "observedGeneration" in s)
    return _dedupe([normalize(s) for s in statuses[first:]])


def _bound_pod(scenario: str) -> dict[str, Any]:
    for event in _events(scenario):
        if event["object"]["spec"].get("nodeName"):
            return copy.deepcopy(event["object"])
    raise AssertionError(f"{scenario}: never bound")


def _deletion(scenario: str) -> dict[str, Any]:
    for event in _events(scenario):
        if event["object"]["metadata"].get("deletionTimestamp"):
            return copy.deepcopy(event["object"])
    raise AssertionError(f"{scenario}: never deleted")


@pytest.fixture
async def rt() -> AsyncIterator[runtime.Runtime]:
    made = runtime.Runtime()
    yield made
    await made.close()


def _node(tmp_path: Path) -> launch.Node:
    return launch.Node(
        name="real-node-1", ip="192.0.2.2", root=tmp_path / "node", shared_root=tmp_path / "shared"
    )


async def _wait_for_log(container: runtime.Container, text: str) -> None:
    log = container.spec.log_path
    await eventually(
        lambda: log.exists() and text in log.read_text(), within=20, what=f"{text!r} in the log"
    )


async def replay(
    scenario: str, tmp_path: Path, rt: runtime.Runtime, *, grace: int | None = None
) -> tuple[worker.PodWorker, worker.Outcome]:
    pod = _bound_pod(scenario)
    pod_worker = worker.PodWorker(
        pod, runtime_=rt, node=_node(tmp_path), sink=_discard, timing=FAST
    )
    task = asyncio.create_task(pod_worker.run())
    if scenario in DELETED:
        await eventually(lambda: "main" in pod_worker.containers, within=20, what="main to start")
        await _wait_for_log(pod_worker.containers["main"], "START")
        deleted = _deletion(scenario)
        if grace is not None:
            deleted["metadata"]["deletionGracePeriodSeconds"] = grace
        pod_worker.update({**deleted, "status": pod_worker.pod["status"]})
    outcome = await asyncio.wait_for(task, timeout=60)
    return pod_worker, outcome


async def _discard(_status: dict[str, Any]) -> None:
    return None


def _worker(pod: dict[str, Any], rt: runtime.Runtime, tmp_path: Path) -> worker.PodWorker:
    return worker.PodWorker(pod, runtime_=rt, node=_node(tmp_path), sink=_discard, timing=FAST)


@pytest.mark.parametrize("scenario", NATURAL + DELETED)
async def test_status_sequence_matches_the_real_kubelet(
    scenario: str, tmp_path: Path, rt: runtime.Runtime
) -> None:
    # Scenario 04 ignores SIGTERM: its 5 s grace is shortened to 2 s to keep the suite fast.
    grace = 2 if scenario == "04-sigterm-ignored-killed" else None
    pod_worker, outcome = await replay(scenario, tmp_path, rt, grace=grace)
    ours = _dedupe([normalize(s) for s in pod_worker.written])
    expected = recorded_kubelet_statuses(scenario)
    assert len(ours) == len(expected), [s["phase"] for s in ours]
    for index, (mine, real) in enumerate(zip(ours, expected, strict=True)):
        assert mine == real, f"{scenario}: write {index} differs"
    assert outcome.final_delete is (scenario in DELETED)
    assert outcome.phase == expected[-1]["phase"]


async def test_preemption_condition_written_by_others_is_kept_first(
    tmp_path: Path, rt: runtime.Runtime
) -> None:
    """kube-scheduler preemption: DisruptionTarget, then DELETE; the kubelet keeps the condition."""
    pod = _bound_pod("03-sigterm-saved")
    pod_worker = _worker(pod, rt, tmp_path)
    task = asyncio.create_task(pod_worker.run())
    await eventually(lambda: "main" in pod_worker.containers, within=20, what="main to start")
    await _wait_for_log(pod_worker.containers["main"], "START")
    disruption = {
        "type": "DisruptionTarget",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": "2026-12-02T11:23:08Z",
        "reason": "PreemptionByScheduler",
        "message": "default-scheduler: preempting to accommodate a higher priority pod",
    }
    stale = copy.deepcopy(pod_worker.pod)
    stale["status"] = {**pod["status"], "conditions": [disruption]}  # an old watch event
    pod_worker.update(stale)
    deleted = _deletion("03-sigterm-saved")
    deleted["status"] = stale["status"]
    pod_worker.update(deleted)
    outcome = await asyncio.wait_for(task, timeout=60)
    assert outcome == worker.Outcome(phase="Failed", final_delete=True)
    final = pod_worker.written[-1]
    assert [c["type"] for c in final["conditions"]] == [
        "DisruptionTarget",
        *status.KUBELET_CONDITIONS,
    ]
    assert final["conditions"][0] == disruption
    assert final["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    # The stale event never rolled the kubelet's own view back to Pending.
    assert [s["phase"] for s in pod_worker.written[-3:]] == ["Running", "Running", "Failed"]


async def test_sigkill_at_grace_end_gives_137_without_message(
    tmp_path: Path, rt: runtime.Runtime
) -> None:
    pod_worker, _ = await replay("04-sigterm-ignored-killed", tmp_path, rt, grace=2)
    main = pod_worker.containers["main"]
    (kill,) = main.kills
    assert kill.grace_passed == 2
    assert kill.sigterm_at is not None
    assert kill.sigkill_at is not None
    assert 1.9 <= kill.sigkill_at - kill.sigterm_at <= 4.0
    final = main.record().state
    assert isinstance(final, state.Terminated)
    assert (final.exit_code, final.reason, final.message, final.signal) == (
        137,
        "Error",
        None,
        signal.SIGKILL,
    )
    assert "SIGTERM ignored" in main.spec.log_path.read_text()


async def test_prestop_runs_first_and_its_seconds_come_off_the_grace(
    tmp_path: Path, rt: runtime.Runtime
) -> None:
    pod_worker, _ = await replay("05-prestop-then-sigterm", tmp_path, rt)
    main = pod_worker.containers["main"]
    (kill,) = main.kills
    assert kill.pre_stop == "completed"
    assert kill.grace_requested == 30
    assert kill.grace_passed == 28  # 30 minus the hook's 2 whole seconds, as the kubelet logged
    log = main.spec.log_path.read_text()
    assert log.index("START") < log.index("SIGTERM") < log.index("EXIT 143")
    final = main.record().state
    assert isinstance(final, state.Terminated)
    assert final.message == '{"kontinue": "saved", "step": 42}'


async def test_sidecar_is_stopped_only_after_main_exits(
    tmp_path: Path, rt: runtime.Runtime
) -> None:
    pod_worker, _ = await replay("07-sidecar-pod-deleted", tmp_path, rt)
    main = pod_worker.containers["main"]
    sidecar = pod_worker.containers["sidecar"]
    assert main.ended_at is not None
    assert sidecar.kills[0].sigterm_at is not None
    assert sidecar.kills[0].sigterm_at >= main.ended_at
    assert sidecar.kills[0].grace_passed in (29, 30)  # what is left of the pod's 30 s
    assert "sidecar SIGTERM, EXIT 0" in sidecar.spec.log_path.read_text()


async def test_downward_env_expansion_and_subpath_expr_volume(
    tmp_path: Path, rt: runtime.Runtime
) -> None:
    pod_worker, _ = await replay("10-downward-env", tmp_path, rt)
    uid = pod_worker.pod["metadata"]["uid"]
    log = pod_worker.containers["main"].spec.log_path.read_text().splitlines()
    env = dict(line.split("=", 1) for line in log if "=" in line and not line.startswith("argv"))
    recorded = (FIXTURES / "10-downward-env.log").read_text().splitlines()
    real = dict(line.split("=", 1) for line in recorded if "=" in line and "argv" not in line)
    for name in ("POD_UID", "POD_NAME", "NODE_NAME", "CHECKPOINT_TAG", "KONTINUE_LINEAGE"):
        assert env[name] == real[name], name
    assert env["ESCAPED_REF"] == "literal $(POD_UID)"
    assert env["UNDEFINED_REF"] == "x-$(NOT_DEFINED)-y"
    assert "argv=['downward-env', '$(NOT_DEFINED)']" in log
    written = tmp_path / "shared" / "hostpath" / "work/rig/node/hostpath-test" / uid
    # The literal "/checkpoint" in the script is rewritten to the host directory behind it.
    assert f"{written} contents: ['written-by-pod.txt']" in log
    assert (written / "written-by-pod.txt").read_text() == uid + "\n"
    assert env["KONTINUE_CHECKPOINT_DIR"] == str(written)
    assert env[keys.ENV_TERMINATION_LOG].endswith("termination-log")


def _simple_pod(tmp_path: Path, container: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u-1", "generation": 1},
        "spec": {"nodeName": "real-node-1", "restartPolicy": "Never", "containers": [container]},
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


async def test_unknown_command_fails_with_start_error(tmp_path: Path, rt: runtime.Runtime) -> None:
    pod = _simple_pod(tmp_path, {"name": "main", "image": "x", "command": ["nvidia-smi"]})
    pod_worker = worker.PodWorker(
        pod, runtime_=rt, node=_node(tmp_path), sink=_discard, timing=FAST
    )
    outcome = await asyncio.wait_for(pod_worker.run(), timeout=20)
    assert outcome == worker.Outcome(phase="Failed", final_delete=False)
    terminated = pod_worker.written[-1]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 128
    assert terminated["reason"] == "StartError"
    assert '"nvidia-smi": executable file not found' in terminated["message"]


async def test_fallback_to_logs_on_error_uses_the_log_tail(
    tmp_path: Path, rt: runtime.Runtime
) -> None:
    script = "import sys\nfor i in range(100): print('line', i)\nsys.exit(2)"
    pod = _simple_pod(
        tmp_path,
        {
            "name": "main",
            "image": "x",
            "command": ["python3", "-c", script],
            "terminationMessagePolicy": "FallbackToLogsOnError",
        },
    )
    pod_worker = worker.PodWorker(
        pod, runtime_=rt, node=_node(tmp_path), sink=_discard, timing=FAST
    )
    await asyncio.wait_for(pod_worker.run(), timeout=20)
    terminated = pod_worker.written[-1]["containerStatuses"][0]["state"]["terminated"]
    lines = terminated["message"].splitlines()
    assert len(lines) == 80
    assert (lines[0], lines[-1]) == ("line 20", "line 99")


async def test_termination_message_is_capped_to_its_last_4096_bytes(
    tmp_path: Path, rt: runtime.Runtime
) -> None:
    script = (
        "import os\n"
        "open(os.environ['KONTINUE_TERMINATION_LOG'], 'w').write('a' * 5000 + 'END')\n"
        "raise SystemExit(1)"
    )
    pod = _simple_pod(tmp_path, {"name": "main", "image": "x", "command": ["python", "-c", script]})
    pod_worker = worker.PodWorker(
        pod, runtime_=rt, node=_node(tmp_path), sink=_discard, timing=FAST
    )
    await asyncio.wait_for(pod_worker.run(), timeout=20)
    message = pod_worker.written[-1]["containerStatuses"][0]["state"]["terminated"]["message"]
    assert len(message) == runtime.MAX_MESSAGE_BYTES
    assert message.endswith("aEND")


async def test_children_of_a_container_get_the_signal_too(
    tmp_path: Path, rt: runtime.Runtime
) -> None:
    """A shell that started a child: SIGTERM to the group ends both; nothing is left behind."""
    spec = launch.plan(
        _simple_pod(tmp_path, {}),
        {"name": "main", "image": "x", "command": ["sh", "-c", "sleep 60 & echo started; wait"]},
        where="spec.containers[0]",
        node=_node(tmp_path),
    )
    container = await rt.start(spec)
    await _wait_for_log(container, "started")
    final = await container.stop(grace_seconds=2, commands=rt.commands)
    assert final.exit_code in (143, 128 + signal.SIGTERM)
    assert container.kills[0].sigkill_at is None
    pgid = container.pid
    assert pgid is not None
    # The orphaned child was SIGKILLed with the group; init reaps it shortly after.
    await eventually(lambda: not _group_alive(pgid), within=20, what="the process group to be gone")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_status_functions_are_pure_and_match_a_recorded_write() -> None:
    """Recorded write 5 of 06 (init done, sidecar pending) recomputed from records alone."""
    events = _events("06-init-and-native-sidecar")
    recorded = events[5]["object"]
    t = state.now()
    view = status.PodView(
        records={
            "init": state.ContainerRecord(
                name="init",
                state=state.Terminated(0, "Completed", finished_at=t, started_at=t),
                container_id="c1",
                image="localhost/kontinue-base:dev",
                image_id="sha256:x",
            )
        },
        sandbox_ready=True,
        start_time=t,
        host_ip="192.0.2.2",
        pod_ip="192.0.2.2",
    )
    previous = {**recorded, "status": events[4]["object"]["status"]}
    assert normalize(status.pod_status(previous, view, now=t)) == normalize(recorded["status"])


async def test_failed_init_container_fails_the_pod_and_main_never_starts(
    tmp_path: Path, rt: runtime.Runtime
) -> None:
    pod = _simple_pod(tmp_path, {"name": "main", "image": "x", "command": ["sleep", "60"]})
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "x", "command": ["python3", "-c", "raise SystemExit(4)"]}
    ]
    pod_worker = _worker(pod, rt, tmp_path)
    outcome = await asyncio.wait_for(pod_worker.run(), timeout=20)
    assert outcome == worker.Outcome(phase="Failed", final_delete=False)
    assert "main" not in pod_worker.containers
    final = pod_worker.written[-1]
    init_state = final["initContainerStatuses"][0]["state"]["terminated"]
    assert (init_state["exitCode"], init_state["reason"]) == (4, "Error")
    assert final["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    initialized = next(c for c in final["conditions"] if c["type"] == "Initialized")
    assert initialized["status"] == "False"
    assert initialized["message"] == "containers with incomplete status: [init]"


async def test_config_error_waits_and_a_deleted_pending_pod_ends_failed(
    tmp_path: Path, rt: runtime.Runtime
) -> None:
    container = {
        "name": "main",
        "image": "x",
        "command": ["sleep", "60"],
        "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    }
    pod = _simple_pod(tmp_path, container)
    pod_worker = _worker(pod, rt, tmp_path)
    task = asyncio.create_task(pod_worker.run())
    await eventually(
        lambda: len(pod_worker.written) >= 3, within=20, what="the config error to be written"
    )
    waiting = pod_worker.written[-1]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerConfigError"
    assert "spec.containers[0].env[0].valueFrom" in waiting["message"]
    assert pod_worker.written[-1]["phase"] == "Pending"
    deleted = copy.deepcopy(pod_worker.pod)
    deleted["metadata"].update(generation=2, deletionTimestamp="2026-12-02T12:00:00Z")
    pod_worker.update(deleted)
    outcome = await asyncio.wait_for(task, timeout=20)
    assert outcome == worker.Outcome(phase="Failed", final_delete=True)
    final = pod_worker.written[-1]["containerStatuses"][0]["state"]
    assert final["waiting"]["reason"] == "CreateContainerConfigError"  # it never ran
