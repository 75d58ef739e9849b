"""Table tests of the bridge's pure decisions (queue_bridge.reconciling), on recorded shapes.

Pods come from the real kubelet recordings (tests/fixtures/bridge/kubelet-*.json) with the
metadata the webhook and the job controller add; the Workload is tests/fixtures/objects/
workload-evicted.yaml (Kueue's preemption patch, kueue.md §1.1 step A).
"""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any

import pytest

from kontinue import keys, lineage
from kontinue.models import base, checkpoint, core, kueue
from kontinue.models import policy as policy_model
from queue_bridge import job_safety, lifecycle, naming, reconciling
from tests import fixtures

Obj = dict[str, Any]
WORKLOAD = fixtures.FIXTURES / "objects/workload-evicted.yaml"
JOB_UID = "0c8b2d5e-1111-4a4a-8e8e-222233334444"
OWNER = checkpoint.Lineage(
    namespace="research", owner_kind="Job", owner_name="scavenger-0", owner_uid=JOB_UID
)
T0 = datetime.datetime(2026, 12, 2, 11, 23, 9, tzinfo=datetime.UTC)


def _workload(**status: Any) -> kueue.Workload:
    raw = fixtures.load_one(WORKLOAD)
    raw["status"].update(status)
    return kueue.Workload.model_validate(raw)


def _queue(name: str, labels: dict[str, str] | None) -> kueue.ClusterQueue:
    return kueue.ClusterQueue.model_validate({"metadata": {"name": name, "labels": labels or {}}})


def _pod(recording: str = "kubelet-sigterm-saved", **meta: Any) -> core.Pod:
    with (fixtures.FIXTURES / "bridge" / f"{recording}.json").open() as stream:
        raw: Obj = json.load(stream)
    raw["metadata"]["namespace"] = "research"
    raw["metadata"]["annotations"] = {keys.LINEAGE_ANNOTATION: lineage.annotation_value(OWNER)}
    raw["metadata"]["finalizers"] = [keys.CHECKPOINT_FINALIZER]
    raw["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "scavenger-0",
            "uid": JOB_UID,
            "controller": True,
        }
    ]
    raw["metadata"].update(meta)
    return core.Pod.model_validate(raw)


def _running(pod: core.Pod) -> core.Pod:
    raw = base.to_dict(pod)
    raw["metadata"].pop("deletionTimestamp", None)
    raw["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {"name": "main", "state": {"running": {"startedAt": "2026-12-02T11:23:06Z"}}}
        ],
    }
    return core.Pod.model_validate(raw)


# --- opt-in ----------------------------------------------------------------------------------

POLICY = policy_model.CheckpointPolicy.model_validate(
    {"metadata": {"name": "gpu"}, "spec": {"retention": {"keep": 5}}}
)


@pytest.mark.parametrize(
    ("labels", "policies", "opted", "policy_name", "reason"),
    [
        (None, {}, False, None, "ClusterQueue scavenger-cq has not opted in"),
        ({keys.ENABLED_LABEL: "false"}, {}, False, None, "has not opted in"),
        ({keys.ENABLED_LABEL: "true"}, {}, True, "default", "opted in"),
        ({keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "gpu"}, {"gpu": POLICY}, True, "gpu", ""),
        (
            {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "gpu"},
            {},
            False,
            None,
            "CheckpointPolicy gpu of Kueue ClusterQueue scavenger-cq not found",
        ),
    ],
    ids=["no-label", "false", "default-policy", "named-policy", "missing-policy"],
)
def test_opt_in_follows_the_cluster_queue_label_and_policy(
    labels: dict[str, str] | None,
    policies: dict[str, policy_model.CheckpointPolicy],
    opted: bool,
    policy_name: str | None,
    reason: str,
) -> None:
    decision = reconciling.opt_in(
        _workload(),
        cluster_queue=lambda name: _queue(name, labels),
        local_queue=lambda ns, name: None,
        policy=policies.get,
    )
    assert decision.opted_in is opted
    assert reason in decision.reason
    assert (decision.policy.name if decision.policy else None) == policy_name


def test_after_the_quota_release_the_cluster_queue_comes_from_the_local_queue() -> None:
    released = _workload(admission=None)
    local = kueue.LocalQueue.model_validate(
        {
            "metadata": {"name": "scavenger", "namespace": "research"},
            "spec": {"clusterQueue": "cq2"},
        }
    )
    seen: list[str] = []

    def cluster_queue(name: str) -> kueue.ClusterQueue:
        seen.append(name)
        return _queue(name, {keys.ENABLED_LABEL: "true"})

    decision = reconciling.opt_in(
        released,
        cluster_queue=cluster_queue,
        local_queue=lambda ns, name: local if (ns, name) == ("research", "scavenger") else None,
        policy=lambda name: None,
    )
    assert decision.opted_in
    assert seen == ["cq2"]
    assert decision.policy is policy_model.DEFAULT


