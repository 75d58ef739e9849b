"""webhook/unrecorded.py: a predecessor that stopped and is in no set yet holds its replacement
back, for a bounded time; then the replacement is admitted with a warning. And through
``admission.mutate`` on a recorded job-controller pod: the 429, and the plan once the set exists."""

from __future__ import annotations

import datetime
from typing import Any

from kontinue import keys, lineage
from kontinue.models import base, core
from tests.unit.webhook import support
from webhook import admission, freshness, settings, state, unrecorded

Obj = dict[str, Any]
POD = support.kueue_pod()
OWNER = support.lineage_of(POD)
NOW = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.UTC)
CONFIG = settings.Settings(image="registry.example/kontinue:test", unrecorded_wait_seconds=60)


def _victim(
    uid: str = "v-uid",
    *,
    ended_ago: float | None = 5,
    deleted_ago: float | None = None,
    finalizer: bool = True,
    annotation: str | None = None,
    namespace: str = "default",
    told: str = "deleted",
) -> core.Pod:
    """A pod of OWNER's lineage that was told to stop: ended ``ended_ago`` seconds ago (phase
    Failed, a container's finishedAt), or only deleting (``deleted_ago``: its deletionTimestamp).
    ``told``: how an ended pod was told to stop: ``deleted`` (told 5 s before it ended, grace
    30 s: a deletionTimestamp 25 s after it ended), ``disrupted`` (``DisruptionTarget=True``
    only: the kubelet's eviction), or ``crashed`` (neither: it failed on its own)."""
    meta: Obj = {
        "name": f"train-{uid}",
        "namespace": namespace,
        "uid": uid,
        "annotations": {
            keys.LINEAGE_ANNOTATION: annotation or lineage.annotation_value(OWNER),
        },
        "finalizers": [keys.CHECKPOINT_FINALIZER] if finalizer else [],
    }
    status: Obj = {
        "phase": "Running",
        "containerStatuses": [{"name": "main", "state": {"running": {}}}],
    }
    if deleted_ago is not None:
        meta["deletionTimestamp"] = base.format_time(NOW - datetime.timedelta(seconds=deleted_ago))
    if ended_ago is not None:
        finished = base.format_time(NOW - datetime.timedelta(seconds=ended_ago))
        status = {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "main",
                    "state": {"terminated": {"exitCode": 143, "finishedAt": finished}},
                }
            ],
        }
        if told == "deleted" and deleted_ago is None:
            # told 5 s before it ended, grace 30 s: the apiserver's deletionTimestamp is the
            # request's time plus the grace period, 25 s after the end
            told_at = NOW - datetime.timedelta(seconds=ended_ago - 25)
            meta["deletionTimestamp"] = base.format_time(told_at)
        elif told == "disrupted":
            condition = {"type": "DisruptionTarget", "status": "True"}
            status["conditions"] = [{**condition, "lastTransitionTime": finished}]
    return base.parse(core.Pod, {"metadata": meta, "spec": {"containers": []}, "status": status})


def test_a_stopped_unrecorded_predecessor_is_found() -> None:
    found = unrecorded.victims([_victim()], [], owner=OWNER, now=NOW)
    assert [v.uid for v in found] == ["v-uid"]
    assert found[0].stopped == NOW - datetime.timedelta(seconds=5)
    # evicted by the kubelet: DisruptionTarget=True, never deleted
    (evicted,) = unrecorded.victims([_victim(told="disrupted")], [], owner=OWNER, now=NOW)
    assert evicted.stopped == NOW - datetime.timedelta(seconds=5)
    # still saving: its deletionTimestamp is where the bound starts
    (saving,) = unrecorded.victims(
        [_victim(ended_ago=None, deleted_ago=-30)], [], owner=OWNER, now=NOW
    )
    assert saving.stopped == NOW + datetime.timedelta(seconds=30)


def test_what_is_not_a_victim() -> None:
    recorded = support.make_checkpoint(
        "cp", lineage=OWNER, phase="InProgress", members=[("train-v-uid", "v-uid", 0)]
    )
    assert unrecorded.victims([_victim()], [recorded], owner=OWNER, now=NOW) == []  # in a set
    assert (
        unrecorded.victims([_victim(finalizer=False)], [], owner=OWNER, now=NOW) == []
    )  # released
    running = _victim(ended_ago=None)  # never told to stop
    assert unrecorded.victims([running], [], owner=OWNER, now=NOW) == []
    # failed on its own (no deletion, no DisruptionTarget): the bridge records no set for it
    assert unrecorded.victims([_victim(told="crashed")], [], owner=OWNER, now=NOW) == []
    other = OWNER.model_copy(update={"owner_uid": "another"})
    foreign = _victim(annotation=lineage.annotation_value(other))
    assert unrecorded.victims([foreign], [], owner=OWNER, now=NOW) == []
    assert unrecorded.victims([_victim(namespace="evil")], [], owner=OWNER, now=NOW) == []
    pending = _victim(ended_ago=None, deleted_ago=1)  # evicted before it ever ran
    assert pending.status is not None
    pending.status.container_statuses = None
    assert unrecorded.victims([pending], [], owner=OWNER, now=NOW) == []


