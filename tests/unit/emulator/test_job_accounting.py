"""Every row of tests/fixtures/cluster/job-accounting.md (measured on a real v1.36.2 job
controller).

Each row is replayed as the sequence of pod changes the real cluster made (suspend: finalizer
removed, then DELETE; scheduler preemption: ``DisruptionTarget`` + DELETE while running; then the
kubelet's terminal phase; then the object disappears), with one controller sync after each change,
and the counters are checked after every step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from emulator.jobs import accounting

PFP = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def _policy(kind: str, *, backoff_limit: int = 1) -> accounting.JobPolicy:
    spec: dict[str, Any] = {"backoffLimit": backoff_limit, "parallelism": 1, "completions": 1}
    if kind in ("Failed", "Failed+pFP"):
        spec["podReplacementPolicy"] = "Failed"
    if kind == "Failed+pFP":
        spec["podFailurePolicy"] = PFP
    if kind == "Indexed":
        spec["completionMode"] = "Indexed"
    return accounting.JobPolicy.from_job({"spec": spec})


@dataclasses.dataclass
class Cluster:
    """One Job with parallelism 1, its pods, and the counters after each controller sync."""

    policy: accounting.JobPolicy
    pods: list[accounting.PodFacts] = dataclasses.field(default_factory=list)
    ledger: accounting.Ledger = dataclasses.field(default_factory=accounting.Ledger)
    created: int = 0
    suspended: bool = False
    history: list[tuple[str, int, int]] = dataclasses.field(default_factory=list)

    def sync(self, step: str) -> None:
        result = accounting.sync(self.ledger, self.pods, self.policy)
        self.ledger = result.ledger
        self.pods = [
            dataclasses.replace(p, tracking_finalizer=False)
            if p.uid in result.remove_finalizer
            else p
            for p in self.pods
        ]
        # A deleted pod whose kubelet is done and that no finalizer holds disappears.
        self.pods = [
            p for p in self.pods if not (p.deleting and p.terminal and not p.tracking_finalizer)
        ]
        self.history.append((step, self.ledger.failed, self.ledger.succeeded))
        if self.ledger.condition is None:
            self.replace()

    def replace(self) -> None:
        active = sum(accounting.is_active(p) for p in self.pods)
        terminating = sum(accounting.is_terminating(p) for p in self.pods)
        for _ in range(
            accounting.pods_to_create(
                self.policy,
                active=active,
                terminating=terminating,
                succeeded=self.ledger.succeeded,
                suspended=self.suspended,
            )
        ):
            self.created += 1
            self.pods.append(accounting.PodFacts(uid=f"pod-{self.created}", phase="Running"))

    def running(self) -> accounting.PodFacts:
        (pod,) = [p for p in self.pods if accounting.is_active(p)]
        return pod

    def update(self, uid: str, **changes: Any) -> None:
        self.pods = [dataclasses.replace(p, **changes) if p.uid == uid else p for p in self.pods]

    def suspend_and_resume(self, *, exit_code: int) -> None:
        """Kueue sets spec.suspend: the controller drops the finalizer, then DELETEs the pod."""
        uid = self.running().uid
        self.suspended = True
        self.update(uid, tracking_finalizer=False)
        self.update(uid, deleting=True)
        self.sync("suspend")
        self.update(uid, **_terminal(exit_code))
        self.sync("terminal")
        self.suspended = False
        self.sync("resume")

    def preempt(self, *, exit_code: int) -> None:
        """kube-scheduler: DisruptionTarget, DELETE with grace; the kubelet ends the pod later."""
        uid = self.running().uid
        self.update(uid, conditions=(("DisruptionTarget", "True"),), deleting=True)
        self.sync("delete")
        self.update(uid, **_terminal(exit_code))
        self.sync("terminal")


def _terminal(exit_code: int) -> dict[str, Any]:
    return {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "exit_codes": (("main", exit_code),),
    }


def _start(kind: str) -> Cluster:
    cluster = Cluster(_policy(kind))
    cluster.replace()
    return cluster


@pytest.mark.parametrize(
    ("kind", "exit_code"),
    [
        ("default", 143),  # row 1
        ("default", 0),  # row 2 ...
        ("Failed", 0),
        ("Failed+pFP", 0),
        ("Indexed", 0),
        ("Failed+pFP", 143),  # row 3
    ],
)
def test_suspended_pods_are_never_counted(kind: str, exit_code: int) -> None:
    cluster = _start(kind)
    for _ in range(3):
        cluster.suspend_and_resume(exit_code=exit_code)
    assert all(failed == 0 and succeeded == 0 for _, failed, succeeded in cluster.history)
    assert cluster.ledger.condition is None
    assert cluster.created == 4  # a new pod after each resume, the Job goes on


def test_preemption_default_policy_counts_failed_at_delete_time_and_exhausts_backoff() -> None:
    """Row 4: 'scheduler preemption x2, 143, default -> 1, then 2 (at delete time); Failed'."""
    cluster = _start("default")
    cluster.preempt(exit_code=143)
    assert cluster.history[:2] == [("delete", 1, 0), ("terminal", 1, 0)]
    cluster.preempt(exit_code=143)
    assert cluster.history[2:] == [("delete", 2, 0), ("terminal", 2, 0)]
    assert cluster.ledger.condition == accounting.Finished(
        "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    )


def test_preemption_with_failed_replacement_and_ignore_rule_is_never_counted() -> None:
    """Row 5: 'scheduler preemption x3, 143, Failed + pFP -> absent; no end'."""
    cluster = _start("Failed+pFP")
    for _ in range(3):
        cluster.preempt(exit_code=143)
    assert all(failed == 0 and succeeded == 0 for _, failed, succeeded in cluster.history)
    assert cluster.ledger.condition is None
    assert cluster.created == 4


def test_preemption_with_failed_replacement_without_rule_counts_when_terminal() -> None:
    """Row 6: 'scheduler preemption x2, 143, Failed, no pFP -> 1, then 2 (when terminal)'."""
    cluster = _start("Failed")
    cluster.preempt(exit_code=143)
    assert cluster.history[:2] == [("delete", 0, 0), ("terminal", 1, 0)]
    cluster.preempt(exit_code=143)
    assert cluster.history[2:] == [("delete", 1, 0), ("terminal", 2, 0)]
    assert cluster.ledger.condition is not None
    assert cluster.ledger.condition.reason == "BackoffLimitExceeded"


def test_preempted_pod_exiting_zero_default_policy_counts_failed_and_is_replaced() -> None:
    """Row 7: 'scheduler preemption, exit 0, default -> failed 1; no end (replacement)'."""
    cluster = _start("default")
    cluster.preempt(exit_code=0)
    assert cluster.ledger == accounting.Ledger(failed=1, succeeded=0, condition=None)
    assert cluster.created == 2


@pytest.mark.parametrize("kind", ["Failed+pFP", "Failed"])
def test_preempted_pod_exiting_zero_with_failed_replacement_completes_the_job(kind: str) -> None:
    """Rows 8 and 9: 'scheduler preemption, exit 0 -> succeeded 1; Complete, CompletionsReached'."""
    cluster = _start(kind)
    cluster.preempt(exit_code=0)
    assert cluster.history == [("delete", 0, 0), ("terminal", 0, 1)]
    assert cluster.ledger.condition == accounting.Finished(
        "Complete", "CompletionsReached", "Reached expected number of succeeded pods"
    )
    assert cluster.created == 1  # nothing replaced a pod that completed the Job


@pytest.mark.parametrize(("kind", "replaced_at_once"), [("default", True), ("Failed+pFP", False)])
def test_replacement_waits_for_the_old_pod_only_with_failed_policy(
    kind: str, replaced_at_once: bool
) -> None:
    cluster = _start(kind)
    uid = cluster.running().uid
    cluster.update(uid, conditions=(("DisruptionTarget", "True"),), deleting=True)
    cluster.sync("delete")
    assert (cluster.created == 2) is replaced_at_once
    cluster.update(uid, **_terminal(143))
    cluster.sync("terminal")
    assert cluster.created == 2


def test_fail_job_rule_on_exit_code_fails_the_job_with_upstream_message() -> None:
    policy = accounting.JobPolicy.from_job(
        {
            "spec": {
                "podFailurePolicy": {
                    "rules": [
                        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}
                    ]
                }
            }
        }
    )
    pod = accounting.PodFacts(
        uid="u", name="p", namespace="ns", phase="Failed", exit_codes=(("main", 3),)
    )
    result = accounting.sync(accounting.Ledger(), [pod], policy)
    assert result.ledger.condition == accounting.Finished(
        "Failed",
        "PodFailurePolicy",
        "Container main for pod ns/p failed with exit code 3 matching FailJob rule at index 0",
    )
    assert result.ledger.failed == 1
    assert result.remove_finalizer == ("u",)


def test_from_pod_reads_the_fields_the_controller_reads() -> None:
    facts = accounting.PodFacts.from_pod(
        {
            "metadata": {
                "uid": "u1",
                "name": "p",
                "namespace": "ns",
                "finalizers": ["batch.kubernetes.io/job-tracking"],
                "deletionTimestamp": "2026-12-02T11:23:38Z",
            },
            "status": {
                "phase": "Failed",
                "conditions": [{"type": "DisruptionTarget", "status": "True"}],
                "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 143}}}],
            },
        }
    )
    assert facts == accounting.PodFacts(
        uid="u1",
        name="p",
        namespace="ns",
        phase="Failed",
        tracking_finalizer=True,
        deleting=True,
        conditions=(("DisruptionTarget", "True"),),
        exit_codes=(("main", 143),),
    )


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"podReplacementPolicy": "Sometimes"}, "spec.podReplacementPolicy"),
        ({"podFailurePolicy": {"rules": [{"action": "Retry"}]}}, "rules[0].action"),
        ({"podFailurePolicy": {"rules": [{"action": "Ignore"}]}}, "rules[0]"),
    ],
)
def test_bad_job_spec_names_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(accounting.InvalidJob, match=field.replace("[", r"\[").replace("]", r"\]")):
        accounting.JobPolicy.from_job({"spec": spec})
