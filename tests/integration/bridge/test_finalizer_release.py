"""The bridge's finalizer release (``queue_bridge.acting.remove_finalizer``) against the emulated
apiserver over real HTTP: one JSON patch removes ``kontinue.dev/checkpoint`` and the
``kontinue.dev/lineage-hash`` label (docs/bridge.md, the finalizer), and a view that is stale
about either is refused as a ``Conflict`` (re-read and decide again), never half applied."""

from __future__ import annotations

from typing import Any

import pytest

from kontinue import keys
from kontinue.kube import api, errors, resources
from kontinue.models import base, core
from queue_bridge import acting


async def _pod(kube: api.Api, name: str, labels: dict[str, str]) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": "train", **labels},
            "finalizers": ["example.com/other", keys.CHECKPOINT_FINALIZER],
        },
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:v1"}]},
    }
    created: dict[str, Any] = await kube.create(resources.PODS, body)
    return created


async def test_release_drops_the_finalizer_and_the_lineage_label_in_one_patch(
    kube: api.Api,
) -> None:
    raw = await _pod(kube, "labelled", {keys.CHECKPOINT_LINEAGE_LABEL: "abc123"})
    assert await acting.remove_finalizer(kube, base.parse(core.Pod, raw))
    live = await kube.get(resources.PODS, "labelled", namespace="default")
    assert live["metadata"]["finalizers"] == ["example.com/other"]
    assert live["metadata"]["labels"] == {"app": "train"}


async def test_release_of_a_pod_without_the_label_keeps_its_labels(kube: api.Api) -> None:
    raw = await _pod(kube, "plain", {})
    assert await acting.remove_finalizer(kube, base.parse(core.Pod, raw))
    live = await kube.get(resources.PODS, "plain", namespace="default")
    assert live["metadata"]["finalizers"] == ["example.com/other"]
    assert live["metadata"]["labels"] == {"app": "train"}


async def test_a_view_stale_about_the_label_is_a_conflict_and_changes_nothing(
    kube: api.Api,
) -> None:
    raw = await _pod(kube, "stale", {keys.CHECKPOINT_LINEAGE_LABEL: "abc123"})
    seen = base.parse(core.Pod, raw)  # what the cache still holds
    await kube.json_patch(
        resources.PODS,
        "stale",
        [{"op": "remove", "path": "/metadata/labels/kontinue.dev~1lineage-hash"}],
        namespace="default",
    )
    with pytest.raises(errors.Conflict):
        await acting.remove_finalizer(kube, seen)
    live = await kube.get(resources.PODS, "stale", namespace="default")
    assert keys.CHECKPOINT_FINALIZER in live["metadata"]["finalizers"]  # not half applied
    fresh = base.parse(core.Pod, live)  # the re-read: released
    assert await acting.remove_finalizer(kube, fresh)
    live = await kube.get(resources.PODS, "stale", namespace="default")
    assert live["metadata"]["finalizers"] == ["example.com/other"]