def test_the_eviction_names_one_checkpoint_for_every_sighting() -> None:
    decision = reconciling.OptIn(True, "", "scavenger-cq", policy_model.DEFAULT)
    first = reconciling.eviction(_workload(), decision=decision)
    assert first is not None
    assert first.lineage == OWNER
    assert first.trigger.reason == "Preempted"
    # Kueue's later writes of the same eviction keep Evicted's lastTransitionTime.
    again = _workload(
        conditions=[
            *fixtures.load_one(WORKLOAD)["status"]["conditions"],
            {"type": "Requeued", "status": "True", "reason": "Preempted"},
        ]
    )
    second = reconciling.eviction(again, decision=decision)
    assert second is not None
    assert second.name == first.name
    assert first.name == naming.checkpoint_name(
        OWNER, trigger=first.trigger, workload_uid="6f7d1f1e-5a1b-4c7e-9b55-0a2d8f3c1e01"
    )
    assert reconciling.eviction(_workload(), decision=reconciling.OptIn(False, "no")) is None


def test_members_are_running_or_held_pods_of_the_lineage_not_taken_elsewhere() -> None:
    saved = _pod(name="held-by-us", uid="u-held")  # ended, deleted, our finalizer: a member
    running = _running(_pod(name="b-running", uid="u-run"))
    ended_alone = _running(_pod(name="ended", uid="u-ended"))
    ended_alone.status = core.PodStatus(phase="Failed")  # ended on its own, never deleted
    stranger = _running(_pod(name="stranger", uid="u-x"))
    stranger.metadata.annotations = {keys.LINEAGE_ANNOTATION: "research/Job/other/uid-2"}
    taken = _running(_pod(name="taken", uid="u-taken"))
    indexed = _running(_pod(name="z-indexed", uid="u-idx"))
    indexed.metadata.annotations = {
        **(indexed.metadata.annotations or {}),
        keys.JOB_COMPLETION_INDEX_ANNOTATION: "0",
    }
    members = reconciling.members_of(
        [saved, running, ended_alone, stranger, taken, indexed], owner=OWNER, taken={"u-taken"}
    )
    # Members carry their identity, never a position by name: pods without a completion index
    # (a NonIndexed Job) all share index=0 (kontinue/identity.py).
    assert [(m.pod_name, m.identity, m.node) for m in members] == [
        ("b-running", "index=0", "real-node-1"),
        ("held-by-us", "index=0", "real-node-1"),
        ("z-indexed", "index=0", "real-node-1"),
    ]


def test_members_record_each_workload_shapes_identity() -> None:
    shapes = {
        "idx-3": {keys.JOB_COMPLETION_INDEX_ANNOTATION: "3"},
        "js-b-1": {
            keys.JOBSET_NAME_LABEL: "js",
            keys.JOBSET_REPLICATED_JOB_LABEL: "b",
            keys.JOBSET_JOB_INDEX_LABEL: "1",
            keys.JOB_COMPLETION_INDEX_ANNOTATION: "0",
        },
        "vc-worker-1": {keys.VOLCANO_TASK_SPEC_KEY: "worker", keys.VOLCANO_TASK_INDEX_KEY: "1"},
        "bad": {keys.JOB_COMPLETION_INDEX_ANNOTATION: "\u00b2"},
    }
    pods = []
    for name, marks in shapes.items():
        pod = _running(_pod(name=name, uid=f"u-{name}"))
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), **marks}
        pods.append(pod)
    members = reconciling.members_of(pods, owner=OWNER)
    assert {m.pod_name: (m.identity, m.index) for m in members} == {
        "idx-3": ("index=3", 3),
        "js-b-1": ("replicatedJob=b,jobIndex=1,index=0", 0),
        "vc-worker-1": ("task=worker,index=1", 1),
    }


# --- follow-through --------------------------------------------------------------------------


def _cp(*pods: core.Pod) -> checkpoint.Checkpoint:
    return checkpoint.Checkpoint(
        metadata=base.ObjectMeta(name="cp", namespace="research"),
        spec=checkpoint.CheckpointSpec(
            lineage=OWNER,
            trigger=checkpoint.Trigger(
                source=checkpoint.TriggerSource.KUEUE, reason="Preempted", time=T0
            ),
            members=[
                checkpoint.Member(pod_name=p.name, pod_uid=p.metadata.uid or "") for p in pods
            ],
        ),
    )


