"""A set the webhook's watch cache has not seen yet is still the one a new pod restores.

The soak's ``late-plan`` finding (docs/security.md, "Soak findings", item 1): the bridge records
a set moments before the job controller creates the replacement pod, and the webhook planned from
a Checkpoint cache that had not caught up. Here the cache is held back for certain: the emulator
refuses the webhook's Checkpoint watch (and drops the open one), so the webhook's cache cannot see
the set the bridge then creates. With the live read (webhook/freshness.py) the pod restores it;
with the read turned off (``KONTINUE_WEBHOOK_LIVE_READ_SECONDS=0``) the very same sequence gives
the cold start the soak counted. A failing or hanging read falls back to the cache with a warning.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from emulator.apiserver import server
from kontinue import keys
from kontinue.kube import api, client, errors, resources
from kontinue.models import base, checkpoint, core
from queue_bridge import acting
from tests import fixtures
from tests.integration.webhook import test_emulator as hooked
from tests.unit.webhook import support
from tests.waiting import eventually
from webhook import admission, freshness, settings, state

Obj = dict[str, Any]
NS = hooked.NS


def _lineage(job: Obj) -> checkpoint.Lineage:
    return checkpoint.Lineage(
        namespace=NS, owner_kind="Job", owner_name="train-a", owner_uid=job["metadata"]["uid"]
    )


async def _record(bridge: Any, name: str, owner: checkpoint.Lineage, *, minutes_ago: int) -> None:
    """What the bridge writes: the labelled Checkpoint, then its Succeeded status."""
    body = support.make_checkpoint(name, lineage=owner, minutes_ago=minutes_ago).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    status = body.pop("status")
    body["metadata"]["labels"] = {
        keys.CHECKPOINT_LINEAGE_LABEL: owner.hash,
        keys.CHECKPOINT_OWNER_UID_LABEL: owner.owner_uid,
    }
    await bridge.create(resources.CHECKPOINTS, body)
    await bridge.patch(
        resources.CHECKPOINTS,
        name,
        {"status": status},
        namespace=NS,
        subresource="status",
        content_type=api.MERGE_PATCH,
    )


async def _job(cluster: hooked.Cluster) -> Obj:
    await hooked._queues(cluster)

    async def job_is_patched() -> bool:  # the webhook's caches have caught up with the queues
        dry = await cluster.admin.create(resources.JOBS, hooked._job(), dry_run=True)
        return bool(dry["spec"].get("podReplacementPolicy") == "Failed")

    await eventually(job_is_patched)
    job: Obj = await cluster.admin.create(resources.JOBS, hooked._job())
    return job


@pytest.mark.parametrize("live", [True, False], ids=["live-read", "cache-only"])
async def test_a_set_recorded_just_before_the_pod_is_restored(live: bool) -> None:
    config = dataclasses.replace(hooked.CONFIG, live_read_seconds=2.0 if live else 0)
    async with hooked.running(config) as cluster:
        job = await _job(cluster)
        owner = _lineage(job)
        await _record(cluster.bridge, "train-a-1", owner, minutes_ago=30)

        async def cache_has_it() -> bool:  # an older set, seen by the cache
            dry = await cluster.job_controller.create(
                resources.PODS, hooked._pod_for(job), dry_run=True
            )
            return bool(dry["metadata"]["annotations"].get(keys.RESTORE_FROM_ANNOTATION))

        await eventually(cache_has_it)
        # The webhook's Checkpoint cache stops here: its watch is dropped and refused.
        refused = cluster.emulated.faults.add(
            verb="watch", resource="checkpoints", user=hooked.WEBHOOK_USER, count=None
        )
        cluster.emulated.drop_watches()
        await eventually(lambda: refused.fired >= 1)
        await _record(cluster.bridge, "train-a-2", owner, minutes_ago=1)
        pod = await cluster.job_controller.create(resources.PODS, hooked._pod_for(job))
        cluster.emulated.faults.remove(refused)
        restored = pod["metadata"]["annotations"].get(keys.RESTORE_FROM_ANNOTATION)
        # live: the newest set; cache only: the older one (the soak's late plan)
        assert restored == ("train-a-2" if live else "train-a-1")


@pytest.fixture
async def emulated() -> Any:
    async with server.ApiServer() as running:
        ours = sorted((fixtures.MANIFESTS / "crds").glob("kontinue.dev_*.yaml"))
        for path in [*ours, *hooked.CRDS]:
            running.install_crd(fixtures.load_one(path))
        yield running


POD = support.kueue_pod()
OWNER = support.lineage_of(POD)
CONFIG = settings.Settings(image="registry.example/kontinue:test")


async def _view(emulated: server.ApiServer, *, seconds: float = 2.0) -> Any:
    """The verdict on the recorded pod's CREATE from the webhook's view (cache: empty), read
    through the real client as the webhook's service account."""
    api_client = await client.api_client_from_dict(emulated.kubeconfig(hooked.WEBHOOK_USER))
    try:
        reader = freshness.Reader(api.Api(api_client), seconds=seconds)
        cache = state.Snapshot.of(cluster_queues=[support.opted_in_cq("cq-gpu")])
        request = support.parsed(support.request_for(POD))
        view = await reader.view(request, cache, path="/mutate")
        return admission.mutate(request, state=view, config=CONFIG)
    finally:
        await api_client.close()


