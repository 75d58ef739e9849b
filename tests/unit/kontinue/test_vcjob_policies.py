"""kontinue/vcjob_policies.py: ``applied`` copies Volcano's ``applyPolicies``; ``safe`` makes both
events of a checkpointed preemption end in ``SyncJob`` for every task while every other event
(and exit code) keeps the user's action; ``risks`` names the policy that would hurt."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from kontinue import vcjob_policies as vp

Obj = dict[str, Any]
EVENTS = ["PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "TaskFailed"]
ACTIONS = ["RestartJob", "RestartTask", "TerminateJob", "AbortJob", "CompleteJob"]


def _spec(job: list[Obj], *tasks: tuple[str, list[Obj]]) -> Obj:
    spec: Obj = {"tasks": [{"name": n, "replicas": 1, "policies": p} for n, p in tasks]}
    if job:
        spec["policies"] = job
    return spec


def _safe_spec(spec: Obj) -> Obj:
    rewrite = vp.safe(spec)
    out = dict(spec)
    if rewrite.job is not None:
        out["policies"] = rewrite.job
    out["tasks"] = [
        {**t, "policies": rewrite.tasks.get(i, t.get("policies"))}
        for i, t in enumerate(spec["tasks"])
    ]
    return out


def test_applied_reads_task_policies_first_then_the_job_and_the_first_match_wins() -> None:
    spec = _spec(
        [{"event": "PodFailed", "action": "TerminateJob"}, {"exitCode": 3, "action": "AbortJob"}],
        ("a", [{"events": ["PodFailed", "Unknown"], "action": "RestartTask"}]),
        ("b", [{"exitCode": 3, "action": "RestartJob"}]),
    )
    assert vp.applied(spec, "a", "PodFailed", 1).action == "RestartTask"
    assert vp.applied(spec, "b", "PodFailed", 3).action == "RestartJob"
    assert vp.applied(spec, "b", "PodFailed", 1).action == "TerminateJob"
    assert vp.applied(spec, "b", "PodEvicted").action == vp.SYNC_JOB  # nothing matches
    star = _spec([{"event": "*", "action": "RestartJob"}], ("a", []))
    assert vp.applied(star, "a", "PodEvicted").action == "RestartJob"


def test_the_issue_5885_and_2560_shapes_are_made_safe() -> None:
    spec = _spec(
        [
            {"event": "PodEvicted", "action": "RestartJob"},
            {"event": "PodFailed", "action": "TerminateJob"},
        ],
        ("train", []),
    )
    assert len(vp.risks(spec)) == 2
    safe = _safe_spec(spec)
    # the job's list keeps only actions Volcano's ValidatingAdmissionPolicy allows there
    assert safe["policies"] == [{"event": "PodFailed", "action": "TerminateJob"}]
    assert safe["tasks"][0]["policies"] == [{"exitCode": 143, "action": "SyncJob"}]
    assert vp.risks(safe) == []
    # a real failure still terminates
    assert vp.applied(safe, "train", "PodFailed", 1).action == "TerminateJob"


def test_a_star_policy_keeps_every_other_event() -> None:
    spec = _spec([{"event": "*", "action": "RestartJob", "timeout": "1m"}], ("t", []))
    safe = _safe_spec(spec)
    assert safe["tasks"][0]["policies"] == [vp.PREEMPTION_POLICY]
    (rewritten,) = safe["policies"]
    assert rewritten["timeout"] == "1m"
    assert "event" not in rewritten
    assert set(rewritten["events"]) == set(vp.OTHER_EVENTS)
    assert vp.risks(safe) == []


def test_a_users_own_exit_code_143_policy_is_kept_and_named() -> None:
    spec = _spec([{"exitCode": 143, "action": "RestartJob"}], ("t", []))
    assert vp.safe(spec) == vp.Rewrite(None, {}, [])
    [risk] = vp.risks(spec)
    assert "exitCode 143 -> RestartJob" in risk
    assert "#2560" in risk


def test_lists_with_nothing_about_preemption_are_unchanged() -> None:
    for policies in (
        [],
        [{"exitCode": 1, "action": "RestartJob"}],
        [{"event": "TaskCompleted", "action": "CompleteJob"}],
    ):
        assert vp.safe(_spec(policies, ("t", policies))) == vp.Rewrite(None, {}, [])


def test_the_job_list_never_gets_an_action_outside_volcanos_admission_policy() -> None:
    """volcano-sh/volcano installer/helm/chart/volcano/policy/jobs-validating.yaml
    ``validActions`` (checked on spec.policies only)."""
    valid = {
        "AbortJob",
        "RestartJob",
        "RestartTask",
        "RestartPod",
        "TerminateJob",
        "CompleteJob",
        "ResumeJob",
    }
    for job in (
        [{"event": "PodFailed", "action": "AbortJob"}],
        [{"event": "*", "action": "RestartJob"}],
    ):
        rewrite = vp.safe(
            _spec(job, ("a", []), ("b", [{"event": "PodFailed", "action": "RestartTask"}]))
        )
        assert rewrite.job is not None or job == _spec(job)["policies"]
        assert all(p["action"] in valid for p in (rewrite.job or job))
        assert sorted(rewrite.tasks) == [0, 1]


@pytest.mark.parametrize("seed", range(60))
def test_safe_never_changes_a_real_failure_and_always_spares_a_preemption(seed: int) -> None:
    """Every combination drawn: for every task, exit 143 and PodEvicted end in SyncJob, and every
    other (event, exit code) gets exactly the action it got before."""
    import random

    rng = random.Random(seed)

    def policy_list() -> list[Obj]:
        out: list[Obj] = []
        used: set[str] = set()
        for _ in range(rng.randint(0, 3)):
            if rng.random() < 0.3:
                out.append({"exitCode": rng.choice([1, 2, 137]), "action": rng.choice(ACTIONS)})
                continue
            events = [e for e in rng.sample(EVENTS, rng.randint(1, 2)) if e not in used]
            if not events:
                continue
            used.update(events)
            key = {"event": events[0]} if len(events) == 1 else {"events": events}
            out.append({**key, "action": rng.choice(ACTIONS)})
        if rng.random() < 0.1:
            out = [{"event": "*", "action": rng.choice(ACTIONS)}]
        return out

    spec = _spec(policy_list(), ("a", policy_list()), ("b", policy_list()))
    safe = _safe_spec(spec)
    assert vp.risks(safe) == []
    for task, event, code in itertools.product(
        ("a", "b"), [e for e in EVENTS if e != "PodEvicted"], (0, 1, 2, 137)
    ):
        if event != "PodFailed" and code:
            continue  # only PodFailed carries an exit code
        assert (
            vp.applied(safe, task, event, code).action == vp.applied(spec, task, event, code).action
        ), (task, event, code, spec, safe)


def test_an_unnamed_task_is_judged_by_the_name_volcano_gives_it() -> None:
    """Volcano's jobs/mutate names an unnamed task ``default<index>``; the order of the two
    webhooks must not matter."""
    spec: Obj = {
        "tasks": [{"replicas": 1, "policies": [{"event": "PodFailed", "action": "AbortJob"}]}]
    }
    assert vp.applied(spec, "default0", "PodFailed", 143).action == "AbortJob"
    rewrite = vp.safe(spec)
    assert rewrite.tasks[0][0] == vp.PREEMPTION_POLICY
