"""queue_bridge/instruments.py: the bounded reason a cold start is counted under, a pod's
restore outcome read from its status as the kubelet writes it, and the gauges and counters read
at scrape time."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from kontinue import keys, restore_plan, telemetry
from kontinue.models import checkpoint, core
from queue_bridge import instruments, queueing
from tests import promlint
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


class _Listed:
    def __init__(self, items: list[checkpoint.Checkpoint]) -> None:
        self._items = items

    def items(self) -> list[checkpoint.Checkpoint]:
        return self._items


async def test_the_work_queue_leader_and_phases_read_at_scrape() -> None:
    """Issue 12, bridge metrics: work-queue depth, adds, drops and retries, leader status and
    Checkpoints by phase, as the bridge's ``/metrics`` exposition shows them (a real queue and
    the real Prometheus exporter; the counters are read from the queue when scraped)."""
    tel = telemetry.setup("kontinue-bridge", environ={})
    queue: queueing.WorkQueue[tuple[str, str, str]] = queueing.WorkQueue(
        max_keys=3, base_delay=0.01
    )
    leading = [False]
    caches: Any = type(
        "Caches",
        (),
        {
            "checkpoints": _Listed(
                [
                    support.make_checkpoint("a", lineage=OWNER, phase="Succeeded"),
                    support.make_checkpoint("b", lineage=OWNER, phase="Succeeded"),
                    support.make_checkpoint("c", lineage=OWNER, phase="Failed"),
                ]
            )
        },
    )()
    instruments.Metrics(tel.meter, caches, queue, lambda: leading[0])

    def scraped(sample: str, **labels: str) -> float:
        text = telemetry.exposition(tel.registry).decode()
        assert promlint.problems(text) == []
        return promlint.value(text, sample, **labels)

    for index in range(5):
        queue.add(("Pod", "ns", f"p-{index}"))
    assert scraped("kontinue_bridge_queue_depth") == 3
    assert scraped("kontinue_bridge_queue_adds_total") == 3
    assert scraped("kontinue_bridge_queue_drops_total") == 2
    assert scraped("kontinue_bridge_leader") == 0
    leading[0] = True
    assert scraped("kontinue_bridge_leader") == 1
    assert scraped("kontinue_bridge_checkpoints", phase="Succeeded") == 2
    assert scraped("kontinue_bridge_checkpoints", phase="Failed") == 1
    assert scraped("kontinue_bridge_checkpoints", phase="InProgress") == 0

    failed: set[tuple[str, str, str]] = set()

    async def handle(key: tuple[str, str, str]) -> None:
        if key == ("Pod", "ns", "p-0") and key not in failed:
            failed.add(key)
            raise RuntimeError("the first try of p-0 fails")

    task = asyncio.create_task(queue.run(handle, workers=2))
    try:
        await asyncio.wait_for(queue.join(), 30)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert scraped("kontinue_bridge_queue_retries_total") == 1
    assert scraped("kontinue_bridge_queue_depth") == 0
