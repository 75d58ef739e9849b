"""Proof 3: the webhook and the bridge under exactly the rendered RBAC, on kube-apiserver v1.36.2.

:data:`USES` names, for every rule the ``both`` overlay grants Kontinue's two ServiceAccounts,
the code that calls it. The static test fails on a grant :data:`USES` does not explain (a grant
nothing uses) and on an entry nothing grants. The dynamic test runs both programs as their
ServiceAccounts (TokenRequest tokens) through a flow — caches sync, the Lease is taken, a Job of
an opted-in queue is plumbed, one of its pods is evicted (Eviction API), the bridge records a
Checkpoint, writes Events and releases its finalizer — and reads the apiserver's audit log: no
request of theirs was refused (403), and every call they made is one the RBAC grants.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from kontinue import keys
from kontinue.kube import api, resources
from tests.realcp import controlplane, objects, processes
from tests.realcp.conftest import REPO
from tests.realcp.install import Variant

WEBHOOK = "kontinue-webhook"
BRIDGE = "kontinue-bridge"
CACHE = "kontinue/kube/watching.py: WatchCache (list, then watch)"

# (account, apiGroup, resource[/subresource], verb) -> the code that makes the call
USES: dict[tuple[str, str, str, str], str] = {
    # webhook: watch caches (webhook/caches.py), its certificate (webhook/certs.py)
    **{
        (WEBHOOK, group, resource, verb): f"webhook/caches.py: {CACHE}"
        for group, resource in (
            ("kontinue.dev", "checkpoints"),
            ("kontinue.dev", "checkpointpolicies"),
            ("", "nodes"),
            ("", "persistentvolumeclaims"),
            ("kueue.x-k8s.io", "clusterqueues"),
            ("kueue.x-k8s.io", "localqueues"),
            ("scheduling.volcano.sh", "queues"),
            ("scheduling.volcano.sh", "podgroups"),
        )
        for verb in ("list", "watch")
    },
    # ... and one namespaced, label-selected list of a plumbed pod's lineage at its CREATE
    (WEBHOOK, "kontinue.dev", "checkpoints", "list"): (
        "webhook/freshness.py: resources.CHECKPOINTS (a live list; and the watch cache)"
    ),
    (WEBHOOK, "", "pods", "list"): "webhook/freshness.py: resources.PODS (a live list)",
    # Events: both deployables write through kontinue/kube/events.py (webhook/events.py and
    # queue_bridge/recording.py call it)
    (WEBHOOK, "", "events", "create"): "kontinue/kube/events.py: kube.create(resources.EVENTS",
    (WEBHOOK, "", "events", "get"): 'kontinue/kube/events.py: resources.EVENTS, meta["name"]',
    (WEBHOOK, "", "events", "patch"): "kontinue/kube/events.py: await kube.patch(",
    (WEBHOOK, "", "secrets", "get"): "webhook/certs.py: api.get(resources.SECRETS",
    (WEBHOOK, "", "secrets", "update"): "webhook/certs.py: api.replace(resources.SECRETS",
    **{
        (WEBHOOK, "admissionregistration.k8s.io", resource, verb): f"webhook/certs.py: {call}"
        for resource in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
        for verb, call in (("get", "api.get(resource, name)"), ("patch", "caBundle"))
    },
    # bridge: watch caches (queue_bridge/caches.py), writes in queue_bridge/acting.py,
    # recording.py (Events) and leader.py (Lease)
    **{
        (BRIDGE, group, resource, verb): f"queue_bridge/caches.py: {CACHE}"
        for group, resource in (
            ("kontinue.dev", "checkpoints"),
            ("kontinue.dev", "checkpointpolicies"),
            ("", "pods"),
            ("", "nodes"),
            ("batch", "jobs"),
            ("kueue.x-k8s.io", "workloads"),
            ("kueue.x-k8s.io", "clusterqueues"),
            ("kueue.x-k8s.io", "localqueues"),
            ("kueue.x-k8s.io", "resourceflavors"),
            ("kueue.x-k8s.io", "admissionchecks"),
            ("scheduling.volcano.sh", "queues"),
            ("scheduling.volcano.sh", "podgroups"),
            ("batch.volcano.sh", "jobs"),
        )
        for verb in ("list", "watch")
    },
    (
        BRIDGE,
        "kontinue.dev",
        "checkpoints",
        "create",
    ): "queue_bridge/acting.py: kube.create(resources.CHECKPOINTS",
    (BRIDGE, "kontinue.dev", "checkpoints", "patch"): "queue_bridge/acting.py: def write_members",
    (
        BRIDGE,
        "kontinue.dev",
        "checkpoints",
        "get",
    ): "queue_bridge/acting.py: def count_failed_restore",
    (
        BRIDGE,
        "kontinue.dev",
        "checkpoints/status",
        "patch",
    ): "queue_bridge/acting.py: def write_status",
    (BRIDGE, "", "pods", "patch"): "queue_bridge/acting.py: def remove_finalizer",
    (BRIDGE, "", "events", "create"): "kontinue/kube/events.py: kube.create(resources.EVENTS",
    (BRIDGE, "", "events", "get"): 'kontinue/kube/events.py: resources.EVENTS, meta["name"]',
    (BRIDGE, "", "events", "patch"): "kontinue/kube/events.py: await kube.patch(",
    (
        BRIDGE,
        "coordination.k8s.io",
        "leases",
        "get",
    ): "queue_bridge/leader.py: kube.get(resources.LEASES",
    (BRIDGE, "coordination.k8s.io", "leases", "create"): "queue_bridge/leader.py: kube.create(",
    (
        BRIDGE,
        "coordination.k8s.io",
        "leases",
        "update",
    ): "queue_bridge/leader.py: kube.replace(resources.LEASES",
    (
        BRIDGE,
        "kueue.x-k8s.io",
        "workloads/status",
        "patch",
    ): "queue_bridge/acting.py: def apply_status",
    (
        BRIDGE,
        "kueue.x-k8s.io",
        "admissionchecks/status",
        "patch",
    ): "queue_bridge/acting.py: def apply_status",
}


def _granted(docs: list[dict[str, Any]], namespace: str) -> set[tuple[str, str, str, str]]:
    """(account, group, resource, verb) for every rule bound to our two ServiceAccounts."""
    roles = {
        (d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")
    }
    found = set()
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert subject["namespace"] == namespace
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            found.add((subject["name"], group, resource, verb))
    return found


def test_every_grant_has_a_user_and_every_listed_call_a_grant(
    control_plane: controlplane.ControlPlane,
) -> None:
    docs = Variant("both", namespace="kontinue-system").render(control_plane)
    granted = _granted(docs, "kontinue-system")
    assert granted - set(USES) == set(), "granted, but nothing listed uses it"
    assert set(USES) - granted == set(), "listed as used, but not granted"
    for key, where in USES.items():
        path, _, needle = where.partition(": ")
        source = (REPO / path).read_text()
        assert needle.split(" (")[0] in source or "WatchCache" in needle, (key, where)


@pytest.fixture
def both(crds: controlplane.ControlPlane) -> Iterator[processes.Installed]:
    installed = processes.install(
        crds, Variant("both", namespace=f"kontinue-{secrets.token_hex(3)}")
    )
    try:
        yield installed
    finally:
        installed.uninstall_webhooks()
        for program in installed.programs.values():
            program.stop()
        crds.kubectl("delete", "namespace", installed.namespace, "--wait=false")


async def test_the_flow_makes_only_granted_calls(
    both: processes.Installed, admin: api.Api, namespace: str
) -> None:
    plane = both.plane
    both.programs["webhook"] = processes.start_webhook(both)
    bridge = processes.start_bridge(
        both,
        identity="bridge-0",
        KONTINUE_FINALIZER_MARGIN_SECONDS="1",
        KONTINUE_SETTLE_SECONDS="0",
    )
    both.programs["bridge"] = bridge
    queue = await objects.queues(admin, namespace, opted_in=True)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    body = objects.job(namespace, queue)
    body["spec"].update(parallelism=1, completions=1)
    await admin.create(resources.JOBS, body, namespace=namespace)

    async def plumbed() -> bool:
        pods = await objects.pods(admin, namespace)
        return len(pods) == 1 and keys.CHECKPOINT_FINALIZER in (
            pods[0]["metadata"].get("finalizers") or []
        )

    await objects.until(plumbed, "the Job's pod, plumbed")

    async def ready() -> bool:
        return processes.bridge_ready(bridge)

    await objects.until(ready, "the bridge ready (caches synced)", 40)
    (pod,) = await objects.pods(admin, namespace)
    await admin.evict(pod["metadata"]["name"], namespace=namespace)

    async def checkpointed() -> bool:
        found = await admin.list(resources.CHECKPOINTS, namespace=namespace)
        return bool(found["items"])

    await objects.until(checkpointed, "the bridge's Checkpoint of the eviction", 60)

    async def released() -> bool:
        pods = await objects.pods(admin, namespace)
        return all(
            keys.CHECKPOINT_FINALIZER not in (p["metadata"].get("finalizers") or [])
            for p in pods
            if p["metadata"]["uid"] == pod["metadata"]["uid"]
        )

    await objects.until(released, "the bridge released its finalizer", 90)
    events = await admin.list(resources.EVENTS, namespace=namespace)
    assert any(
        e.get("source", {}).get("component") or e.get("reportingComponent") for e in events["items"]
    )

    granted = _granted(both.docs, both.namespace)
    prefix = f"system:serviceaccount:{both.namespace}:"
    seen: dict[tuple[str, str, str, str], int] = {}
    refused = []
    for event in plane.audit(prefix):
        ref = event.get("objectRef") or {}
        if not ref.get("resource"):
            continue  # discovery, /version
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = (
            event["user"]["username"][len(prefix) :],
            ref.get("apiGroup", ""),
            resource,
            event["verb"],
        )
        code = (event.get("responseStatus") or {}).get("code", 0)
        message = (event.get("responseStatus") or {}).get("message") or ""
        # RBAC's refusal names the user ("... cannot create resource ..."); a 403 from
        # NamespaceLifecycle (an Event into a namespace an earlier test is deleting) is not one.
        if code == 403 and " cannot " in message:
            refused.append((key, message))
        seen[key] = seen.get(key, 0) + 1
    assert refused == []
    assert set(seen) - granted == set(), "calls nothing grants"
    # The flow exercised the core of both programs' grants.
    exercised = set(seen)
    for must in (
        (WEBHOOK, "", "secrets", "get"),
        (WEBHOOK, "admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch"),
        (BRIDGE, "coordination.k8s.io", "leases", "create"),
        (BRIDGE, "kontinue.dev", "checkpoints", "create"),
        (BRIDGE, "kontinue.dev", "checkpoints/status", "patch"),
        (BRIDGE, "", "pods", "patch"),
        (BRIDGE, "", "events", "create"),
        (BRIDGE, "scheduling.volcano.sh", "podgroups", "watch"),
        (BRIDGE, "kueue.x-k8s.io", "workloads", "list"),
    ):
        assert must in exercised, must