def _terminating(pod: core.Pod) -> core.Pod:
    raw = base.to_dict(_running(pod))
    raw["metadata"]["deletionTimestamp"] = base.format_time(T0)
    return core.Pod.model_validate(raw)


@pytest.mark.parametrize(
    ("offset", "phase", "reason"),
    [
        (1.0, "InProgress", None),
        (30.0, "Failed", "still Terminating 30s after its grace period ended"),
    ],
)
def test_a_member_stuck_terminating_is_unreported_after_the_margin(
    offset: float, phase: str, reason: str | None
) -> None:
    pod = _terminating(_pod())
    cp = _cp(pod)
    status = reconciling.next_status(
        cp,
        [pod],
        policy=policy_model.DEFAULT,
        now=T0 + datetime.timedelta(seconds=offset),
        margin=30,
        pending_timeout=600,
    )
    assert status.phase.value == phase
    member = status.members[0]
    assert (member.reason or "").startswith(reason or "") if reason else member.reason is None
    if reason:  # its kubelet never reported: whether it saved is unknown, not a failure
        assert member.state is checkpoint.MemberState.UNREPORTED
        assert (member.reason or "").endswith(lifecycle.NO_REPORT)
    deadline = reconciling.next_deadline(cp, [pod], margin=30, pending_timeout=600)
    assert deadline == T0 + datetime.timedelta(seconds=30)


def test_a_member_never_told_to_stop_fails_after_the_pending_timeout() -> None:
    pod = _running(_pod())
    cp = _cp(pod)
    before = reconciling.next_status(
        cp, [pod], policy=policy_model.DEFAULT, now=T0, margin=30, pending_timeout=600
    )
    assert before.phase is checkpoint.Phase.PENDING
    after = reconciling.next_status(
        cp,
        [pod],
        policy=policy_model.DEFAULT,
        now=T0 + datetime.timedelta(seconds=600),
        margin=30,
        pending_timeout=600,
    )
    assert after.phase is checkpoint.Phase.FAILED
    assert after.members[0].reason == "never told to stop within 600s of the eviction"
    assert (
        after.message
        == f"1/1 members failed: {pod.name}: never told to stop within 600s of the eviction"
    )  # noqa: E501


def test_transition_events() -> None:
    cp = _cp(_pod())
    done = cp.status.model_copy(update={"phase": checkpoint.Phase.FAILED, "message": "1/1 failed"})
    assert reconciling.transition_event(cp, done) == (
        keys.EVENT_CHECKPOINT_FAILED,
        "Checkpoint cp: 1/1 failed",
        "Warning",
    )
    assert reconciling.transition_event(cp, cp.status) is None


# --- the finalizer ---------------------------------------------------------------------------


def _recorded(pod: core.Pod, state: checkpoint.MemberState) -> checkpoint.Checkpoint:
    cp = _cp(pod)
    cp.status = checkpoint.CheckpointStatus(
        phase=checkpoint.Phase.IN_PROGRESS,
        members=[checkpoint.MemberResult(pod_name=pod.name, state=state)],
    )
    return cp


SAVED_POD = _pod()  # terminated 11:23:09, deleted (deadline) 11:23:09


