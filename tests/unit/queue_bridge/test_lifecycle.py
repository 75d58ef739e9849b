"""Member results from real container states, the set's phase, and one reconcile step."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

import pytest

from kontinue import keys, lineage, restore_plan
from kontinue.models import base, checkpoint, core, policy
from queue_bridge import lifecycle, reconciling
from tests import fixtures

BRIDGE = fixtures.FIXTURES / "bridge"
S = checkpoint.MemberState


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((BRIDGE / f"{name}.json").read_text())
    return data


def pod_from(name: str, change: Callable[[dict[str, Any]], None] | None = None) -> core.Pod:
    data = recorded(name)
    if change is not None:
        change(data)
    return core.Pod.model_validate(data)


def terminated(**fields: Any) -> Callable[[dict[str, Any]], None]:
    """Edit the first container's terminated state (recorded shape, one field changed)."""

    def change(data: dict[str, Any]) -> None:
        state = data["status"]["containerStatuses"][0]["state"]["terminated"]
        for key, value in fields.items():
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value

    return change


SAVED_MESSAGE = '{"kontinue": "saved", "step": 42, "bytes": 1024}'

# name -> (pod, state, exit code, reason part, bytes)
RESULTS: dict[str, tuple[core.Pod, checkpoint.MemberState, int | None, str, int | None]] = {
    "recorded-saved-143": (
        pod_from("kubelet-sigterm-saved"),
        S.SAVED,
        143,
        "saved, exit 143",
        None,
    ),
    "saved-with-bytes": (
        pod_from("kubelet-sigterm-saved", terminated(message=SAVED_MESSAGE)),
        S.SAVED,
        143,
        "saved",
        1024,
    ),
    "saved-trailing-newline": (
        pod_from("kubelet-sigterm-saved", terminated(message=SAVED_MESSAGE + "\n")),
        S.SAVED,
        143,
        "saved",
        1024,
    ),
    "recorded-sigkill-137": (
        pod_from("kubelet-sigterm-ignored-killed"),
        S.FAILED,
        137,
        "killed by SIGKILL (exit 137)",
        None,
    ),
    "sigkill-even-with-marker": (
        pod_from("kubelet-sigterm-ignored-killed", terminated(message=SAVED_MESSAGE)),
        S.FAILED,
        137,
        "SIGKILL",
        None,
    ),
    "oom-killed": (
        pod_from("kubelet-sigterm-saved", terminated(reason="OOMKilled", exitCode=137)),
        S.FAILED,
        137,
        "OOMKilled",
        None,
    ),
    "recorded-exit-0": (
        pod_from("kubelet-run-to-success"),
        S.FAILED,
        0,
        "exited 0 after eviction",
        None,
    ),
    "exit-0-with-marker": (
        pod_from("kubelet-sigterm-saved", terminated(exitCode=0)),
        S.FAILED,
        0,
        "exited 0",
        None,
    ),
    "recorded-not-json": (
        pod_from("kubelet-run-to-failure"),
        S.FAILED,
        3,
        "termination message is not JSON: training failed at step 7",
        None,
    ),
    "no-message-143": (
        pod_from("kubelet-sigterm-saved", terminated(message=None)),
        S.FAILED,
        143,
        "no termination message (exit 143)",
        None,
    ),
    "two-lines": (
        pod_from("kubelet-sigterm-saved", terminated(message=SAVED_MESSAGE + "\n{}")),
        S.FAILED,
        143,
        "not one line",
        None,
    ),
    "json-list": (
        pod_from("kubelet-sigterm-saved", terminated(message="[1]")),
        S.FAILED,
        143,
        "not a JSON object",
        None,
    ),
    "workload-said-failed": (
        pod_from(
            "kubelet-sigterm-saved",
            terminated(message='{"kontinue": "failed", "error": "disk full"}'),
        ),
        S.FAILED,
        143,
        "workload reported kontinue='failed': disk full",
        None,
    ),
    "after-grace-period": (
        pod_from(
            "kubelet-sigterm-saved",
            terminated(finishedAt="2026-12-02T11:23:45Z"),
        ),
        S.FAILED,
        143,
        "after the grace period ended",
        None,
    ),
}


