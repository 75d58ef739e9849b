"""The pure half of webhook/freshness.py: which requests are worth a live read, how a live list
and the watch cache merge, and what a plan from the merged view gives (``admission.mutate`` on a
recorded job-controller pod). The read itself, against the API emulator:
tests/integration/webhook/test_freshness.py."""

from __future__ import annotations

from typing import Any

from kontinue import keys
from kontinue.models import checkpoint
from tests.unit.webhook import support
from webhook import admission, freshness, settings, state

CONFIG = settings.Settings(image="registry.example/kontinue:test")
Obj = dict[str, Any]


def _snapshot(*cps: checkpoint.Checkpoint) -> state.Snapshot:
    return state.Snapshot.of(cluster_queues=[support.opted_in_cq("cq-gpu")], checkpoints=cps)


def _at(cp: checkpoint.Checkpoint, version: int, *, labelled: bool = True) -> checkpoint.Checkpoint:
    """``cp`` as the store would hold it at ``version``, with the bridge's owner-uid label."""
    copy = cp.model_copy(deep=True)
    copy.metadata.resource_version = str(version)
    if labelled:
        copy.metadata.labels = {keys.CHECKPOINT_OWNER_UID_LABEL: cp.spec.lineage.owner_uid}
    return copy


POD = support.kueue_pod()
OWNER = support.lineage_of(POD)


def test_only_a_plumbed_pods_create_is_worth_a_live_read() -> None:
    snap = _snapshot()
    assert freshness.wanted(support.parsed(support.request_for(POD)), snap) == OWNER
    not_opted_in = support.kueue_pod(cluster_queue="cq-other")
    assert freshness.wanted(support.parsed(support.request_for(not_opted_in)), snap) is None
    bare = support.kueue_pod()
    del bare["metadata"]["ownerReferences"]
    assert freshness.wanted(support.parsed(support.request_for(bare)), snap) is None
    update = support.request_for(POD, operation="UPDATE", old=POD)
    assert freshness.wanted(support.parsed(update), snap) is None
    job = support.request_for(
        support.recorded_object("01-"), group="batch", kind="Job", resource="jobs"
    )
    assert freshness.wanted(support.parsed(job), snap) is None
    broken = support.kueue_pod()
    broken["metadata"]["ownerReferences"] = "not a list"
    assert freshness.wanted(support.parsed(support.request_for(broken)), snap) is None


def test_the_merge_keeps_each_object_at_its_newest_version() -> None:
    new = support.make_checkpoint("new", lineage=OWNER, minutes_ago=1)
    old = support.make_checkpoint("old", lineage=OWNER, minutes_ago=30)
    saving = support.make_checkpoint("saving", lineage=OWNER, phase="InProgress", minutes_ago=2)
    done = support.make_checkpoint("saving", lineage=OWNER, phase="Succeeded", minutes_ago=2)
    gone = support.make_checkpoint("gone", lineage=OWNER, minutes_ago=40)
    users = support.make_checkpoint("users", lineage=OWNER, minutes_ago=50)
    merged = freshness.merged(
        # the cache: old, the set still saving (an older version), one deleted since, and one a
        # user made without the bridge's label (never in a label-selected list)
        [_at(old, 5), _at(saving, 7), _at(gone, 6), _at(users, 4, labelled=False)],
        # the list (at version 12): the new set, and the saving one finished
        [_at(new, 11), _at(done, 12), _at(old, 5)],
        owner_uid=OWNER.owner_uid,
        listed_at="12",
    )
    by_name = {c.name: c for c in merged}
    assert sorted(by_name) == ["new", "old", "saving", "users"]
    assert by_name["saving"].status.phase is checkpoint.Phase.SUCCEEDED
    # an update the cache saw after the list was served wins
    merged = freshness.merged(
        [_at(done, 14)], [_at(saving, 9)], owner_uid=OWNER.owner_uid, listed_at="9"
    )
    assert [c.status.phase for c in merged] == [checkpoint.Phase.SUCCEEDED]
    # one created after the list was served, seen by the cache only, is kept
    merged = freshness.merged([_at(new, 15)], [], owner_uid=OWNER.owner_uid, listed_at="12")
    assert [c.name for c in merged] == ["new"]


def _restores_from(verdict: Any) -> str | None:
    out = support.apply_patch(POD, verdict.patch)
    assert support.pod_errors(out) == []
    annotations: dict[str, str] = out["metadata"]["annotations"]
    return annotations.get(keys.RESTORE_FROM_ANNOTATION)


def test_a_plan_from_the_fresh_view_uses_the_set_the_cache_missed() -> None:
    old = _at(support.make_checkpoint("old", lineage=OWNER, minutes_ago=30), 5)
    new = _at(support.make_checkpoint("new", lineage=OWNER, minutes_ago=1), 9)
    request = support.parsed(support.request_for(POD))
    cache = _snapshot(old)
    # the cache alone: the older set (what the soak counted as a late plan)
    assert _restores_from(admission.mutate(request, state=cache, config=CONFIG)) == "old"
    fresh = freshness.Fresh(cache, OWNER, freshness.merged([old], [new, old], **_LISTED))
    verdict = admission.mutate(request, state=fresh, config=CONFIG)
    assert _restores_from(verdict) == "new"
    assert not [w for w in verdict.warnings if "planned from the webhook's cache" in w]
    # other lineages and the queues still come from the cache
    assert fresh.cluster_queue("cq-gpu") is not None
    other = OWNER.model_copy(update={"owner_uid": "another-uid"})
    assert fresh.checkpoints_of(other) == []
    assert fresh.checkpoint(OWNER.namespace, "new") is new


_LISTED: Obj = {"owner_uid": OWNER.owner_uid, "listed_at": "9"}


def test_a_foreign_object_in_the_list_is_never_planned_from() -> None:
    """The list is selected by label, which anyone may put on their object: the view keeps only
    the lineage's own Checkpoints in its own namespace (issue 11 item 2)."""
    elsewhere = OWNER.model_copy(update={"namespace": "evil"})
    foreign = _at(support.make_checkpoint("foreign", lineage=elsewhere, minutes_ago=1), 9)
    fresh = freshness.Fresh(_snapshot(), OWNER, [foreign])
    assert fresh.checkpoints_of(OWNER) == []


def test_a_view_from_the_cache_after_a_failed_read_says_so() -> None:
    old = _at(support.make_checkpoint("old", lineage=OWNER, minutes_ago=30), 5)
    stale = freshness.Fresh(_snapshot(old), OWNER, [old], notes=("kontinue: planned from X",))
    verdict = admission.mutate(support.parsed(support.request_for(POD)), state=stale, config=CONFIG)
    assert _restores_from(verdict) == "old"
    assert "kontinue: planned from X" in verdict.warnings