async def _put(emulated: server.ApiServer) -> None:
    body = support.make_checkpoint("fresh", lineage=OWNER, minutes_ago=1).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    body["metadata"]["labels"] = {keys.CHECKPOINT_OWNER_UID_LABEL: OWNER.owner_uid}
    status = body.pop("status")
    admin = emulated.client()
    await admin.create(resources.CHECKPOINTS, body)
    await admin.patch(
        resources.CHECKPOINTS,
        "fresh",
        {"status": status},
        namespace="default",
        subresource="status",
        content_type=api.MERGE_PATCH,
    )


def _restore_from(verdict: Any) -> str | None:
    out = support.apply_patch(POD, verdict.patch)
    annotations: dict[str, str] = out["metadata"]["annotations"]
    return annotations.get(keys.RESTORE_FROM_ANNOTATION)


async def test_the_live_read_finds_what_the_cache_lacks(emulated: server.ApiServer) -> None:
    await _put(emulated)
    verdict = await _view(emulated)
    assert _restore_from(verdict) == "fresh"
    assert not [w for w in verdict.warnings if "cache" in w]


@pytest.mark.parametrize("hang", [False, True], ids=["500", "hang"])
async def test_a_failed_read_plans_from_the_cache_and_says_so(
    emulated: server.ApiServer, hang: bool
) -> None:
    await _put(emulated)
    failing = emulated.faults.add(
        verb="list",
        resource="checkpoints",
        user=hooked.WEBHOOK_USER,
        status=500,
        count=None,
        hang=hang,
        hang_seconds=30,
    )
    verdict = await _view(emulated, seconds=0.5)
    assert failing.fired >= 1
    assert _restore_from(verdict) is None  # the (empty) cache's plan: a cold start
    (note,) = [w for w in verdict.warnings if "planned from the webhook's cache" in w]
    # a hung request ends at the read's deadline (the emulator would answer 504 after 30 s)
    assert ("timeout" if hang else "error") in note


async def _evicted(cluster: hooked.Cluster, job: Obj, *, grace: int | None = None) -> Obj:
    """A pod of ``job`` the job controller created, evicted (deleted: Kontinue's finalizer holds
    it), that saved and exited 143 (``Failed``, as its kubelet reports it)."""
    pod: Obj = await cluster.job_controller.create(resources.PODS, hooked._pod_for(job))
    name = pod["metadata"]["name"]
    await cluster.admin.delete(resources.PODS, name, namespace=NS, grace_period_seconds=grace)
    pod = await cluster.admin.get(resources.PODS, name, namespace=NS)
    finished = base.format_time(datetime.datetime.now(datetime.UTC))
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": c["name"],
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 143, "finishedAt": finished}},
            }
            for c in pod["spec"]["containers"]
        ],
    }
    updated: Obj = await cluster.admin.replace(resources.PODS, pod, subresource="status")
    return updated