@pytest.mark.parametrize(
    ("pod", "state", "code", "reason", "size"), list(RESULTS.values()), ids=list(RESULTS)
)
def test_member_result_from_terminated(
    pod: core.Pod, state: checkpoint.MemberState, code: int | None, reason: str, size: int | None
) -> None:
    result = lifecycle.member_result(pod, container=None, path="ns/job-x/uid")

    assert result.state is state
    assert result.exit_code == code
    assert result.reason is not None
    assert reason in result.reason
    assert result.bytes == size
    assert result.pod_name == pod.name
    assert result.path == "ns/job-x/uid"
    terminated_state = pod.status.container_statuses[0].state.terminated  # type: ignore[index, union-attr]
    assert result.finished_at == terminated_state.finished_at  # type: ignore[union-attr]
    assert result.started_at is not None


def test_recorded_saved_pod_finished_inside_its_grace_period() -> None:
    """The recording's deletionTimestamp is the deadline; the save finished before it."""
    pod = pod_from("kubelet-sigterm-saved")
    assert pod.metadata.deletion_timestamp is not None
    finished = pod.status.container_statuses[0].state.terminated.finished_at  # type: ignore[index, union-attr]
    assert finished is not None
    assert finished <= pod.metadata.deletion_timestamp


def _running(deleting: bool) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["status"]["phase"] = "Running"
        data["status"]["containerStatuses"][0]["state"] = {
            "running": {"startedAt": "2026-12-02T11:23:06Z"}
        }
        if not deleting:
            data["metadata"].pop("deletionTimestamp", None)

    return change


def _waiting(phase: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["status"]["phase"] = phase
        data["status"]["containerStatuses"][0]["state"] = {
            "waiting": {"reason": "ContainerCreating"}
        }

    return change


def _no_status(data: dict[str, Any]) -> None:
    data.pop("status")


NOT_TERMINATED = {
    "running-not-told-yet": (_running(deleting=False), S.PENDING, None),
    "running-terminating": (_running(deleting=True), S.SAVING, None),
    "waiting-pod-pending": (_waiting("Pending"), S.PENDING, None),
    "never-started-pod-failed": (_waiting("Failed"), S.CARRIED_FORWARD, "carried forward from"),
    "no-status": (_no_status, S.PENDING, None),
}


@pytest.mark.parametrize(
    ("change", "state", "reason"), list(NOT_TERMINATED.values()), ids=list(NOT_TERMINATED)
)
def test_member_result_before_termination(
    change: Callable[[dict[str, Any]], None], state: checkpoint.MemberState, reason: str | None
) -> None:
    result = lifecycle.member_result(pod_from("kubelet-sigterm-saved", change), container="main")
    assert result.state is state
    assert result.exit_code is None
    if reason is None:
        assert result.reason is None
    else:
        assert result.reason is not None
        assert reason in result.reason


def test_member_result_reads_the_named_container() -> None:
    def sidecar_first(data: dict[str, Any]) -> None:
        data["spec"]["containers"].insert(0, {"name": "sidecar", "image": "x"})
        status = json.loads(json.dumps(data["status"]["containerStatuses"][0]))
        status["name"] = "sidecar"
        status["state"]["terminated"].update(exitCode=0, reason="Completed")
        status["state"]["terminated"].pop("message")
        data["status"]["containerStatuses"].insert(0, status)

    pod = pod_from("kubelet-sigterm-saved", sidecar_first)
    assert lifecycle.member_result(pod, container="main").state is S.SAVED
    assert lifecycle.member_result(pod, container=None).state is S.FAILED  # first = sidecar


def result(state: checkpoint.MemberState) -> checkpoint.MemberResult:
    return checkpoint.MemberResult(pod_name="p", state=state)


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([], checkpoint.Phase.PENDING),
        ([S.PENDING, S.PENDING], checkpoint.Phase.PENDING),
        ([S.PENDING, S.SAVING], checkpoint.Phase.IN_PROGRESS),
        ([S.SAVED, S.PENDING], checkpoint.Phase.IN_PROGRESS),
        ([S.FAILED, S.SAVING], checkpoint.Phase.IN_PROGRESS),
        ([S.SAVED, S.SAVED], checkpoint.Phase.SUCCEEDED),
        ([S.SAVED], checkpoint.Phase.SUCCEEDED),
        ([S.SAVED, S.FAILED], checkpoint.Phase.FAILED),
        ([S.FAILED], checkpoint.Phase.FAILED),
    ],
    ids=[
        "none",
        "all-pending",
        "one-saving",
        "one-saved-one-pending",
        "failed-but-other-running",
        "all-saved",
        "single-saved",
        "one-failed",
        "single-failed",
    ],
)
def test_phase(states: list[checkpoint.MemberState], expected: checkpoint.Phase) -> None:
    assert lifecycle.phase(result(s) for s in states) is expected