@pytest.mark.parametrize(
    ("case", "pod", "cps", "pending", "now_offset", "release", "reason"),
    [
        ("no finalizer", _pod(finalizers=[]), [], False, 0, False, "no finalizer"),
        (
            "recorded",
            SAVED_POD,
            [_recorded(SAVED_POD, checkpoint.MemberState.SAVED)],
            False,
            0,
            True,
            "result recorded in cp",
        ),
        (
            "not yet recorded",
            SAVED_POD,
            [_recorded(SAVED_POD, checkpoint.MemberState.SAVING)],
            False,
            10,
            False,
            "result not yet recorded in cp",
        ),
        (
            "backstop",
            SAVED_POD,
            [_recorded(SAVED_POD, checkpoint.MemberState.SAVING)],
            False,
            60,
            True,
            "backstop: 60s past the end of the grace period",
        ),
        (
            "eviction being recorded",
            SAVED_POD,
            [],
            True,
            10,
            False,
            "an eviction of its Workload is being recorded",
        ),
        ("ended moments ago", SAVED_POD, [], False, 0, False, "ended moments ago"),
        (
            "ended, no eviction",
            SAVED_POD,
            [],
            False,
            5,
            True,
            "ended without being a member of any checkpoint",
        ),
        ("running", _running(_pod()), [], False, 100, False, "running"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_finalizer_decisions(
    case: str,
    pod: core.Pod,
    cps: list[checkpoint.Checkpoint],
    pending: bool,
    now_offset: float,
    release: bool,
    reason: str,
) -> None:
    decision = reconciling.finalizer(
        pod,
        checkpoints=cps,
        eviction_pending=pending,
        now=T0 + datetime.timedelta(seconds=now_offset),
        margin=30,
        settle=2,
    )
    assert (decision.release, decision.reason) == (release, reason), case


def test_an_expired_checkpoint_does_not_hold_the_finalizer() -> None:
    cp = _recorded(SAVED_POD, checkpoint.MemberState.SAVING)
    cp.status.phase = checkpoint.Phase.EXPIRED
    decision = reconciling.finalizer(
        SAVED_POD,
        checkpoints=[cp],
        eviction_pending=False,
        now=T0 + datetime.timedelta(seconds=5),
        margin=30,
        settle=2,
    )
    assert decision.release


# --- failed restores, Job safety -------------------------------------------------------------


def _restoring(exit_code: int, *, counted: str | None = None, deleting: bool = False) -> core.Pod:
    raw = base.to_dict(_pod())
    if not deleting:  # the recording is of a deleted pod; a failed restore is usually not
        raw["metadata"].pop("deletionTimestamp", None)
    raw["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] = "good"
    if counted:
        raw["metadata"]["annotations"][keys.RESTORE_FAILURE_COUNTED_ANNOTATION] = counted
    raw["status"]["initContainerStatuses"] = [
        {
            "name": keys.RESTORE_INIT_CONTAINER,
            "state": {"terminated": {"exitCode": exit_code, "message": "MANIFEST.json missing\n"}},
        }
    ]
    return core.Pod.model_validate(raw)


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (_restoring(3), ("good", "restore init container exited 3: MANIFEST.json missing")),
        (_restoring(4), ("good", "restore init container exited 4: MANIFEST.json missing")),
        (_restoring(5), ("good", "restore init container exited 5: MANIFEST.json missing")),
        (_restoring(6), ("good", "restore init container exited 6: MANIFEST.json missing")),
        (_restoring(1), ("good", "restore init container exited 1: MANIFEST.json missing")),
        (_restoring(137), ("good", "restore init container exited 137: MANIFEST.json missing")),
        (_restoring(137, deleting=True), None),  # killed with its pod: not the checkpoint's fault
        (_restoring(0), None),
        (_restoring(4, counted="good"), None),
        (
            _restoring(4, counted="older"),
            ("good", "restore init container exited 4: MANIFEST.json missing"),
        ),  # noqa: E501
    ],
    ids=[
        "missing",
        "torn",
        "unreadable",
        "wait-timeout",
        "crash",
        "oom-killed",
        "killed-with-pod",
        "ok",
        "counted",
        "counted-other",
    ],
)
def test_failed_restores(pod: core.Pod, expected: tuple[str, str] | None) -> None:
    assert reconciling.failed_restore(pod) == expected


def _job(**spec: Any) -> core.Job:
    base_spec: Obj = {"template": {"spec": {"restartPolicy": "Never", "containers": []}}}
    merged = copy.deepcopy(base_spec)
    merged.update(spec)
    return core.Job.model_validate({"metadata": {"name": "j"}, "spec": merged})


RULE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}


@pytest.mark.parametrize(
    ("job", "problems"),
    [
        (_job(podReplacementPolicy="Failed", podFailurePolicy={"rules": [RULE]}), []),
        (_job(), ["no podReplacementPolicy: Failed", "no podFailurePolicy rule"]),
        (_job(podReplacementPolicy="Failed"), ["no podFailurePolicy rule"]),
        (
            _job(
                template={"spec": {"restartPolicy": "OnFailure", "containers": []}},
                podReplacementPolicy="Failed",
                podFailurePolicy={"rules": [RULE]},
            ),
            ["restartPolicy OnFailure"],
        ),
    ],
    ids=["safe", "legacy", "no-rule", "on-failure"],
)
def test_job_risk(job: core.Job, problems: list[str]) -> None:
    risk = job_safety.job_risk(job)
    if not problems:
        assert risk is None
        return
    assert risk is not None
    for problem in problems:
        assert problem in risk
    assert "backoffLimit" in risk
