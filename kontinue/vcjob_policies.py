"""Pure: what a Volcano Job's lifecycle policies do with a checkpointed preemption, and the
policies that make it harmless without touching what they say about real failures.

Read from volcano-sh/volcano ``ed72c7c815a9`` (v1.16.0-alpha.1-42):

- A preempted (or reclaimed) pod of an opted-in vcjob raises **two** events in the job
  controller (``pkg/controllers/job/job_controller_handler.go``): the workload saves on SIGTERM
  and exits 143 (docs/workload-contract.md), so the kubelet ends the pod ``Failed`` and
  ``updatePod`` raises ``PodFailed`` with ``ExitCode`` from ``ContainerStatuses[0]``; once the
  pod object is gone ``deletePod`` raises ``PodEvicted`` (``OutOfSync`` instead for pods the
  controller itself marked ``volcano.sh/controller-out-of-sync``).
- ``applyPolicies`` (``pkg/controllers/job/job_controller_util.go``) looks at the task's
  policies first, then the job's; within each list the **first** policy whose ``event``/
  ``events`` names the event (or ``*``) or whose ``exitCode`` equals the pod's exit code wins.
  No match means ``SyncJob``. A request older than ``status.version`` is ``SyncJob`` too.
- Every restart action consumes a retry: ``RestartJob`` via ``KillJob`` and ``RestartTask``/
  ``RestartPod``/``RestartPartition`` via ``KillTarget`` all do ``status.RetryCount++``
  (``pkg/controllers/job/state/running.go``, ``pending.go``), and ``restartingUpdateStatus``
  (``state/restarting.go``) fails the job once ``retryCount >= maxRetry`` (default 3, set by
  ``pkg/webhooks/admission/jobs/mutate``). So under ``PodEvicted -> RestartJob`` the third
  checkpointed preemption fails the job (volcano-sh/volcano issue #2560); and a ``PodFailed ->
  TerminateJob`` policy terminates a preempted job (issue #5885).
- ``SyncJob`` (``state/running.go`` default branch -> ``syncJob`` in
  ``pkg/controllers/job/job_controller_actions.go``) recreates the missing pods under their old
  names, counts a terminating pod as ``terminating`` (never ``failed``) and leaves
  ``retryCount`` alone: a preemption handled by ``SyncJob`` costs nothing.

So :func:`safe` rewrites the policy lists (the job's and every task's) so that both events of a
preemption end in ``SyncJob``:

1. ``PodEvicted`` is removed from every policy (a policy left with no event is dropped; ``*``
   becomes the list of every other event a policy may name,
   ``pkg/webhooks/admission/jobs/validate/util.go`` ``policyEventMap``). ``PodEvicted`` is
   raised only when a pod object disappears without the controller having deleted it — never
   by a pod failing on its own — so no policy for a real failure changes.
2. Where a task's exit 143 would still reach a ``PodFailed`` policy (its own or the job's),
   ``{exitCode: 143, action: SyncJob}`` goes **first** in that task's list, ahead of the user's
   policies (see :func:`safe` for why the task's list). Only exit code 143 is caught; exit 1
   (or any other code) still reaches the user's ``PodFailed`` policy exactly as before.
   ``SyncJob`` is not offered for *event* policies, but Volcano's webhook checks the action of
   event policies only (``validatePolicies``: the ``exitCode`` branch checks that the code is
   not 0 and not duplicated), the CRD leaves ``action`` a free string, and ``applyPolicies``
   hands an exit-code match's action to the state machine as is, where ``SyncJob`` is what
   every state does when no policy matches.

``maxRetry`` is never changed: retries are spent only by real failures, as the user set them.
A user's own ``exitCode: 143`` policy is kept (the user said what 143 means); :func:`risks`
names it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]

CONTRACT_EXIT_CODE = 143
"""The workload contract's exit after a save on SIGTERM (docs/workload-contract.md)."""
SYNC_JOB = "SyncJob"
POD_FAILED = "PodFailed"
POD_EVICTED = "PodEvicted"
ANY_EVENT = "*"
OTHER_EVENTS = ("PodFailed", "PodPending", "Unknown", "TaskCompleted", "TaskFailed", "JobUpdated")
"""``policyEventMap``'s externally allowed events other than ``*`` and ``PodEvicted``."""
PREEMPTION_POLICY: Obj = {"exitCode": CONTRACT_EXIT_CODE, "action": SYNC_JOB}
DEFAULT_MAX_RETRY = 3


