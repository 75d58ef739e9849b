"""Eviction detectors, on recorded and upstream object shapes varied one field at a time."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kontinue import keys, moving
from kontinue.models import base, checkpoint, core, errors, kueue, policy
from queue_bridge import sources
from queue_bridge.sources import disruption, volcano
from queue_bridge.sources import kueue as kueue_source
from tests import fixtures

BRIDGE = fixtures.FIXTURES / "bridge"
EVICTED = fixtures.load_one(fixtures.FIXTURES / "objects" / "workload-evicted.yaml")
VOLCANO_DELETE = json.loads(
    (
        fixtures.UPSTREAM
        / "volcano"
        / "examples"
        / "admissionreview-delete-victim-pod-by-vc-scheduler.json"
    ).read_text()
)


def _policy(**triggers: list[str]) -> policy.CheckpointPolicy:
    return policy.load({"metadata": {"name": "p"}, "spec": {"triggers": triggers}})


def workload(
    *,
    reason: str | None = "Preempted",
    status: str = "True",
    ltt: str | None = "2026-12-01T10:05:00Z",
) -> kueue.Workload:
    data = copy.deepcopy(EVICTED)
    conditions: list[dict[str, Any]] = data["status"]["conditions"]
    evicted = next(c for c in conditions if c["type"] == "Evicted")
    if reason is None:
        conditions.remove(evicted)
    else:
        evicted.update(reason=reason, status=status)
        if ltt is None:
            del evicted["lastTransitionTime"]
        else:
            evicted["lastTransitionTime"] = ltt
    return kueue.Workload.model_validate(data)


@pytest.mark.parametrize(
    ("reason", "status", "triggers"),
    [
        ("Preempted", "True", True),
        ("PodsReadyTimeout", "True", True),
        ("ClusterQueueStopped", "True", True),
        ("LocalQueueStopped", "True", True),
        ("NodeFailures", "True", True),
        ("Deactivated", "True", False),
        ("AdmissionCheck", "True", False),
        ("Preempted", "False", False),
        (None, "True", False),
    ],
    ids=lambda v: str(v),
)
def test_kueue_default_reasons(reason: str | None, status: str, triggers: bool) -> None:
    found = kueue_source.eviction(
        workload(reason=reason, status=status), previous=None, policy=policy.DEFAULT
    )
    assert (found is not None) is triggers
    if found is not None:
        assert found.source is checkpoint.TriggerSource.KUEUE
        assert found.reason == reason
        assert found.time.isoformat() == "2026-12-01T10:05:00+00:00"


def test_kueue_trigger_carries_preempted_detail() -> None:
    found = kueue_source.eviction(workload(), previous=None, policy=policy.DEFAULT)
    assert found is not None
    assert found.message.startswith("InClusterQueue: Preempted to accommodate a workload")


def test_kueue_policy_chooses_reasons() -> None:
    only_deactivated = _policy(kueueEvictionReasons=["Deactivated"])
    assert kueue_source.eviction(workload(), previous=None, policy=only_deactivated) is None
    found = kueue_source.eviction(
        workload(reason="Deactivated"), previous=None, policy=only_deactivated
    )
    assert found is not None


@pytest.mark.parametrize(
    ("previous", "new"),
    [
        (None, True),  # first sight, or a relist: level-triggered
        (workload(reason=None), True),  # the Evicted=True transition itself
        (workload(status="False"), True),  # readmitted earlier (Evicted=False), evicted again
        (workload(), False),  # Kueue's second update of the same eviction
        (workload(ltt="2026-12-01T09:00:00Z"), True),  # an earlier eviction, this one is new
    ],
    ids=["no-previous", "from-none", "from-false", "same-eviction", "new-eviction"],
)
def test_kueue_one_trigger_per_eviction(previous: kueue.Workload | None, new: bool) -> None:
    found = kueue_source.eviction(workload(), previous=previous, policy=policy.DEFAULT)
    assert (found is not None) is new


def test_kueue_eviction_without_time_names_the_field() -> None:
    with pytest.raises(errors.InvalidObject) as caught:
        kueue_source.eviction(workload(ltt=None), previous=None, policy=policy.DEFAULT)
    assert caught.value.errors[0].path == "status.conditions[2].lastTransitionTime"


def recorded(name: str) -> core.Pod:
    return core.Pod.model_validate(json.loads((BRIDGE / f"{name}.json").read_text()))


def volcano_victim() -> core.Pod:
    return core.Pod.model_validate(VOLCANO_DELETE["request"]["oldObject"])


def edit(pod: core.Pod, change: Any) -> core.Pod:
    data = pod.model_dump(by_alias=True, exclude_unset=True, mode="json")
    change(data)
    return core.Pod.model_validate(data)


def _condition(data: dict[str, Any], type_: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in data["status"]["conditions"] if c["type"] == type_)
    return found


# name -> (pod, expected source or None, expected reason)
DISRUPTIONS: dict[str, tuple[core.Pod, checkpoint.TriggerSource | None]] = {
    "scheduler-preemption": (
        recorded("pod-disruption-preemption-by-scheduler"),
        checkpoint.TriggerSource.SCHEDULER,
    ),
    "eviction-api-terminal": (
        recorded("pod-disruption-eviction-api"),
        checkpoint.TriggerSource.EVICTION_API,
    ),
    "taint-manager": (
        recorded("pod-disruption-taint-manager"),
        checkpoint.TriggerSource.TAINT_MANAGER,
    ),
    "kueue-suspend-has-none": (recorded("pod-suspended-terminal-by-kubelet"), None),
    "running-no-condition": (recorded("pod-create-by-job-controller"), None),
    "volcano-left-to-volcano": (volcano_victim(), None),
    "condition-false": (
        edit(
            recorded("pod-disruption-preemption-by-scheduler"),
            lambda d: _condition(d, "DisruptionTarget").update(status="False"),
        ),
        None,
    ),
    "unknown-reason": (
        edit(
            recorded("pod-disruption-preemption-by-scheduler"),
            lambda d: _condition(d, "DisruptionTarget").update(reason="TerminationByKubelet"),
        ),
        None,
    ),
    "already-succeeded": (
        edit(
            recorded("pod-disruption-taint-manager"),
            lambda d: d["status"].update(phase="Succeeded"),
        ),
        None,
    ),
}


@pytest.mark.parametrize(("pod", "source"), list(DISRUPTIONS.values()), ids=list(DISRUPTIONS))
def test_disruption_sources(pod: core.Pod, source: checkpoint.TriggerSource | None) -> None:
    found = disruption.eviction(pod, previous=None, policy=policy.DEFAULT)
    assert (found.source if found else None) is source
    if found is not None:
        target = _condition(pod.model_dump(by_alias=True, mode="json"), "DisruptionTarget")
        assert found.reason == target["reason"]
        assert found.message == target["message"]


def test_disruption_policy_filters_reasons() -> None:
    drains_only = _policy(disruptionReasons=[keys.DISRUPTION_EVICTION_BY_API])
    assert (
        disruption.eviction(
            recorded("pod-disruption-preemption-by-scheduler"), previous=None, policy=drains_only
        )
        is None
    )
    assert (
        disruption.eviction(
            recorded("pod-disruption-eviction-api"), previous=None, policy=drains_only
        )
        is not None
    )


def test_disruption_repeat_is_not_a_new_eviction() -> None:
    """The recorded kubelet update after the scheduler's keeps the same DisruptionTarget."""
    marked = recorded("pod-disruption-preemption-by-scheduler")
    terminal = recorded("pod-preempted-terminal-by-kubelet")
    assert disruption.eviction(marked, previous=None, policy=policy.DEFAULT) is not None
    assert disruption.eviction(terminal, previous=marked, policy=policy.DEFAULT) is None
    unmarked = edit(marked, lambda d: d["status"]["conditions"].pop())
    assert disruption.eviction(marked, previous=unmarked, policy=policy.DEFAULT) is not None