async def test_a_predecessor_no_set_records_holds_its_replacement_back() -> None:
    """The harder case: the victim was told to stop, and the bridge has not created its set at
    all (down, or its create still retried). No read can see that set; the victim can be seen.
    The replacement's CREATE is denied (429) until a set records the victim, then planned from
    it (here: a wait for the set still saving)."""
    async with hooked.running(hooked.CONFIG) as cluster:
        job = await _job(cluster)
        owner = _lineage(job)
        # Evicted and ended, held by Kontinue's finalizer; the bridge records nothing.
        victim = await _evicted(cluster, job)
        assert victim["metadata"]["labels"][keys.CHECKPOINT_LINEAGE_LABEL] == owner.hash
        with pytest.raises(errors.TooManyRequests, match="no Checkpoint records it yet"):
            await cluster.job_controller.create(resources.PODS, hooked._pod_for(job))
        # The bridge is back and records the eviction: the set names the victim.
        body = support.make_checkpoint(
            "train-a-late",
            lineage=owner,
            members=[(victim["metadata"]["name"], victim["metadata"]["uid"], 0)],
        ).model_dump(mode="json", by_alias=True, exclude_none=True)
        del body["status"]  # still saving: Pending
        body["metadata"]["labels"] = {keys.CHECKPOINT_OWNER_UID_LABEL: owner.owner_uid}
        await cluster.bridge.create(resources.CHECKPOINTS, body)
        pod = await cluster.job_controller.create(resources.PODS, hooked._pod_for(job))
        annotations = pod["metadata"]["annotations"]
        assert annotations[keys.RESTORE_FROM_ANNOTATION] == "train-a-late"
        waiting = {
            e["name"]: e.get("value")
            for e in pod["spec"]["initContainers"][0]["env"]
            if e["name"] == keys.ENV_WAIT_FOR
        }
        assert (waiting[keys.ENV_WAIT_FOR] or "").endswith(victim["metadata"]["uid"])


async def test_past_the_bound_the_replacement_is_admitted_without_the_save() -> None:
    config = dataclasses.replace(hooked.CONFIG, unrecorded_wait_seconds=1)
    async with hooked.running(config) as cluster:
        job = await _job(cluster)
        await _evicted(cluster, job)  # ended now: the bound ends a second later

        async def admitted() -> bool:
            try:
                pod = await cluster.job_controller.create(
                    resources.PODS, hooked._pod_for(job), dry_run=True
                )
            except errors.TooManyRequests:
                return False
            return keys.COLD_START_REASON_ANNOTATION in pod["metadata"]["annotations"]

        await eventually(admitted, what="the replacement admitted once the bound passed")


async def test_the_bridges_release_drops_the_label_the_pod_read_selects() -> None:
    """The pod read selects the lineage label and ``status.phase=Failed``; the bridge drops the
    label in the patch that releases its finalizer, so released pods leave that list."""
    async with hooked.running(hooked.CONFIG) as cluster:
        job = await _job(cluster)
        owner = _lineage(job)
        victim = await _evicted(cluster, job)
        selector = {keys.CHECKPOINT_LINEAGE_LABEL: owner.hash}

        async def listed() -> list[str]:
            found = await cluster.admin.list(
                resources.PODS,
                namespace=NS,
                label_selector=selector,
                field_selector="status.phase=Failed",
            )
            return [p["metadata"]["name"] for p in found["items"]]

        assert await listed() == [victim["metadata"]["name"]]
        api_client = await client.api_client_from_dict(
            cluster.emulated.kubeconfig(hooked.BRIDGE_USER)
        )
        try:
            released = await acting.remove_finalizer(
                api.Api(api_client), base.parse(core.Pod, victim)
            )
        finally:
            await api_client.close()
        assert released
        assert await listed() == []