def test_the_hold_is_bounded() -> None:
    found = unrecorded.victims([_victim(ended_ago=5)], [], owner=OWNER, now=NOW)
    held = unrecorded.decide(found, now=NOW, hold=60)
    assert "train-v-uid" in held.deny
    assert "in at most 55s" in held.deny
    assert held.warning == ""
    late = unrecorded.decide(found, now=NOW + datetime.timedelta(seconds=56), hold=60)
    assert late.deny == ""
    assert "train-v-uid stopped more than 60s ago" in late.warning
    assert unrecorded.decide([], now=NOW, hold=60) == unrecorded.Hold()


def test_a_node_clock_ahead_cannot_stretch_the_hold() -> None:
    # finishedAt an hour ahead (the node's clock), deleted 6 s ago (the apiserver's clock): the
    # deletionTimestamp caps it, so the bound still starts in the past
    ahead = _victim(ended_ago=-3600, deleted_ago=6)
    (capped,) = unrecorded.victims([ahead], [], owner=OWNER, now=NOW)
    assert capped.stopped == NOW - datetime.timedelta(seconds=6)
    late = unrecorded.decide([capped], now=NOW + datetime.timedelta(seconds=55), hold=60)
    assert late.deny == ""
    # evicted by the kubelet (DisruptionTarget only) on a node an hour ahead: nothing to believe,
    # so it holds nothing back, rather than holding every retry for an hour
    skewed = _victim(ended_ago=-3600, told="disrupted")
    assert unrecorded.victims([skewed], [], owner=OWNER, now=NOW) == []
    # a few seconds of ordinary skew is still believed
    (near,) = unrecorded.victims(
        [_victim(ended_ago=-3, told="disrupted")], [], owner=OWNER, now=NOW
    )
    assert near.stopped == NOW + datetime.timedelta(seconds=3)


def _view(*pods: core.Pod, checkpoints: Any = ()) -> freshness.Fresh:
    cache = state.Snapshot.of(cluster_queues=[support.opted_in_cq("cq-gpu")])
    return freshness.Fresh(cache, OWNER, list(checkpoints), pods=list(pods), read_at=NOW)


def test_the_replacement_is_denied_then_planned_from_the_recorded_set() -> None:
    request = support.parsed(support.request_for(POD))
    verdict = admission.mutate(request, state=_view(_victim()), config=CONFIG)
    assert not verdict.allowed
    assert verdict.code == 429
    assert "no Checkpoint records it yet" in verdict.message
    # the bridge records it (still saving): the replacement waits for that set
    saving = support.make_checkpoint(
        "late", lineage=OWNER, phase="InProgress", members=[("train-v-uid", "v-uid", 0)]
    )
    verdict = admission.mutate(request, state=_view(_victim(), checkpoints=[saving]), config=CONFIG)
    assert verdict.allowed
    out = support.apply_patch(POD, verdict.patch)
    assert out["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "late"
    assert out["metadata"]["labels"][keys.CHECKPOINT_LINEAGE_LABEL] == OWNER.hash
    # without the pods read (a cache-only view, or the read off) nothing is held
    cache = state.Snapshot.of(cluster_queues=[support.opted_in_cq("cq-gpu")])
    assert admission.mutate(request, state=cache, config=CONFIG).allowed
    off = settings.Settings(image="x", unrecorded_wait_seconds=0)
    assert admission.mutate(request, state=_view(_victim()), config=off).allowed


def test_past_the_bound_it_is_admitted_with_a_warning() -> None:
    request = support.parsed(support.request_for(POD))
    verdict = admission.mutate(request, state=_view(_victim(ended_ago=120)), config=CONFIG)
    assert verdict.allowed
    assert any("planned without its save" in w for w in verdict.warnings)
    out = support.apply_patch(POD, verdict.patch)
    assert keys.COLD_START_REASON_ANNOTATION in out["metadata"]["annotations"]
