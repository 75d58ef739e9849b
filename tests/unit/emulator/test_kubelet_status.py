"""Pure kubelet status decisions: ``getPhase`` and the terminal-phase hold of ``mergePodStatus``."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from emulator.kubelet import state, status

T = datetime.datetime(2026, 12, 2, 11, 23, 6, tzinfo=datetime.UTC)


def _st(kind: str, code: int = 0, *, started: bool = True) -> dict[str, Any]:
    if kind == "running":
        return {"state": {"running": {}}, "started": started}
    if kind == "terminated":
        return {"state": {"terminated": {"exitCode": code}}}
    return {"state": {"waiting": {"reason": "ContainerCreating"}}}


SIDECAR_SPEC = {
    "restartPolicy": "Never",
    "initContainers": [{"name": "init"}, {"name": "sidecar", "restartPolicy": "Always"}],
    "containers": [{"name": "main"}],
}


@pytest.mark.parametrize(
    ("statuses", "terminal", "expected"),
    [
        ({}, False, "Pending"),
        ({"init": _st("running")}, False, "Pending"),
        ({"init": _st("terminated", 1)}, False, "Failed"),  # failed init, restartPolicy Never
        ({"init": _st("terminated"), "sidecar": _st("running", started=False)}, False, "Pending"),
        (
            {"init": _st("terminated"), "sidecar": _st("running"), "main": _st("waiting")},
            False,
            "Pending",
        ),
        (
            {"init": _st("terminated"), "sidecar": _st("running"), "main": _st("running")},
            False,
            "Running",
        ),
        # main done, sidecar still up: Running (06, write 8)
        (
            {"init": _st("terminated"), "sidecar": _st("running"), "main": _st("terminated")},
            False,
            "Running",
        ),
        # sidecar stopped too: a terminated sidecar counts for nothing (06, write 9)
        (
            {"init": _st("terminated"), "sidecar": _st("terminated"), "main": _st("terminated")},
            False,
            "Succeeded",
        ),
        (
            {
                "init": _st("terminated"),
                "sidecar": _st("terminated", 0),
                "main": _st("terminated", 143),
            },
            True,
            "Failed",  # 07: one failure is enough
        ),
    ],
)
def test_get_phase_with_init_and_native_sidecar(
    statuses: dict[str, dict[str, Any]], terminal: bool, expected: str
) -> None:
    has_initialized = "main" in statuses and "running" in statuses["main"]["state"]
    got = status.get_phase(
        SIDECAR_SPEC, statuses, pod_is_terminal=terminal, pod_has_initialized=has_initialized
    )
    assert got == expected


def _pod(phase: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "u", "generation": 1},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "i"}]},
        "status": {"phase": phase, "qosClass": "BestEffort"},
    }


def _view(exit_code: int, *, could_run: bool, sandbox: bool) -> status.PodView:
    record = state.ContainerRecord(
        name="main",
        state=state.Terminated(exit_code, "Completed" if exit_code == 0 else "Error", T, T),
        container_id="emulator://c",
        image="i",
        image_id="emulator://image/i",
    )
    return status.PodView(
        records={"main": record},
        sandbox_ready=sandbox,
        start_time=T,
        host_ip="10.0.0.1",
        pod_ip="10.0.0.1",
        pod_is_terminal=not could_run,
        could_have_running_containers=could_run,
    )


@pytest.mark.parametrize(
    ("code", "phase", "reason"), [(0, "Succeeded", "PodCompleted"), (3, "Failed", "PodFailed")]
)
def test_terminal_phase_is_held_back_until_the_worker_is_done(
    code: int, phase: str, reason: str
) -> None:
    first = status.pod_status(_pod("Running"), _view(code, could_run=True, sandbox=True), now=T)
    assert first["phase"] == "Running"
    ready = {c["type"]: c for c in first["conditions"]}
    assert (ready["Ready"]["status"], ready["Ready"]["reason"]) == ("False", reason)
    assert ready["PodReadyToStartContainers"]["status"] == "True"
    second = status.pod_status(
        {**_pod("Running"), "status": first}, _view(code, could_run=False, sandbox=False), now=T
    )
    assert second["phase"] == phase
    by_type = {c["type"]: c for c in second["conditions"]}
    assert by_type["PodReadyToStartContainers"]["status"] == "False"
    # Unchanged conditions keep their transition time; changed ones get "now".
    assert by_type["Ready"]["lastTransitionTime"] == ready["Ready"]["lastTransitionTime"]


def test_a_terminal_phase_never_goes_back() -> None:
    view = status.PodView(
        records={},
        sandbox_ready=False,
        start_time=T,
        host_ip="10.0.0.1",
        pod_ip=None,
    )
    assert status.pod_status(_pod("Failed"), view, now=T)["phase"] == "Failed"
