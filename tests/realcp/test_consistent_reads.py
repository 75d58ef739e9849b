"""The webhook's live read (webhook/freshness.py) on a real kube-apiserver, as clusters serve it.

The live read is a consistent LIST (no ``resourceVersion``). kube-apiserver v1.36 serves it from
its watch cache, after waiting for the cache to reach etcd's current revision, when every etcd
endpoint answers watch progress requests correctly (3.4.31+ or 3.5.13+); with an older etcd it
reads etcd and decodes every Checkpoint of the namespace (kubernetes/kubernetes
``staging/src/k8s.io/apiserver/pkg/storage/cacher/delegator.go`` ``GetList``,
``staging/src/k8s.io/apiserver/pkg/storage/feature/feature_support_checker.go``). Real clusters
run such an etcd (kubeadm refuses an external one older than 3.5.24), and so does this tier
(tests/realcp/prepare-assets.sh). Proved here, through the apiserver's own metrics: the read is
served from the watch cache, not etcd; and on that path it still holds every Checkpoint created
before it, by another client, the moment before.
"""

from __future__ import annotations

import re

from kontinue import keys
from kontinue.kube import api, client, resources
from kontinue.models import checkpoint
from tests.realcp import controlplane
from webhook import freshness

_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def _metric(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found is None or found["name"] != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', found["labels"]))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(found["value"])
    return total


def _consistent_reads(metrics: str) -> tuple[float, float]:
    """Consistent LISTs of Checkpoints the apiserver answered through its watch cache: served
    from it, and read from etcd after the cache did not catch up (``delegator.go``)."""
    served = {"group": "kontinue.dev", "resource": "checkpoints", "success": "true"}
    name = "apiserver_watch_cache_consistent_read_total"
    return (
        _metric(metrics, name, fallback="false", **served),
        _metric(metrics, name, fallback="true", **served),
    )


def _checkpoint(lineage: checkpoint.Lineage, name: str) -> dict[str, object]:
    return {
        "apiVersion": resources.CHECKPOINTS.api_version,
        "kind": "Checkpoint",
        "metadata": {
            "name": name,
            "labels": {
                keys.CHECKPOINT_OWNER_UID_LABEL: lineage.owner_uid,
                keys.CHECKPOINT_LINEAGE_LABEL: lineage.hash,
            },
        },
        "spec": {
            "lineage": lineage.model_dump(by_alias=True),
            "trigger": {"source": "Kueue", "reason": "Preempted", "time": "2026-12-02T10:00:00Z"},
            "members": [{"podName": f"{name}-0", "podUid": f"uid-{name}", "index": 0}],
        },
    }


async def test_the_live_read_is_served_from_the_watch_cache_and_sees_the_newest_set(
    crds: controlplane.ControlPlane, admin: api.Api, namespace: str
) -> None:
    version = controlplane.etcd_version(crds.assets / "etcd")
    assert controlplane.serves_consistent_lists(version), (
        f"the tier's etcd {'.'.join(map(str, version))} is older than real clusters run "
        "(3.5.13+): kube-apiserver reads every consistent LIST from etcd. Prepare the assets "
        "with tests/realcp/prepare-assets.sh (docs/testing.md)"
    )
    lineage = checkpoint.Lineage(
        namespace=namespace, owner_kind="Job", owner_name="train", owner_uid=f"uid-{namespace}"
    )
    other = lineage.model_copy(update={"owner_name": "other", "owner_uid": "uid-other"})
    for i in range(20):  # what the label selector passes over
        await admin.create(
            resources.CHECKPOINTS, _checkpoint(other, f"other-{i}"), namespace=namespace
        )
    before = _consistent_reads(crds.metrics())
    # The webhook's reader on its own connection; the sets are created by another client.
    reader_client = await client.api_client_from_dict(crds.kubeconfig())
    try:
        reader = freshness.Reader(api.Api(reader_client, field_manager="reader"), seconds=30.0)
        for i in range(5):
            await admin.create(
                resources.CHECKPOINTS, _checkpoint(lineage, f"set-{i}"), namespace=namespace
            )
            found, listed_at = await reader.read(lineage)
            assert sorted(c.name for c in found) == [f"set-{n}" for n in range(i + 1)]
            assert listed_at.isdigit()
    finally:
        await reader_client.close()
    after = _consistent_reads(crds.metrics())
    # Every read went the watch cache's way (a cache that had not caught up in 3 s would have
    # been read around, "fallback": still a consistent read), and the cache itself served some.
    cached, fell_back = (a - b for a, b in zip(after, before, strict=True))
    assert cached + fell_back >= 5, (before, after)
    assert cached >= 1, (before, after)