LINEAGE = checkpoint.Lineage(namespace="default", owner_kind="Job", owner_name="j", owner_uid="u")


def checkpoint_of(pods: list[core.Pod], **status: Any) -> checkpoint.Checkpoint:
    return checkpoint.Checkpoint(
        metadata={"name": "cp", "namespace": "default"},
        spec=checkpoint.CheckpointSpec(
            lineage=LINEAGE,
            trigger=checkpoint.Trigger(
                source=checkpoint.TriggerSource.KUEUE,
                reason="Preempted",
                time=datetime.datetime(2026, 12, 2, 11, 23, 7, tzinfo=datetime.UTC),
            ),
            members=[
                checkpoint.Member(pod_name=p.name, pod_uid=p.metadata.uid or "", index=i)
                for i, p in enumerate(pods)
            ],
        ),
        status=checkpoint.CheckpointStatus(**status),
    )


def second(name: str, change: Callable[[dict[str, Any]], None] | None = None) -> core.Pod:
    """Another member: the same recording under another name and UID."""

    def rename(data: dict[str, Any]) -> None:
        data["metadata"].update(name=data["metadata"]["name"] + "-b", uid="uid-b")
        if change is not None:
            change(data)

    return pod_from(name, rename)


def test_next_status_all_saved_succeeds_with_paths_and_condition() -> None:
    a, b = pod_from("kubelet-sigterm-saved"), second("kubelet-sigterm-saved")
    cp = checkpoint_of([a, b])

    status = lifecycle.next_status(cp, [a, b])

    assert status.phase is checkpoint.Phase.SUCCEEDED
    assert [m.state for m in status.members] == [S.SAVED, S.SAVED]
    assert status.members[0].path == lineage.checkpoint_dir(
        policy.DEFAULT, LINEAGE, a.metadata.uid or ""
    )
    assert status.path == lineage.lineage_dir(LINEAGE)
    assert status.message == "2/2 members saved"
    (saved,) = status.conditions
    assert (saved.type, saved.status, saved.reason) == (
        keys.CONDITION_SAVED,
        "True",
        "AllMembersSaved",
    )
    assert saved.last_transition_time == a.status.container_statuses[0].state.terminated.finished_at  # type: ignore[index, union-attr]


def test_next_status_one_killed_fails_naming_it() -> None:
    a, b = pod_from("kubelet-sigterm-saved"), second("kubelet-sigterm-ignored-killed")
    status = lifecycle.next_status(checkpoint_of([a, b]), [a, b])
    assert status.phase is checkpoint.Phase.FAILED
    assert status.message is not None
    assert status.message.startswith(f"1/2 members failed: {b.name}: killed by SIGKILL")
    assert status.conditions[0].status == "False"


def test_next_status_stays_in_progress_while_a_member_saves() -> None:
    a = pod_from("kubelet-sigterm-ignored-killed")
    b = second("kubelet-sigterm-saved", _running(deleting=True))
    status = lifecycle.next_status(checkpoint_of([a, b]), [a, b])
    assert status.phase is checkpoint.Phase.IN_PROGRESS
    assert [m.state for m in status.members] == [S.FAILED, S.SAVING]
    assert status.conditions == []


