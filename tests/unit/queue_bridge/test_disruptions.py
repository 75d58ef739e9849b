"""The pod path's pure decisions: which pods count, how victims group into Checkpoints."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from kontinue import keys, lineage, optin
from kontinue.models import base, checkpoint, core
from kontinue.models import policy as policy_model
from queue_bridge import disruptions, settings
from tests import fixtures

OWNER = checkpoint.Lineage(namespace="team-a", owner_kind="Job", owner_name="low", owner_uid="u-1")
T0 = datetime.datetime(2026, 12, 2, 10, 33, 10, tzinfo=datetime.UTC)
OPTED_IN = optin.Decision(opted_in=True, reason="test", policy=policy_model.DEFAULT)


def _pod(name: str, *, reason: str, at: datetime.datetime, index: int | None = None) -> core.Pod:
    """The recorded victim of kube-scheduler preemption, renamed and re-timed."""
    raw: dict[str, Any] = json.loads(
        (fixtures.FIXTURES / "bridge/pod-disruption-preemption-by-scheduler.json").read_text()
    )
    raw["metadata"].update(name=name, uid=f"uid-{name}", namespace="team-a")
    annotations = raw["metadata"].setdefault("annotations", {})
    annotations[keys.LINEAGE_ANNOTATION] = lineage.annotation_value(OWNER)
    if index is not None:
        annotations[keys.JOB_COMPLETION_INDEX_ANNOTATION] = str(index)
    for condition in raw["status"]["conditions"]:
        if condition["type"] == keys.POD_CONDITION_DISRUPTION_TARGET:
            condition.update(reason=reason, lastTransitionTime=base.format_time(at))
    return core.Pod.model_validate(raw)


def _victim(name: str, *, seconds: float = 0, reason: str = "PreemptionByScheduler") -> Any:
    pod = _pod(name, reason=reason, at=T0 + datetime.timedelta(seconds=seconds))
    trigger = disruptions.pod_trigger(pod, decision=OPTED_IN)
    assert trigger is not None
    return disruptions.Disrupted(pod=pod, trigger=trigger, lineage=OWNER, policy=OPTED_IN.policy)  # type: ignore[arg-type]


def _open_checkpoint(name: str, *, phase: checkpoint.Phase, reason: str) -> checkpoint.Checkpoint:
    return checkpoint.Checkpoint(
        metadata=base.ObjectMeta(name=name, namespace="team-a", resource_version="7"),
        spec=checkpoint.CheckpointSpec(
            lineage=OWNER,
            trigger=checkpoint.Trigger(
                source=checkpoint.TriggerSource.SCHEDULER, reason=reason, time=T0
            ),
            members=[checkpoint.Member(pod_name="first", pod_uid="uid-first", index=3)],
        ),
        status=checkpoint.CheckpointStatus(phase=phase),
    )


def test_trigger_needs_an_opted_in_queue_and_a_listed_reason() -> None:
    pod = _pod("a", reason="PreemptionByScheduler", at=T0)
    assert disruptions.has_disruption(pod)
    out = optin.Decision(opted_in=False, reason="queue cq has not opted in")
    assert disruptions.pod_trigger(pod, decision=out) is None
    only_taints = policy_model.DEFAULT.model_copy(
        update={
            "spec": policy_model.DEFAULT.spec.model_copy(
                update={
                    "triggers": policy_model.DEFAULT.spec.triggers.model_copy(
                        update={"disruption_reasons": ["DeletionByTaintManager"]}
                    )
                }
            )
        }
    )
    narrow = optin.Decision(opted_in=True, reason="test", policy=only_taints)
    assert disruptions.pod_trigger(pod, decision=narrow) is None
    trigger = disruptions.pod_trigger(pod, decision=OPTED_IN)
    assert trigger is not None
    assert trigger.source is checkpoint.TriggerSource.SCHEDULER


def test_victims_of_one_event_form_one_group_anchored_at_the_earliest() -> None:
    late, early = _victim("b", seconds=1), _victim("a")
    groups = disruptions.group([late, early], checkpoints=[], window=0.5)
    assert len(groups) == 1
    assert [p.name for p in groups[0].pods] == ["a", "b"]
    assert groups[0].trigger == early.trigger
    assert groups[0].name == disruptions.checkpoint_name(OWNER, early.trigger)
    assert groups[0].existing is None


def test_a_different_reason_or_a_later_event_is_another_group() -> None:
    groups = disruptions.group(
        [
            _victim("a"),
            _victim("b", reason="DeletionByTaintManager"),
            _victim("c", seconds=30),
        ],
        checkpoints=[],
        window=0.5,
    )
    assert [[p.name for p in g.pods] for g in groups] == [["a"], ["b"], ["c"]]
    assert len({g.name for g in groups}) == 3  # same second, other reason: another name


def test_a_later_victim_joins_an_open_checkpoint_but_not_a_terminal_one() -> None:
    victim = _victim("b", seconds=1)
    for phase in (checkpoint.Phase.PENDING, checkpoint.Phase.IN_PROGRESS):
        cp = _open_checkpoint("cp-1", phase=phase, reason="PreemptionByScheduler")
        (joined,) = disruptions.group([victim], checkpoints=[cp], window=0.5)
        assert joined.existing is cp
        assert joined.name == "cp-1"
        members = disruptions.added_members(cp, joined.pods)
        assert [(m.pod_name, m.identity) for m in members] == [("first", ""), ("b", "index=0")]
    done = _open_checkpoint(
        "cp-1", phase=checkpoint.Phase.SUCCEEDED, reason="PreemptionByScheduler"
    )
    (fresh,) = disruptions.group([victim], checkpoints=[done], window=0.5)
    assert fresh.existing is None
    assert fresh.name != "cp-1"
    other = _open_checkpoint("cp-2", phase=checkpoint.Phase.PENDING, reason="EvictionByEvictionAPI")
    (separate,) = disruptions.group([victim], checkpoints=[other], window=0.5)
    assert separate.existing is None


def test_a_joining_member_keeps_its_completion_index() -> None:
    cp = _open_checkpoint("cp-1", phase=checkpoint.Phase.PENDING, reason="PreemptionByScheduler")
    pod = _pod("b", reason="PreemptionByScheduler", at=T0, index=7)
    members = disruptions.added_members(cp, [pod])
    assert [(m.pod_name, m.index) for m in members] == [("first", 3), ("b", 7)]
    assert disruptions.added_members(cp, [pod, pod]) == members  # a pod joins once


def test_queue_systems_setting() -> None:
    assert settings.Settings.from_env({}).queue_systems == ("kueue",)
    both = settings.Settings.from_env({"KONTINUE_QUEUE_SYSTEMS": "kueue, volcano"})
    assert both.queue_systems == ("kueue", "volcano")
    with pytest.raises(ValueError, match="KONTINUE_QUEUE_SYSTEMS: unknown \\['slurm'\\]"):
        settings.Settings.from_env({"KONTINUE_QUEUE_SYSTEMS": "kueue,slurm"})
    assert settings.Settings.from_env({"KONTINUE_QUEUE_SYSTEMS": "volcano"}).queue_systems == (
        "volcano",
    )  # Volcano-only (the volcano overlay): the Kueue caches stand empty
    with pytest.raises(ValueError, match="name at least one of kueue, volcano"):
        settings.Settings.from_env({"KONTINUE_QUEUE_SYSTEMS": " , "})


def test_a_later_victim_of_an_event_whose_set_is_terminal_gets_its_own_name() -> None:
    """A pod that never ran is recorded at once, so its set can be terminal before its sibling,
    drained in the same second, is seen: the sibling's set must not reuse the name (on main it
    got AlreadyExists and was never recorded)."""
    first = _victim("a", seconds=0)
    (group,) = disruptions.group([first], checkpoints=[], window=0.5)
    done = _open_checkpoint(
        group.name, phase=checkpoint.Phase.SUCCEEDED, reason="PreemptionByScheduler"
    )
    later = _victim("b", seconds=0)
    (fresh,) = disruptions.group([later], checkpoints=[done], window=0.5)
    assert fresh.existing is None
    assert fresh.name != group.name
    (again,) = disruptions.group([later], checkpoints=[done], window=0.5)
    assert again.name == fresh.name  # deterministic: a relist finds the same set
