"""The emulated vc-controller's pods match the recorded Volcano victim pod (metadata), and
its policy lookup follows applyPolicies (pkg/controllers/job/job_controller_util.go)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from emulator.volcano import jobs
from tests import fixtures

Obj = dict[str, Any]
EXAMPLES = fixtures.UPSTREAM / "volcano" / "examples"


def recorded_victim() -> Obj:
    review = json.loads(
        (EXAMPLES / "admissionreview-delete-victim-pod-by-vc-scheduler.json").read_text()
    )
    old: Obj = review["request"]["oldObject"]
    return old


def test_pod_metadata_is_the_recorded_one() -> None:
    victim = recorded_victim()
    owner = victim["metadata"]["ownerReferences"][0]
    job = fixtures.load_one(EXAMPLES / "vcjob-gpu-ckpt-train.yaml")
    job["metadata"]["uid"] = owner["uid"]
    job["status"] = {"version": 0, "retryCount": 0}
    task = next(t for t in job["spec"]["tasks"] if t["name"] == "worker")
    pod = jobs.pod_for(job, task, 1)
    assert pod["metadata"]["name"] == victim["metadata"]["name"]
    assert pod["metadata"]["labels"] == victim["metadata"]["labels"]
    assert pod["metadata"]["annotations"] == victim["metadata"]["annotations"]
    assert pod["metadata"]["ownerReferences"] == victim["metadata"]["ownerReferences"]
    assert pod["spec"]["schedulerName"] == victim["spec"]["schedulerName"] == "volcano"
    group = jobs.podgroup_for(job)
    assert (
        group["metadata"]["name"]
        == victim["metadata"]["annotations"]["scheduling.k8s.io/group-name"]
    )
    assert group["spec"]["minMember"] == job["spec"]["minAvailable"]
    assert group["spec"]["queue"] == "research-ckpt"


@pytest.mark.parametrize(
    ("job_policies", "task_policies", "expected"),
    [
        ([], [], jobs.SYNC_JOB),
        ([{"event": "PodEvicted", "action": "RestartJob"}], [], jobs.RESTART_JOB),
        ([{"events": ["PodFailed", "PodEvicted"], "action": "RestartJob"}], [], jobs.RESTART_JOB),
        ([{"event": "PodFailed", "action": "TerminateJob"}], [], jobs.SYNC_JOB),
        ([{"event": "*", "action": "AbortJob"}], [], "AbortJob"),
        (
            [{"event": "PodEvicted", "action": "RestartJob"}],
            [{"event": "PodEvicted", "action": "RestartTask"}],
            "RestartTask",
        ),
    ],
)
def test_task_policies_win_over_job_policies(
    job_policies: list[Obj], task_policies: list[Obj], expected: str
) -> None:
    job = {"spec": {"policies": job_policies, "tasks": [{"name": "w", "policies": task_policies}]}}
    assert jobs.action_for(job, "w", "PodEvicted") == expected


def test_an_exit_code_policy_matches_podfailed_by_the_pods_exit_code() -> None:
    """``applyPolicies``: per policy, an event match or an ``exitCode`` match (never 0), first
    policy wins; ``PodEvicted`` carries no exit code."""
    job = {
        "spec": {
            "policies": [
                {"exitCode": 143, "action": "SyncJob"},
                {"event": "PodFailed", "action": "TerminateJob"},
                {"exitCode": 2, "action": "RestartJob"},
            ],
            "tasks": [{"name": "w"}],
        }
    }
    assert jobs.action_for(job, "w", "PodFailed", 143) == jobs.SYNC_JOB
    assert jobs.action_for(job, "w", "PodFailed", 1) == "TerminateJob"
    assert jobs.action_for(job, "w", "PodFailed", 2) == "TerminateJob"  # the event policy first
    assert jobs.action_for(job, "w", "PodEvicted") == jobs.SYNC_JOB


def test_preemptable_reads_the_annotation_then_the_label_like_getpodpreemptable() -> None:
    from emulator.volcano import victims

    def pod(annotations: dict[str, str], labels: dict[str, str]) -> Obj:
        return {"metadata": {"annotations": annotations, "labels": labels}}

    key = victims.PREEMPTABLE
    assert victims.preemptable(pod({}, {}))
    assert not victims.preemptable(pod({key: "false"}, {key: "true"}))
    assert victims.preemptable(pod({key: "T"}, {key: "false"}))
    assert not victims.preemptable(pod({}, {key: "0"}))
    assert not victims.preemptable(pod({key: "yes"}, {}))  # not a Go bool: not preemptable
