"""Pods plumbed before the webhook labelled them are labelled by the leader and then handled.

The bridge's pod watch selects ``kontinue.dev/plumbed=true`` (queue_bridge/caches.py); a pod an
older webhook plumbed has the lineage annotation and the finalizer but no label. The leader
labels such pods once (queue_bridge/adoption.py), and an eviction then counts them as members.
A pod that was never plumbed is left alone.
"""

from __future__ import annotations

from typing import Any

from kontinue import keys
from kontinue.kube import api, resources
from queue_bridge import adoption
from tests.integration.bridge.conftest import NS, Cluster
from tests.waiting import eventually

Obj = dict[str, Any]


def test_needs_label_only_for_plumbed_pods_without_it() -> None:
    def pod(
        labels: Obj | None = None, annotations: Obj | None = None, finalizers: Any = None
    ) -> Obj:
        return {
            "metadata": {"labels": labels, "annotations": annotations, "finalizers": finalizers}
        }

    lineage = {keys.LINEAGE_ANNOTATION: "team-a/Job/train/uid"}
    assert adoption.needs_label(pod(annotations=lineage))
    assert adoption.needs_label(pod(finalizers=[keys.CHECKPOINT_FINALIZER]))
    assert not adoption.needs_label(pod(annotations=lineage, labels={keys.PLUMBED_LABEL: "true"}))
    assert not adoption.needs_label(pod(annotations={"other": "x"}, finalizers=["x/y"]))
    assert not adoption.needs_label({})


async def test_a_pod_plumbed_before_the_label_is_labelled_and_checkpointed(
    cluster: Cluster,
) -> None:
    await cluster.queues()
    job = await cluster.job()
    workload = await cluster.workload(job)
    old, new = await cluster.pods(job, n=2)
    # as an older webhook left it: plumbed, not labelled
    await cluster.admin.patch(
        resources.PODS,
        old["metadata"]["name"],
        {"metadata": {"labels": {keys.PLUMBED_LABEL: None}}},
        content_type=api.MERGE_PATCH,
        namespace=NS,
    )
    stranger = await cluster.admin.create(
        resources.PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "not-opted-in", "namespace": NS},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        },
    )

    await cluster.start_bridge()

    async def labels(pod: Obj) -> Obj:
        now = await cluster.admin.get(resources.PODS, pod["metadata"]["name"], namespace=NS)
        found: Obj = now["metadata"].get("labels") or {}
        return found

    async def adopted() -> bool:
        return (await labels(old)).get(keys.PLUMBED_LABEL) == keys.PLUMBED_VALUE

    await eventually(adopted, what="the unlabelled plumbed pod labelled")
    assert keys.PLUMBED_LABEL not in await labels(stranger)

    await cluster.evict(workload)

    async def created() -> bool:
        return len(await cluster.checkpoints()) == 1

    await eventually(created, what="Checkpoint created")
    cp = await cluster.one_checkpoint()
    assert sorted(m.pod_name for m in cp.spec.members) == sorted(
        p["metadata"]["name"] for p in (old, new)
    )
