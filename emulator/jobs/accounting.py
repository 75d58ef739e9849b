"""How the batch/v1 Job controller counts a Job's pods as failed or succeeded (v1.36, pure).

Copied from kubernetes/kubernetes ``pkg/controller/job/job_controller.go`` (``isPodFailed``,
``onlyReplaceFailedPods``, ``canRemoveFinalizer``, ``trackJobStatusAndRemoveFinalizers``,
``manageJob``) and ``pkg/controller/job/pod_failure_policy.go`` (``matchPodFailurePolicy``), and
checked against the measurements of a real v1.36.2 control plane in
tests/fixtures/cluster/job-accounting.md (every row of its table is a test in
tests/unit/emulator/test_job_accounting.py). The facts that matter for preemption:

- a pod is counted only while it carries the ``batch.kubernetes.io/job-tracking`` finalizer; the
  count happens when the controller removes it. On suspend the controller removes the finalizer
  *before* deleting the pod, so pods deleted for a suspension are never counted;
- default ``podReplacementPolicy`` (``TerminatingOrFailed``): a deleted pod that has not Succeeded
  counts as failed at once, while it is still running -- a scheduler preemption uses up
  ``backoffLimit``, and a preempted pod that then exits 0 has already been counted failed;
- ``podReplacementPolicy: Failed`` (implied by a ``podFailurePolicy``): only the terminal phase
  counts, terminating pods hold back their replacement, and a ``podFailurePolicy`` rule is
  evaluated on the terminal pod (``Ignore`` on ``DisruptionTarget`` -> never counted). A preempted
  pod that exits 0 is Succeeded and counts toward completions.

Limits: no ``backoffLimitPerIndex``/``FailIndex``, no ``successPolicy`` (the pod-creation backoff
timing is emulator/jobs/backoff.py), no ``activeDeadlineSeconds``; restartPolicy ``OnFailure``
restart counting is not modelled.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kontinue import keys

REPLACE_TERMINATING_OR_FAILED = "TerminatingOrFailed"
REPLACE_FAILED = "Failed"
DEFAULT_BACKOFF_LIMIT = 6

REASON_BACKOFF_LIMIT = "BackoffLimitExceeded"
MESSAGE_BACKOFF_LIMIT = "Job has reached the specified backoff limit"
REASON_COMPLETIONS = "CompletionsReached"
MESSAGE_COMPLETIONS = "Reached expected number of succeeded pods"
REASON_POD_FAILURE_POLICY = "PodFailurePolicy"


class InvalidJob(ValueError):
    """A Job spec field this module cannot interpret; the message names the field."""


class Count(enum.Enum):
    """What one sync does with one pod."""

    WAIT = "wait"  # keep the finalizer, decide later (not terminal yet)
    SUCCEEDED = "succeeded"  # remove the finalizer, succeeded += 1
    FAILED = "failed"  # remove the finalizer, failed += 1
    IGNORED = "ignored"  # remove the finalizer, counted nowhere (podFailurePolicy Ignore)
    UNTRACKED = "untracked"  # no tracking finalizer: already counted, or deleted for a suspend


@dataclasses.dataclass(frozen=True)
class Rule:
    """One ``podFailurePolicy`` rule: action plus exit-code or pod-condition requirement."""

    action: str
    exit_operator: str | None = None
    exit_values: frozenset[int] = frozenset()
    exit_container: str | None = None
    conditions: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class JobPolicy:
    """The Job spec fields that decide counting, replacement and the finished condition."""

    replacement: str = REPLACE_TERMINATING_OR_FAILED
    rules: tuple[Rule, ...] | None = None  # None: no podFailurePolicy at all
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    completions: int | None = 1
    parallelism: int = 1

    @property
    def only_replace_failed(self) -> bool:
        """``onlyReplaceFailedPods``: ``podReplacementPolicy: Failed`` or any podFailurePolicy."""
        return self.replacement == REPLACE_FAILED or self.rules is not None

    @classmethod
    def from_job(cls, job: Mapping[str, Any]) -> JobPolicy:
        """Read (and default like the apiserver) the policy of a ``batch/v1`` Job dict."""
        spec = job.get("spec") or {}
        rules = None
        if spec.get("podFailurePolicy") is not None:
            rules = tuple(
                _rule(raw, index=i)
                for i, raw in enumerate(spec["podFailurePolicy"].get("rules") or [])
            )
        replacement = spec.get("podReplacementPolicy") or (
            REPLACE_FAILED if rules is not None else REPLACE_TERMINATING_OR_FAILED
        )
        if replacement not in (REPLACE_FAILED, REPLACE_TERMINATING_OR_FAILED):
            raise InvalidJob(f"spec.podReplacementPolicy: unsupported value {replacement!r}")
        parallelism = spec.get("parallelism")
        completions = spec.get("completions")
        if completions is None and parallelism is None:
            completions, parallelism = 1, 1
        return cls(
            replacement=replacement,
            rules=rules,
            backoff_limit=int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)),
            completions=completions,
            parallelism=1 if parallelism is None else int(parallelism),
        )


def _rule(raw: Mapping[str, Any], *, index: int) -> Rule:
    where = f"spec.podFailurePolicy.rules[{index}]"
    action = raw.get("action")
    if action not in ("Ignore", "Count", "FailJob", "FailIndex"):
        raise InvalidJob(f"{where}.action: unsupported value {action!r}")
    on_exit = raw.get("onExitCodes")
    if on_exit is not None:
        operator = on_exit.get("operator")
        if operator not in ("In", "NotIn"):
            raise InvalidJob(f"{where}.onExitCodes.operator: unsupported value {operator!r}")
        return Rule(
            action=action,
            exit_operator=operator,
            exit_values=frozenset(int(v) for v in on_exit.get("values") or []),
            exit_container=on_exit.get("containerName"),
        )
    patterns = raw.get("onPodConditions")
    if not patterns:
        raise InvalidJob(f"{where}: needs onExitCodes or onPodConditions")
    return Rule(
        action=action,
        conditions=tuple((p["type"], p.get("status", "True")) for p in patterns),
    )


@dataclasses.dataclass(frozen=True)
class PodFacts:
    """The pod fields the Job controller reads."""

    uid: str
    name: str = ""
    namespace: str = ""
    phase: str = "Pending"
    tracking_finalizer: bool = True
    deleting: bool = False
    conditions: tuple[tuple[str, str], ...] = ()
    exit_codes: tuple[tuple[str, int], ...] = ()  # (container, code) of terminated containers
    init_exit_codes: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodFacts:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}

        def codes(statuses: Iterable[Mapping[str, Any]] | None) -> tuple[tuple[str, int], ...]:
            found = []
            for cs in statuses or []:
                terminated = (cs.get("state") or {}).get("terminated")
                if terminated is not None:
                    found.append((cs["name"], int(terminated["exitCode"])))
            return tuple(found)

        return cls(
            uid=meta.get("uid", ""),
            name=meta.get("name", ""),
            namespace=meta.get("namespace", ""),
            phase=status.get("phase") or "Pending",
            tracking_finalizer=keys.JOB_TRACKING_FINALIZER in (meta.get("finalizers") or []),
            deleting=meta.get("deletionTimestamp") is not None,
            conditions=tuple((c["type"], c["status"]) for c in status.get("conditions") or []),
            exit_codes=codes(status.get("containerStatuses")),
            init_exit_codes=codes(status.get("initContainerStatuses")),
        )

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def is_active(pod: PodFacts) -> bool:
    """``controller.FilterActivePods``: not terminal and not being deleted."""
    return not pod.terminal and not pod.deleting


def is_terminating(pod: PodFacts) -> bool:
    """``controller.CountTerminatingPods``: being deleted and not yet terminal."""
    return pod.deleting and not pod.terminal


def is_pod_failed(pod: PodFacts, policy: JobPolicy) -> bool:
    """``isPodFailed``: Failed phase, or (default policy only) deleted before Succeeding."""
    if pod.phase == "Failed":
        return True
    if policy.only_replace_failed:
        return False
    return pod.deleting and pod.phase != "Succeeded"


def _exit_match(rule: Rule, codes: Sequence[tuple[str, int]]) -> bool:
    for name, code in codes:
        if code == 0 or (rule.exit_container is not None and rule.exit_container != name):
            continue
        if (code in rule.exit_values) == (rule.exit_operator == "In"):
            return True
    return False


def match_pod_failure_policy(pod: PodFacts, rules: Sequence[Rule]) -> Rule | None:
    """``matchPodFailurePolicy``: the first rule that matches the failed pod, if any.

    Exit codes: regular containers first, then init containers; exit code 0 never matches.
    Conditions: any pod condition with the pattern's type and status (default "True").
    """
    for rule in rules:
        if rule.exit_operator is not None:
            if _exit_match(rule, pod.exit_codes) or _exit_match(rule, pod.init_exit_codes):
                return rule
        elif any(c in rule.conditions for c in pod.conditions):
            return rule
    return None


def classify(pod: PodFacts, policy: JobPolicy, *, finishing: Finished | None = None) -> Count:
    """What one controller sync does with ``pod`` (``trackJobStatusAndRemoveFinalizers``).

    ``finishing``: the Job's finished condition if it has one already; then every finalizer goes,
    and (for a failing Job only) every pod that has not Succeeded counts as failed.
    """
    if not pod.tracking_finalizer:
        return Count.UNTRACKED
    if pod.phase == "Succeeded":
        return Count.SUCCEEDED
    failed = is_pod_failed(pod, policy) or (finishing is not None and finishing.type == "Failed")
    if not failed:
        return Count.WAIT if finishing is None else Count.IGNORED
    if policy.rules is not None:
        rule = match_pod_failure_policy(pod, policy.rules)
        if rule is not None and rule.action == "Ignore":
            return Count.IGNORED
    return Count.FAILED


def fail_job_message(pod: PodFacts, policy: JobPolicy) -> str | None:
    """The Job failure message when a failed pod matches a FailJob rule (``getFailJobMessage``)."""
    if policy.rules is None or not is_pod_failed(pod, policy):
        return None
    rule = match_pod_failure_policy(pod, policy.rules)
    if rule is None or rule.action != "FailJob":
        return None
    index = policy.rules.index(rule)
    if rule.exit_operator is not None:
        name, code = next(
            (n, c)
            for n, c in (*pod.exit_codes, *pod.init_exit_codes)
            if c != 0
            and (rule.exit_container in (None, n))
            and ((c in rule.exit_values) == (rule.exit_operator == "In"))
        )
        return (
            f"Container {name} for pod {pod.namespace}/{pod.name} failed with exit code {code} "
            f"matching FailJob rule at index {index}"
        )
    condition = next(c for c in pod.conditions if c in rule.conditions)
    return (
        f"Pod {pod.namespace}/{pod.name} has condition {condition[0]} matching FailJob rule "
        f"at index {index}"
    )


def pods_to_create(
    policy: JobPolicy, *, active: int, terminating: int, succeeded: int, suspended: bool
) -> int:
    """How many new pods ``manageJob`` creates now (ignoring the pod-failure backoff delay).

    With ``podReplacementPolicy: Failed`` a terminating pod holds back its replacement until it is
    terminal (or gone): two incarnations never hold the same GPUs or race on a checkpoint.
    """
    if suspended:
        return 0
    if policy.completions is None:
        want = active if succeeded > 0 else policy.parallelism
    else:
        want = max(0, min(policy.completions - succeeded, policy.parallelism))
    held = terminating if policy.only_replace_failed else 0
    return max(0, want - held - active)


@dataclasses.dataclass(frozen=True)
class Finished:
    type: str  # "Complete" | "Failed"
    reason: str
    message: str


def finished(
    policy: JobPolicy, *, failed: int, succeeded: int, active: int, fail_job: str | None = None
) -> Finished | None:
    """The terminal Job condition these counters call for, if any (``syncJob``)."""
    if fail_job is not None:
        return Finished("Failed", REASON_POD_FAILURE_POLICY, fail_job)
    if failed > policy.backoff_limit:
        return Finished("Failed", REASON_BACKOFF_LIMIT, MESSAGE_BACKOFF_LIMIT)
    if policy.completions is None:
        done = succeeded > 0 and active == 0
    else:
        done = succeeded >= policy.completions
    if done:
        return Finished("Complete", REASON_COMPLETIONS, MESSAGE_COMPLETIONS)
    return None


@dataclasses.dataclass(frozen=True)
class Ledger:
    """The Job's counters, as ``status.failed``/``status.succeeded`` (0 = absent)."""

    failed: int = 0
    succeeded: int = 0
    condition: Finished | None = None