def test_next_status_keeps_recorded_results_once_pods_are_gone() -> None:
    """After the finalizer is removed the pod disappears; its recorded result stays."""
    a, b = pod_from("kubelet-sigterm-saved"), second("kubelet-sigterm-saved", _running(True))
    first = lifecycle.next_status(checkpoint_of([a, b]), [a, b])
    assert first.phase is checkpoint.Phase.IN_PROGRESS
    b_done = second("kubelet-sigterm-saved")

    status = lifecycle.next_status(checkpoint_of([a, b], **first.model_dump()), [b_done])

    assert status.phase is checkpoint.Phase.SUCCEEDED
    assert status.members[0] == first.members[0]


def test_next_status_pod_gone_unrecorded_is_unreported_and_fails_the_set() -> None:
    """Its finalizer was removed before it reported: whether it saved is unknown (Unreported),
    the set ends Failed so the cluster moves on, and says so."""
    a, b = pod_from("kubelet-sigterm-saved"), second("kubelet-sigterm-saved")
    status = lifecycle.next_status(checkpoint_of([a, b]), [a])
    assert status.phase is checkpoint.Phase.FAILED
    assert status.members[1].state is S.UNREPORTED
    assert status.members[1].reason == (
        f"pod gone before its result was recorded: {lifecycle.NO_REPORT}"
    )
    assert (status.message or "").startswith(
        "1/2 unreported (restored from only if its directory verifies): "
    )
    saved = next(c for c in status.conditions if c.type == keys.CONDITION_SAVED)
    assert (saved.status, saved.reason) == ("False", "MemberUnreported")


def test_next_status_matches_members_by_uid_not_name() -> None:
    a = pod_from("kubelet-sigterm-saved")
    impostor = pod_from("kubelet-sigterm-saved", lambda d: d["metadata"].update(uid="new-uid"))
    status = lifecycle.next_status(checkpoint_of([a]), [impostor])
    assert status.members[0].state is S.UNREPORTED  # the member pod itself is gone


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Expired"])
def test_next_status_terminal_is_final(phase: str) -> None:
    a = pod_from("kubelet-sigterm-ignored-killed")
    cp = checkpoint_of([a], phase=phase, failedRestores=1)
    assert lifecycle.next_status(cp, [a]) == cp.status


def test_next_status_never_moves_back() -> None:
    a = pod_from("kubelet-sigterm-saved", _running(deleting=False))
    cp = checkpoint_of([a], phase="InProgress")
    assert lifecycle.next_status(cp, [a]).phase is checkpoint.Phase.IN_PROGRESS


def _unscheduled_deleted(data: dict[str, Any]) -> None:
    """Still Pending and never bound (unschedulable) when Kueue's eviction deleted it: our
    finalizer holds it, no kubelet will ever report on it."""
    data["status"] = {"phase": "Pending"}
    data["spec"].pop("nodeName", None)
    data["metadata"]["annotations"] = {
        **(data["metadata"].get("annotations") or {}),
        keys.RESTORE_FROM_ANNOTATION: "cp-older",
    }