# name -> (pod, deleted_by, triggers)
VOLCANO: dict[str, tuple[core.Pod, str | None, bool]] = {
    "recorded-victim": (volcano_victim(), None, True),
    "deleted-by-volcano-other-scheduler-name": (
        edit(volcano_victim(), lambda d: d["spec"].update(schedulerName="default-scheduler")),
        keys.VOLCANO_SCHEDULER_USER,
        True,
    ),
    "kube-scheduler-preemption": (recorded("pod-disruption-preemption-by-scheduler"), None, False),
    "ready-rewritten-by-the-kubelet": (
        edit(volcano_victim(), lambda d: _condition(d, "Ready").update(reason="PodFailed")),
        None,
        True,
    ),
    "kube-scheduler-preemption-ready-evict": (
        edit(
            recorded("pod-disruption-preemption-by-scheduler"),
            lambda d: d["status"]["conditions"].append(
                {"type": "Ready", "status": "False", "reason": "Evict"}
            ),
        ),
        None,
        False,
    ),
    "no-disruption-target": (
        edit(volcano_victim(), lambda d: d["status"]["conditions"].pop()),
        None,
        False,
    ),
}


@pytest.mark.parametrize(
    ("pod", "deleted_by", "triggers"), list(VOLCANO.values()), ids=list(VOLCANO)
)
def test_volcano_eviction(pod: core.Pod, deleted_by: str | None, triggers: bool) -> None:
    found = volcano.eviction(pod, previous=None, policy=policy.DEFAULT, deleted_by=deleted_by)
    assert (found is not None) is triggers
    if found is not None:
        assert found.source is checkpoint.TriggerSource.VOLCANO
        assert found.reason == keys.DISRUPTION_PREEMPTION_BY_SCHEDULER
        ready = base.find_condition(pod.status.conditions if pod.status else None, "Ready")
        target = base.find_condition(
            pod.status.conditions if pod.status else None, keys.POD_CONDITION_DISRUPTION_TARGET
        )
        assert target is not None
        expected = (
            "Pod is evicted, because of reclaim"
            if ready is not None and ready.reason == "Evict"
            else target.message
        )
        assert found.message == expected
        assert found.time.isoformat() == "2026-08-20T05:40:02+00:00"


