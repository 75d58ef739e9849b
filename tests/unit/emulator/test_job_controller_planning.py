"""The emulated Job controller's pure decisions (emulator.jobs.planning), table-driven.

The pod the controller creates is compared with the one a real v1.36.2 job controller created
(tests/fixtures/cluster/03-job-unsuspend-create-pod-by-job-controller.json).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from emulator.jobs import accounting, planning
from kontinue import keys

Object = dict[str, Any]
RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "cluster"
NOW = "2026-12-02T12:00:00Z"


def recorded_pod() -> Object:
    review = json.loads(
        (RECORDED / "03-job-unsuspend-create-pod-by-job-controller.json").read_text()
    )
    pod: Object = review["request"]["object"]
    return pod


def job(*, suspend: bool = False, status: Object | None = None, **spec: Any) -> Object:
    return {
        "metadata": {"name": "train", "namespace": "default", "uid": "job-uid"},
        "spec": {
            "suspend": suspend,
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 6,
            "template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
            **spec,
        },
        "status": status or {},
    }


def pod(
    name: str,
    *,
    phase: str = "Running",
    deleting: bool = False,
    tracked: bool = True,
    index: int | None = None,
    ready: bool = False,
) -> Object:
    meta: Object = {
        "name": name,
        "uid": f"uid-{name}",
        "namespace": "default",
        "finalizers": [keys.JOB_TRACKING_FINALIZER] if tracked else [],
    }
    if deleting:
        meta["deletionTimestamp"] = NOW
    if index is not None:
        meta["annotations"] = {keys.JOB_COMPLETION_INDEX_ANNOTATION: str(index)}
    conditions = [{"type": "Ready", "status": "True"}] if ready else []
    return {"metadata": meta, "status": {"phase": phase, "conditions": conditions}}


def test_pod_from_template_matches_the_recorded_job_controller_pod() -> None:
    want = recorded_pod()
    want_meta = {k: v for k, v in want["metadata"].items() if k != "managedFields"}
    (owner,) = want_meta["ownerReferences"]
    source = {
        "metadata": {"name": owner["name"], "namespace": "default", "uid": owner["uid"]},
        "spec": {
            "template": {
                "metadata": {"labels": copy.deepcopy(want_meta["labels"])},
                "spec": {"containers": want["spec"]["containers"]},
            }
        },
    }
    made = planning.pod_from_template(source)
    assert made["metadata"] == want_meta
    assert list(made["metadata"]) == list(want_meta)
    assert made["spec"]["containers"] == want["spec"]["containers"]


def test_indexed_pods_carry_index_hostname_and_env() -> None:
    made = planning.pod_from_template(job(completionMode="Indexed", completions=3), index=2)
    meta = made["metadata"]
    assert meta["generateName"] == "train-2-"
    assert meta["annotations"] == {keys.JOB_COMPLETION_INDEX_ANNOTATION: "2"}
    assert meta["labels"][keys.JOB_COMPLETION_INDEX_ANNOTATION] == "2"
    assert made["spec"]["hostname"] == "train-2"
    (env,) = made["spec"]["containers"][0]["env"]
    assert env["name"] == "JOB_COMPLETION_INDEX"
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )


@pytest.mark.parametrize(
    ("spec", "pods", "create"),
    [
        ({}, [], 1),
        ({}, [pod("a")], 0),
        ({"parallelism": 3, "completions": 5}, [pod("a")], 2),
        # default replacement: a terminating pod is replaced at once
        ({}, [pod("a", deleting=True)], 1),
        # podReplacementPolicy Failed: the replacement waits for the old pod to finish
        ({"podReplacementPolicy": "Failed"}, [pod("a", deleting=True)], 0),
        ({"podReplacementPolicy": "Failed"}, [pod("a", deleting=True, phase="Failed")], 1),
    ],
)
def test_pods_to_create(spec: Object, pods: list[Object], create: int) -> None:
    decision = planning.decide(job(**spec), pods)
    assert len(decision.create) == create
    assert decision.suspend == ()


def test_suspend_removes_finalizers_then_deletes_every_active_pod() -> None:
    pods = [pod("a"), pod("b", phase="Succeeded"), pod("c", deleting=True)]
    decision = planning.decide(job(suspend=True, parallelism=3, completions=3), pods)
    assert decision.suspend == ("a",)
    assert decision.create == ()
    # b succeeded; c was deleted by someone else before the suspend: default policy counts it
    assert decision.remove_finalizers == ("b", "c")
    assert (decision.ledger.succeeded, decision.ledger.failed) == (1, 1)


def test_counting_and_finish_interim_then_terminal() -> None:
    failing = job(backoffLimit=0)
    decision = planning.decide(failing, [pod("a", phase="Failed")])
    assert decision.remove_finalizers == ("a",)
    assert decision.ledger.failed == 1
    assert decision.ledger.condition == accounting.Finished(
        "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    )
    gone = pod("a", phase="Failed", tracked=False)
    status = planning.next_status(failing, [gone], decision, now=NOW)
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [
        ("FailureTarget", "BackoffLimitExceeded"),
        ("Failed", "BackoffLimitExceeded"),
    ]
    assert status["failed"] == 1
    assert "succeeded" not in status
    # a pod still terminating holds back the terminal condition (v1.36 delays it)
    still = [gone, pod("b", deleting=True)]
    status = planning.next_status(failing, still, decision, now=NOW)
    assert [c["type"] for c in status["conditions"]] == ["FailureTarget"]
    assert status["terminating"] == 1


def test_success_sets_success_criteria_then_complete_with_completion_time() -> None:
    decision = planning.decide(job(), [pod("a", phase="Succeeded")])
    assert decision.ledger.succeeded == 1
    status = planning.next_status(
        job(), [pod("a", phase="Succeeded", tracked=False)], decision, now=NOW
    )
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [
        ("SuccessCriteriaMet", "CompletionsReached"),
        ("Complete", "CompletionsReached"),
    ]
    assert status["completionTime"] == NOW
    assert status["succeeded"] == 1


def test_suspended_condition_then_resumed_resets_start_time() -> None:
    suspended = job(suspend=True, status={"startTime": "2026-12-02T10:00:00Z"})
    decision = planning.decide(suspended, [])
    status = planning.next_status(suspended, [], decision, now=NOW)
    (condition,) = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Suspended",
        "True",
        "JobSuspended",
    )
    assert "active" not in status
    assert "startTime" not in status  # cleared in the write that suspends (v1.36)
    again = job(suspend=True, status={**status, "startTime": "2026-12-02T11:00:00Z"})
    status_again = planning.next_status(again, [], planning.decide(again, []), now=NOW)
    assert status_again["startTime"] == "2026-12-02T11:00:00Z"  # only on the flip, as upstream
    resumed = job(suspend=False, status=status)
    later = "2026-12-02T12:05:00Z"
    status = planning.next_status(
        resumed, [pod("a", ready=True)], planning.decide(resumed, []), now=later
    )
    (condition,) = status["conditions"]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "JobResumed",
        "Job resumed",
    )
    assert status["startTime"] == later
    assert (status["active"], status["ready"]) == (1, 1)


def test_indexed_creates_the_lowest_missing_indexes_and_counts_each_index_once() -> None:
    indexed = job(completionMode="Indexed", completions=4, parallelism=2)
    pods = [pod("i0", phase="Succeeded", index=0), pod("i0-again", phase="Succeeded", index=0)]
    decision = planning.decide(indexed, pods)
    assert decision.ledger.succeeded == 1
    assert decision.completed_indexes == frozenset({0})
    assert decision.create == (1, 2)


@pytest.mark.parametrize(
    ("indexes", "text"),
    [
        (set(), ""),
        ({0}, "0"),
        ({0, 1}, "0,1"),
        ({0, 1, 2, 5}, "0-2,5"),
        ({3, 4, 5, 7, 8}, "3-5,7,8"),
    ],
)
def test_completed_indexes_round_trip(indexes: set[int], text: str) -> None:
    assert planning.format_indexes(indexes) == text
    assert planning.parse_indexes(text) == indexes
