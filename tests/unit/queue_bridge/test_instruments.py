"""queue_bridge/instruments.py: the bounded reason a cold start is counted under, and a pod's
restore outcome read from its status as the kubelet writes it."""

from __future__ import annotations

from typing import Any

import pytest

from kontinue import keys, restore_plan
from kontinue.models import checkpoint, core
from queue_bridge import instruments
from tests.unit.webhook import support

OWNER = checkpoint.Lineage(namespace="ns", owner_kind="Job", owner_name="j", owner_uid="u-1")


def test_the_restore_plans_own_cold_start_reason_is_counted_as_no_checkpoint() -> None:
    plan = restore_plan.plan(
        [],
        owner=OWNER,
        identity=None,
        policy=support.checkpoint_policy("gpu"),
        pod_fingerprint=checkpoint.Fingerprint(),
        nodes=None,
    )
    assert plan.cold_start
    assert instruments.cold_start_code(plan.reason) == "NoCheckpoint"


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("no checkpoint of ns/Job/j holds member index=1", "NoMemberCheckpoint"),
        ("no Succeeded checkpoint of ns/Job/j for member index=0", "NoSucceededCheckpoint"),
        ("no usable checkpoint: cp-1: 3 failed restores", "NoUsableCheckpoint"),
        ("checkpoint cp-1 records a directory outside lineage ns/Job/j: /x", "OutsideLineage"),
        ("checkpoint cp-1 not usable: nodeAffinity conflict", "NotUsable"),
        ("something new", "Other"),
    ],
)
def test_cold_start_reasons_map_to_a_bounded_code(reason: str, code: str) -> None:
    assert instruments.cold_start_code(reason) == code


def _pod(annotations: dict[str, str], init: dict[str, Any] | None = None) -> core.Pod:
    status: dict[str, Any] = {}
    if init is not None:
        status["initContainerStatuses"] = [
            {"name": keys.RESTORE_INIT_CONTAINER, "ready": False, "restartCount": 0, **init}
        ]
    return core.Pod.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": annotations},
            "spec": {"containers": [{"name": "main", "image": "x"}]},
            "status": status,
        }
    )


def _terminated(code: int) -> dict[str, Any]:
    return {
        "state": {
            "terminated": {
                "exitCode": code,
                "startedAt": "2026-01-01T00:00:01Z",
                "finishedAt": "2026-01-01T00:00:03Z",
            }
        }
    }


def test_restore_outcomes_from_the_pod() -> None:
    restoring = {keys.RESTORE_FROM_ANNOTATION: "cp-1"}
    assert instruments.restore_outcome(_pod({})) is None
    assert instruments.restore_outcome(_pod(restoring)) is None  # init not finished
    assert instruments.restore_outcome(_pod(restoring, {"state": {"running": {}}})) is None
    done = instruments.restore_outcome(_pod(restoring, _terminated(0)))
    assert done is not None
    assert (done.result, done.reason) == ("restored", "Restored")
    assert done.started is not None
    assert done.when is not None
    assert (done.when - done.started).total_seconds() == 2
    failing = 3  # any non-zero end of a pod not being deleted (kontinue/restore failed())
    failed = instruments.restore_outcome(_pod(restoring, _terminated(failing)))
    assert failed is not None
    assert (failed.result, failed.reason) == ("failed", f"Exit{failing}")
    cold = instruments.restore_outcome(
        _pod({keys.COLD_START_REASON_ANNOTATION: "no checkpoint of ns/Job/j yet"})
    )
    assert cold is not None
    assert (cold.result, cold.reason) == ("cold_start", "NoCheckpoint")