@dataclasses.dataclass(frozen=True)
class SyncResult:
    ledger: Ledger
    remove_finalizer: tuple[str, ...]  # pod UIDs whose tracking finalizer to remove now


def sync(ledger: Ledger, pods: Sequence[PodFacts], policy: JobPolicy) -> SyncResult:
    """One controller sync over the Job's existing pods: count, pick finalizers, decide the end.

    The caller removes the listed finalizers (which makes the counts stick: a pod without the
    finalizer is never looked at again) and writes the ledger to ``status``.
    """
    failed, succeeded = ledger.failed, ledger.succeeded
    remove: list[str] = []
    fail_job = None
    for pod in pods:
        if fail_job is None and pod.tracking_finalizer:
            message = fail_job_message(pod, policy)
            fail_job = message
        verdict = classify(pod, policy, finishing=ledger.condition)
        if verdict in (Count.WAIT, Count.UNTRACKED):
            continue
        remove.append(pod.uid)
        if verdict is Count.SUCCEEDED:
            succeeded += 1
        elif verdict is Count.FAILED:
            failed += 1
    active = sum(1 for pod in pods if is_active(pod))
    condition = ledger.condition or finished(
        policy, failed=failed, succeeded=succeeded, active=active, fail_job=fail_job
    )
    return SyncResult(Ledger(failed, succeeded, condition), tuple(remove))