def test_volcano_repeat_and_policy() -> None:
    victim = volcano_victim()
    assert volcano.eviction(victim, previous=victim, policy=policy.DEFAULT) is None
    no_preemption = _policy(disruptionReasons=[keys.DISRUPTION_EVICTION_BY_API])
    assert volcano.eviction(victim, previous=None, policy=no_preemption) is None


@pytest.mark.parametrize(
    ("pod", "source"),
    [
        (volcano_victim(), checkpoint.TriggerSource.VOLCANO),
        (recorded("pod-disruption-preemption-by-scheduler"), checkpoint.TriggerSource.SCHEDULER),
        (recorded("pod-disruption-taint-manager"), checkpoint.TriggerSource.TAINT_MANAGER),
        (recorded("pod-suspended-terminal-by-kubelet"), None),
    ],
    ids=["volcano", "scheduler", "taint", "none"],
)
def test_pod_eviction_picks_one_source(
    pod: core.Pod, source: checkpoint.TriggerSource | None
) -> None:
    found = sources.pod_eviction(pod, previous=None, policy=policy.DEFAULT)
    assert (found.source if found else None) is source


def test_an_eviction_a_user_asked_for_is_manual() -> None:
    """kubectl kontinue move/drain/defrag mark the pod (kontinue/moving.py) before evicting."""
    evicted = recorded("pod-disruption-eviction-api")
    asked = moving.Move(by="drain", away_from="node-1")

    def mark(data: dict[str, Any]) -> None:
        data["metadata"].setdefault("annotations", {})[moving.ANNOTATION] = asked.encode()

    found = disruption.eviction(edit(evicted, mark), previous=None, policy=policy.DEFAULT)
    assert found is not None
    assert found.source is checkpoint.TriggerSource.MANUAL
    assert (found.reason, found.message) == (
        "Drain",
        "kubectl kontinue drain: away from node node-1",
    )
    plain = disruption.eviction(evicted, previous=None, policy=policy.DEFAULT)
    assert plain is not None
    assert found.time == plain.time
    # the mark changes only Eviction API evictions: a scheduler preemption stays the scheduler's
    preempted = edit(recorded("pod-disruption-preemption-by-scheduler"), mark)
    other = disruption.eviction(preempted, previous=None, policy=policy.DEFAULT)
    assert other is not None
    assert other.source is checkpoint.TriggerSource.SCHEDULER
    # and the policy's reasons still decide: a policy without EvictionByEvictionAPI records nothing
    no_drains = _policy(disruptionReasons=[keys.DISRUPTION_PREEMPTION_BY_SCHEDULER])
    assert disruption.eviction(edit(evicted, mark), previous=None, policy=no_drains) is None
