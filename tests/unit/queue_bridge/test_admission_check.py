"""Table tests of the AdmissionCheck decisions (queue_bridge.admission_check)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from kontinue import keys
from kontinue.models import base, checkpoint, core, kueue
from kontinue.models import policy as policy_model
from queue_bridge import admission_check
from tests import fixtures

A100 = "NVIDIA-A100-SXM4-80GB"
NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)
OWNER = checkpoint.Lineage(
    namespace="research",
    owner_kind="Job",
    owner_name="scavenger-0",
    owner_uid="0c8b2d5e-1111-4a4a-8e8e-222233334444",
)
STEER = policy_model.CheckpointPolicy.model_validate(
    {"metadata": {"name": "steer"}, "spec": {"admissionCheck": {"enabled": True}}}
)


def _workload(*, evicted: bool = False) -> kueue.Workload:
    raw = fixtures.load_one(fixtures.FIXTURES / "objects/workload-evicted.yaml")
    if not evicted:
        for condition in raw["status"]["conditions"]:
            if condition["type"] in ("Evicted", "Preempted"):
                condition["status"] = "False"
    return kueue.Workload.model_validate(raw)


def _cp(name: str, minute: int, phase: str, **fingerprint: Any) -> checkpoint.Checkpoint:
    return checkpoint.Checkpoint(
        metadata=base.ObjectMeta(name=name, namespace="research"),
        spec=checkpoint.CheckpointSpec(
            lineage=OWNER,
            trigger=checkpoint.Trigger(
                source=checkpoint.TriggerSource.KUEUE,
                reason="Preempted",
                time=datetime.datetime(2026, 12, 1, 10, minute, tzinfo=datetime.UTC),
            ),
            members=[checkpoint.Member(pod_name=f"{name}-0", pod_uid=f"u-{name}")],
            fingerprint=checkpoint.Fingerprint(**fingerprint),
        ),
        status=checkpoint.CheckpointStatus(phase=checkpoint.Phase(phase)),
    )


NODE = core.Node.model_validate(
    {
        "metadata": {"name": "n", "labels": {keys.GPU_PRODUCT_LABEL: A100}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
)


def _flavors(labels: dict[str, str]) -> Any:
    flavor = kueue.ResourceFlavor.model_validate(
        {"metadata": {"name": "gpu-a100"}, "spec": {"nodeLabels": labels}}
    )
    return lambda name: flavor if name == "gpu-a100" else None


@pytest.mark.parametrize(
    ("cps", "flavor_labels", "policy", "state", "updates", "message"),
    [
        ([], {}, STEER, "Ready", [], "cold start"),
        (
            [_cp("good", 1, "Succeeded", gpu_product=A100)],
            {},
            STEER,
            "Ready",
            [
                {
                    "name": "main",
                    "annotations": {keys.RESTORE_FROM_ANNOTATION: "good"},
                    "nodeSelector": {keys.GPU_PRODUCT_LABEL: A100},
                }
            ],
            "restore from good",
        ),
        (
            [_cp("good", 1, "Succeeded", gpu_product=A100)],
            {keys.GPU_PRODUCT_LABEL: A100},
            STEER,
            "Ready",
            [{"name": "main", "annotations": {keys.RESTORE_FROM_ANNOTATION: "good"}}],
            "restore from good",
        ),
        (
            [_cp("good", 1, "Succeeded", gpu_product=A100)],
            {keys.GPU_PRODUCT_LABEL: "Tesla-T4"},
            STEER,
            "Ready",
            [],
            "cold start; main: no steering to good",
        ),
        (
            [_cp("good", 1, "Succeeded"), _cp("saving", 2, "InProgress")],
            {},
            STEER,
            "Pending",
            [],
            "waiting for Checkpoint saving (InProgress) to finish saving",
        ),
        (
            [_cp("good", 1, "Succeeded")],
            {},
            policy_model.DEFAULT,
            "Ready",
            [],
            "policy default does not steer",
        ),
        ([_cp("good", 1, "Succeeded")], {}, None, "Ready", [], "not opted in"),
    ],
    ids=[
        "cold",
        "restore-steered",
        "flavor-sets-key",
        "flavor-conflicts",
        "newest-saving",
        "steering-off",
        "not-opted-in",
    ],
)
def test_answers(
    cps: list[checkpoint.Checkpoint],
    flavor_labels: dict[str, str],
    policy: policy_model.CheckpointPolicy | None,
    state: str,
    updates: list[dict[str, Any]],
    message: str,
) -> None:
    result = admission_check.answer(
        _workload(),
        owner=OWNER,
        policy=policy,
        checkpoints=cps,
        nodes=[NODE],
        flavor=_flavors(flavor_labels),
    )
    assert result.state == state
    assert result.pod_set_updates == updates
    assert result.message.startswith(message), result.message


def test_no_answer_while_evicted_or_without_quota() -> None:
    assert admission_check.ready_to_answer(_workload(evicted=True)) == (
        "the Workload is being evicted"
    )
    assert admission_check.ready_to_answer(_workload()) is None
    released = _workload()
    assert released.status is not None
    released.status.admission = None
    assert admission_check.ready_to_answer(released) == "no admission recorded yet"


def _state(state: str, message: str = "", **extra: Any) -> kueue.AdmissionCheckState:
    return kueue.AdmissionCheckState.model_validate(
        {"name": "kontinue-restore", "state": state, "message": message, **extra}
    )


def test_the_apply_body_always_carries_pod_set_updates_and_never_rewrites_ready() -> None:
    ready = admission_check.Answer("Ready", "cold start")
    body = admission_check.apply_body(
        _workload(), check_name="kontinue-restore", result=ready, current=_state("Pending"), now=NOW
    )
    assert body == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-scavenger-0-3f1a2", "namespace": "research"},
        "status": {
            "admissionChecks": [
                {
                    "name": "kontinue-restore",
                    "state": "Ready",
                    "message": "cold start",
                    "lastTransitionTime": "2026-12-02T12:00:00Z",
                    "podSetUpdates": [],
                }
            ]
        },
    }
    assert (
        admission_check.apply_body(
            _workload(),
            check_name="kontinue-restore",
            result=ready,
            current=_state("Ready"),
            now=NOW,
        )
        is None
    )
    waiting = admission_check.Answer("Pending", "waiting for Checkpoint x")
    same = _state("Pending", "waiting for Checkpoint x")
    assert (
        admission_check.apply_body(
            _workload(), check_name="kontinue-restore", result=waiting, current=same, now=NOW
        )
        is None
    )


def test_active_condition() -> None:
    check = kueue.AdmissionCheck.model_validate(
        {
            "metadata": {"name": "kontinue-restore", "generation": 2},
            "spec": {"controllerName": keys.KUEUE_ADMISSION_CHECK_CONTROLLER},
        }
    )
    assert admission_check.ours(check)
    body = admission_check.active_body(check, now=NOW)
    assert body is not None
    (condition,) = body["status"]["conditions"]
    assert condition == {
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": "the kontinue bridge serves this check",
        "lastTransitionTime": "2026-12-02T12:00:00Z",
        "observedGeneration": 2,
    }
    check.status = kueue.AdmissionCheckStatus.model_validate({"conditions": [condition]})
    assert admission_check.active_body(check, now=NOW) is None