def _restoring_then_killed(data: dict[str, Any]) -> None:
    """In its restore init-container when deleted; the kubelet ended the pod."""
    data["metadata"].update(name="c", uid="uid-c")
    data["status"]["phase"] = "Failed"
    data["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "PodInitializing"}}


def test_a_member_that_never_ran_is_carried_forward_and_does_not_fail_the_set() -> None:
    """Issue 19 item 2: a pod still Pending at eviction saved nothing; the set succeeds and
    records where that identity's state is."""
    a = pod_from("kubelet-sigterm-saved")
    b = second("kubelet-sigterm-saved", _unscheduled_deleted)
    c = pod_from("kubelet-sigterm-saved", _restoring_then_killed)
    status = lifecycle.next_status(checkpoint_of([a, b, c]), [a, b, c])
    assert [m.state for m in status.members] == [S.SAVED, S.CARRIED_FORWARD, S.CARRIED_FORWARD]
    assert status.members[1].carried_from == "cp-older"
    assert status.members[2].carried_from is None
    assert status.phase is checkpoint.Phase.SUCCEEDED
    assert status.message == "1/3 members saved, 2 carried forward"


def test_a_member_that_ran_and_died_before_saving_still_fails_the_set() -> None:
    a = pod_from("kubelet-sigterm-saved")
    b = second("kubelet-sigterm-saved", _waiting("Failed"))
    b.status.container_statuses[0].restart_count = 1  # type: ignore[index, union-attr]
    status = lifecycle.next_status(checkpoint_of([a, b]), [a, b])
    assert status.phase is checkpoint.Phase.FAILED


# --- which container is the workload (kontinue/workload.py) ------------------------------------

HELPER_KILLED = {
    "name": "helper",
    "state": {
        "terminated": {
            "exitCode": 137,
            "reason": "Error",
            "startedAt": "2026-12-02T11:23:06Z",
            "finishedAt": "2026-12-02T11:23:40Z",
        }
    },
    "ready": False,
    "restartCount": 0,
}
HELPER_RUNNING = {
    "name": "helper",
    "state": {"running": {"startedAt": "2026-12-02T11:23:06Z"}},
    "ready": True,
    "restartCount": 0,
}


def with_helper(
    status: dict[str, Any],
    *,
    first: bool,
    gpu: bool = False,
    annotation: str | None = None,
) -> Callable[[dict[str, Any]], None]:
    """The recorded saved pod with a second regular container, ``helper``, that ignores
    SIGTERM; listed first or second, the trainer (``main``) optionally asking for a GPU."""

    def change(data: dict[str, Any]) -> None:
        helper = {"name": "helper", "image": "busybox", "command": ["sleep", "infinity"]}
        main = data["spec"]["containers"][0]
        if gpu:
            main["resources"] = {"limits": {keys.GPU_RESOURCE: "1"}}
        data["spec"]["containers"] = [helper, main] if first else [main, helper]
        statuses = data["status"]["containerStatuses"]
        data["status"]["containerStatuses"] = [status, *statuses] if first else [*statuses, status]
        if annotation is not None:
            data["metadata"].setdefault("annotations", {})[keys.WORKLOAD_CONTAINERS_ANNOTATION] = (
                annotation
            )

    return change


@pytest.mark.parametrize(
    ("change", "state"),
    [
        # before: the first container (the helper, SIGKILLed) failed the member
        (with_helper(HELPER_KILLED, first=True, gpu=True), S.SAVED),
        (with_helper(HELPER_KILLED, first=True, annotation="main"), S.SAVED),
        (with_helper(HELPER_KILLED, first=False), S.SAVED),
        # decided once the workload container ended: the helper still running is not waited for
        (with_helper(HELPER_RUNNING, first=True, gpu=True), S.SAVED),
        (with_helper(HELPER_RUNNING, first=False), S.SAVED),
        # no annotation, no accelerator: the first container is the workload (the helper)
        (with_helper(HELPER_KILLED, first=True), S.FAILED),
        # a name that matches nothing is ignored; the accelerator rule decides
        (with_helper(HELPER_KILLED, first=True, gpu=True, annotation="trainer"), S.SAVED),
    ],
    ids=[
        "helper-first-gpu-trainer",
        "helper-first-annotated",
        "helper-second",
        "helper-running-gpu",
        "helper-running-second",
        "no-hint-first-wins",
        "unknown-name-ignored",
    ],
)
def test_only_the_workload_containers_decide_the_member(
    change: Callable[[dict[str, Any]], None], state: checkpoint.MemberState
) -> None:
    pod = pod_from("kubelet-sigterm-saved", change)
    assert lifecycle.member_result(pod, container=None).state is state


def test_several_workload_containers_all_must_save() -> None:
    def two_trainers(data: dict[str, Any]) -> None:
        main = data["spec"]["containers"][0]
        second = {**main, "name": "second"}
        data["spec"]["containers"] = [main, second]
        data["metadata"]["annotations"] = {keys.WORKLOAD_CONTAINERS_ANNOTATION: "main,second"}
        status = data["status"]["containerStatuses"][0]
        data["status"]["containerStatuses"] = [status, {**HELPER_KILLED, "name": "second"}]

    pod = pod_from("kubelet-sigterm-saved", two_trainers)
    result = lifecycle.member_result(pod, container=None)
    assert result.state is S.FAILED
    assert (result.reason or "").startswith("container second: killed by SIGKILL (exit 137)")


# --- a lost kubelet: final statuses that arrive after the deadline ---------------------------

NO_REPORT = "still Terminating 30s after its grace period ended: no final container status"


def _failed_for_want_of_a_report(
    pods: list[core.Pod], *others: Any, state: S = S.UNREPORTED
) -> checkpoint.Checkpoint:
    lost = checkpoint.MemberResult(pod_name=pods[0].name, state=state, reason=NO_REPORT)
    return checkpoint_of(pods, phase="Failed", members=[lost, *others], message="1/1 failed")


@pytest.mark.parametrize("recorded", [S.UNREPORTED, S.FAILED], ids=["unreported", "legacy"])
def test_a_save_reported_late_upgrades_the_set(recorded: S) -> None:
    """The kubelet came back and reported exit 143 with the saved message, finished inside the
    grace period: the member is Saved and the set Succeeded, saying why. Members recorded
    Failed without an exit code (before Unreported existed) are re-judged the same way."""
    pod = pod_from("kubelet-sigterm-saved")
    cp = _failed_for_want_of_a_report([pod], state=recorded)

    new = lifecycle.late_status(cp, [pod], superseded=False)

    assert new is not None
    assert new.phase is checkpoint.Phase.SUCCEEDED
    (member,) = new.members
    assert member.state is S.SAVED
    assert member.exit_code == 143
    assert lifecycle.LATE_REPORT in (member.reason or "")
    saved = next(c for c in new.conditions if c.type == keys.CONDITION_SAVED)
    assert (saved.status, saved.reason) == ("True", "LateReport")


@pytest.mark.parametrize(
    "case", ["superseded", "still-no-report", "finished-after-grace", "reported-a-failure"]
)
def test_a_late_report_never_upgrades_what_it_must_not(case: str) -> None:
    if case == "still-no-report":
        pod = pod_from("kubelet-sigterm-saved", _running(deleting=True))
    elif case == "finished-after-grace":
        pod = pod_from("kubelet-sigterm-saved", terminated(finishedAt="2026-12-02T11:23:30Z"))
    else:
        pod = pod_from("kubelet-sigterm-saved")
    cp = _failed_for_want_of_a_report([pod])
    if case == "reported-a-failure":  # the member's own report said it failed: final
        killed = checkpoint.MemberResult(
            pod_name=pod.name, state=S.FAILED, exit_code=137, reason="killed by SIGKILL"
        )
        cp = checkpoint_of([pod], phase="Failed", members=[killed])

    assert lifecycle.late_status(cp, [pod], superseded=case == "superseded") is None


def test_a_late_save_of_one_member_does_not_hide_anothers_failure() -> None:
    a, b = pod_from("kubelet-sigterm-saved"), second("kubelet-sigterm-saved")
    killed = checkpoint.MemberResult(
        pod_name=b.name, state=S.FAILED, exit_code=137, reason="killed by SIGKILL"
    )
    cp = _failed_for_want_of_a_report([a, b], killed)

    new = lifecycle.late_status(cp, [a, b], superseded=False)

    assert new is not None
    assert new.phase is checkpoint.Phase.FAILED
    assert [m.state for m in new.members] == [S.SAVED, S.FAILED]


# --- Volcano reuses pod names: results are keyed by pod UID ---------------------------------


def _volcano(name: str, uid: str, index: int) -> Callable[[dict[str, Any]], None]:
    """A vcjob's pod: Volcano names it ``<job>-<task>-<index>`` in every incarnation
    (volcano-sh/volcano pkg/controllers/job/job_controller_util.go ``createJobPod``, via
    ``jobhelpers.MakePodName``) and stamps
    its task and index (kontinue/identity.py)."""

    def change(data: dict[str, Any]) -> None:
        data["metadata"].update(name=name, uid=uid)
        data["metadata"]["finalizers"] = [keys.CHECKPOINT_FINALIZER]
        data["metadata"]["annotations"] = {
            keys.VOLCANO_TASK_SPEC_KEY: "worker",
            keys.VOLCANO_TASK_INDEX_KEY: str(index),
        }

    return change


def _name_reused() -> tuple[checkpoint.Checkpoint, core.Pod, core.Pod, core.Pod]:
    """One open pod-path set of a vcjob: ``train-worker-0`` (uid-a) saved and is gone, its
    sibling ``train-worker-1`` still saves, and the pod Volcano recreated as ``train-worker-0``
    (uid-b), disrupted inside the grouping window, joined the set
    (queue_bridge/disruptions.py ``added_members``) and was killed by SIGKILL."""
    old = pod_from("kubelet-sigterm-saved", _volcano("train-worker-0", "uid-a", 0))
    sibling = pod_from("kubelet-sigterm-saved", _running(deleting=True))
    _volcano("train-worker-1", "uid-c", 1)(sibling_data := base.to_dict(sibling))
    sibling = core.Pod.model_validate(sibling_data)
    new = pod_from("kubelet-sigterm-ignored-killed", _volcano("train-worker-0", "uid-b", 0))
    first = lifecycle.next_status(checkpoint_of([old, sibling]), [old, sibling])
    assert [m.state for m in first.members] == [S.SAVED, S.SAVING]
    joined = checkpoint_of([old, sibling, new], **first.model_dump())
    members = [
        m.model_copy(update={"identity": f"task=worker,index={i}", "index": i})
        for m, i in zip(joined.spec.members, (0, 1, 0), strict=True)
    ]
    joined.spec.members = members
    return joined, old, sibling, new


def test_a_pod_reusing_a_members_name_gets_its_own_result() -> None:
    """Issue 19: the recreated pod's result is its own (SIGKILL: Failed), never the saved
    result of the earlier pod of the same name; each result names its pod's UID."""
    cp, _old, sibling, new = _name_reused()

    status = lifecycle.next_status(cp, [sibling, new])

    assert [(m.pod_name, m.pod_uid, m.state) for m in status.members] == [
        ("train-worker-0", "uid-a", S.SAVED),
        ("train-worker-1", "uid-c", S.SAVING),
        ("train-worker-0", "uid-b", S.FAILED),
    ]
    assert status.members[2].path == lineage.checkpoint_dir(policy.DEFAULT, LINEAGE, "uid-b")


def test_a_pod_reusing_a_members_name_keeps_its_finalizer_until_its_own_result() -> None:
    """The finalizer of the recreated pod is not released on the earlier pod's result."""
    cp, _old, _sibling, new = _name_reused()
    decision = reconciling.finalizer(
        new,
        checkpoints=[cp],
        eviction_pending=False,
        now=datetime.datetime(2026, 12, 2, 11, 23, 10, tzinfo=datetime.UTC),
        margin=30,
        settle=2,
    )
    assert (decision.release, decision.reason) == (False, "result not yet recorded in cp")


def test_the_restore_plan_reads_each_members_own_result() -> None:
    """The plan's view of a member is its own result: the recreated pod's Failed result is not
    the earlier pod's Saved one, and the member of the identity chosen is the one that saved,
    restored from its own directory."""
    cp, _old, sibling, new = _name_reused()
    done = lifecycle.next_status(cp, [sibling, new])
    cp = cp.model_copy(update={"status": done})
    old_member, _, new_member = cp.spec.members

    assert restore_plan.state_of(cp, new_member) is S.FAILED
    assert restore_plan.state_of(cp, old_member) is S.SAVED
    chosen = restore_plan.member_of(cp, "task=worker,index=0")
    assert chosen is not None
    assert chosen.pod_uid == "uid-a"
    assert restore_plan.member_dir(cp, new_member, policy=policy.DEFAULT).endswith("/uid-b")


def test_results_recorded_before_pod_uids_are_still_read_by_pod_name() -> None:
    """Checkpoints written before ``status.members[].podUid`` existed stay readable."""
    a, b = pod_from("kubelet-sigterm-saved"), second("kubelet-sigterm-ignored-killed")
    legacy = [
        checkpoint.MemberResult(pod_name=a.name, state=S.SAVED, path="x/a"),
        checkpoint.MemberResult(pod_name=b.name, state=S.FAILED, exit_code=137),
    ]
    cp = checkpoint_of([a, b], phase="Failed", members=legacy)
    member_a, member_b = cp.spec.members
    assert restore_plan.state_of(cp, member_a) is S.SAVED
    assert restore_plan.state_of(cp, member_b) is S.FAILED
    assert restore_plan.member_dir(cp, member_a, policy=policy.DEFAULT).endswith("/x/a")