def events_of(policy: Mapping[str, Any]) -> list[str]:
    """``getEventlist``: ``events`` then ``event``."""
    events = policy.get("events")
    found = [str(e) for e in events] if isinstance(events, list) else []
    if policy.get("event"):
        found.append(str(policy["event"]))
    return found


@dataclasses.dataclass(frozen=True)
class Match:
    """The action ``applyPolicies`` picks for one event, and the policy that picked it."""

    action: str
    policy: Obj | None
    scope: str  # "spec.policies" or "task <name>"


def _tasks(spec: Mapping[str, Any]) -> list[Any]:
    tasks = spec.get("tasks")
    return tasks if isinstance(tasks, list) else []


def _policies(owner: Mapping[str, Any]) -> list[Any]:
    policies = owner.get("policies")
    return policies if isinstance(policies, list) else []


def task_name(task: Mapping[str, Any], index: int) -> str:
    """A task's name; ``default<index>`` when unset, as Volcano's jobs/mutate webhook names it
    (``pkg/webhooks/admission/jobs/mutate``), whichever webhook runs first."""
    return str(task.get("name") or f"default{index}")


def _task(spec: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for index, task in enumerate(_tasks(spec)):
        if isinstance(task, Mapping) and task_name(task, index) == name:
            return task
    return {}


def applied(spec: Mapping[str, Any], task: str, event: str, exit_code: int = 0) -> Match:
    """``applyPolicies`` for a pod event of ``task`` (timeouts and ``PodPending`` aside)."""
    lists = [
        (f"task {task}", _policies(_task(spec, task))),
        ("spec.policies", _policies(spec)),
    ]
    for scope, policies in lists:
        for policy in policies:
            if not isinstance(policy, Mapping):
                continue
            names = events_of(policy)
            if names and (event in names or ANY_EVENT in names):
                return Match(str(policy.get("action") or SYNC_JOB), dict(policy), scope)
            code = policy.get("exitCode")
            if code is not None and code != 0 and code == exit_code:
                return Match(str(policy.get("action") or SYNC_JOB), dict(policy), scope)
    return Match(SYNC_JOB, None, "")


def _describe(policy: Mapping[str, Any] | None) -> str:
    if policy is None:
        return "no policy"
    if policy.get("exitCode") is not None:
        what = f"exitCode {policy['exitCode']}"
    else:
        what = "/".join(events_of(policy))
    return f"{what} -> {policy.get('action') or SYNC_JOB}"


def task_names(spec: Mapping[str, Any]) -> list[str]:
    return [task_name(t, i) for i, t in enumerate(_tasks(spec)) if isinstance(t, Mapping)]


def risks(spec: Mapping[str, Any]) -> list[str]:
    """Why checkpointed preemptions would fail, end or use up this vcjob, one line per policy.

    Empty when both events of a preemption (``PodFailed`` with exit 143, then ``PodEvicted``)
    end in ``SyncJob`` for every task.
    """
    max_retry = spec.get("maxRetry") or DEFAULT_MAX_RETRY
    found: list[str] = []
    for task in task_names(spec):
        for event, code in ((POD_FAILED, CONTRACT_EXIT_CODE), (POD_EVICTED, 0)):
            match = applied(spec, task, event, code)
            if match.action == SYNC_JOB:
                continue
            what = f"policy {_describe(match.policy)} ({match.scope})"
            if match.action.startswith("Restart"):
                effect = (
                    f"each preemption uses one of maxRetry {max_retry} retries, so the "
                    f"{max_retry}th fails the vcjob (volcano-sh/volcano issue #2560)"
                )
            else:
                effect = f"a preemption ends the vcjob ({match.action})"
            seen = "exits 143 (PodFailed)" if event == POD_FAILED else "is PodEvicted"
            line = f"{what}: a preempted pod {seen}, and {effect}"
            if line not in found:
                found.append(line)
    return found


def _without_eviction(policy: Obj) -> Obj | None:
    """The policy with ``PodEvicted`` (and ``*``) taken out; ``None`` when no event is left."""
    names = events_of(policy)
    if not names:
        return policy
    if ANY_EVENT in names:
        names = list(OTHER_EVENTS)
    kept = [e for e in dict.fromkeys(names) if e != POD_EVICTED]
    if kept == events_of(policy):
        return policy
    if not kept:
        return None
    rest = {k: v for k, v in policy.items() if k not in ("event", "events")}
    return {**rest, "events": kept}


def without_eviction(policies: Sequence[Obj]) -> tuple[list[Obj], list[str]]:
    """One policy list with ``PodEvicted`` taken out of every policy, and what changed."""
    changes: list[str] = []
    out: list[Obj] = []
    for policy in policies:
        if not isinstance(policy, Mapping):
            out.append(policy)
            continue
        kept = _without_eviction(dict(policy))
        if kept is None:
            changes.append(f"dropped {_describe(policy)}")
        elif kept != policy:
            changes.append(f"{_describe(policy)} became {_describe(kept)}")
        if kept is not None:
            out.append(kept)
    return out, changes


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """The preemption-safe policies of one vcjob: the job's list (``None``: unchanged), each
    task's list by index (only those that change), and what changed, in words."""

    job: list[Obj] | None
    tasks: dict[int, list[Obj]]
    changes: list[str]


def safe(spec: Mapping[str, Any]) -> Rewrite:
    """The vcjob's policies made preemption-safe (module docstring): ``PodEvicted`` out of every
    list, then ``{exitCode: 143, action: SyncJob}`` first in the list of each task whose exit 143
    would still reach a ``PodFailed`` (or former ``*``) policy. The rule goes into the *task's*
    list — tried before the job's (``applyPolicies``) — because Volcano's optional
    ValidatingAdmissionPolicy (installer/helm/chart/volcano/policy/jobs-validating.yaml,
    ``custom.vap_enable``) allows only its listed actions in ``spec.policies`` and reads no
    task's list. A user's own ``exitCode: 143`` policy that would match first is kept."""
    changes: list[str] = []
    job_list = _policies(spec)
    new_job, said = without_eviction(job_list)
    changes += [f"spec.policies: {c}" for c in said]
    rewritten: dict[str, Any] = {**spec, "policies": new_job}
    new_tasks: list[Any] = []
    task_changes: dict[int, list[Obj]] = {}
    for index, task in enumerate(_tasks(spec)):
        if not isinstance(task, Mapping):
            new_tasks.append(task)
            continue
        own = _policies(task)
        kept, said = without_eviction(own)
        name = task_name(task, index)
        changes += [f"task {name}: {c}" for c in said]
        if kept != own:
            task_changes[index] = kept
        new_tasks.append({**task, "policies": kept})
    rewritten["tasks"] = new_tasks
    for index, task in enumerate(new_tasks):
        if not isinstance(task, Mapping):
            continue
        match = applied(rewritten, task_name(task, index), POD_FAILED, CONTRACT_EXIT_CODE)
        if match.action == SYNC_JOB or (match.policy or {}).get("exitCode") is not None:
            continue
        task_changes[index] = [dict(PREEMPTION_POLICY), *task.get("policies", [])]
        changes.append(
            f"task {task.get('name') or index}: added {_describe(PREEMPTION_POLICY)} first"
        )
    return Rewrite(new_job if new_job != job_list else None, task_changes, changes)
