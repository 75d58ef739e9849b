"""Proof 7: the ``volcano`` overlay on a cluster with Volcano's CRDs and **no** Kueue CRDs.

A second control plane (its own etcd, kube-apiserver and kube-controller-manager) with only
Kontinue's and Volcano's CRDs. The overlay installs with its real RBAC (no Kueue grants); the
webhook and the bridge run as their ServiceAccounts with ``KONTINUE_QUEUE_SYSTEMS=volcano`` (what
the overlay sets). The bridge syncs, takes the Lease, and turns a Volcano eviction of a plumbed
pod (the evictor's ``Ready=False``/``Evict`` + ``DisruptionTarget`` status write, then its DELETE)
into a Checkpoint that succeeds from the kubelet's termination message, then releases the pod.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kontinue import keys
from tests import fixtures
from tests.realcp import controlplane, processes
from tests.realcp.conftest import REPO, crd_names, crd_source
from tests.realcp.install import Variant

VOLCANO_CRDS = REPO / "tests" / "fixtures" / "upstream" / "volcano" / "crds"
OURS = REPO / "manifests" / "crds"
SAVED = json.dumps({"kontinue": "saved", "step": 42, "bytes": 1024})


@pytest.fixture(scope="module")
def volcano_plane(control_plane: controlplane.ControlPlane) -> Iterator[controlplane.ControlPlane]:
    """A second control plane: Kontinue's and Volcano's CRDs only."""
    plane = controlplane.start(control_plane.assets)
    try:
        plane.start_controller_manager()
        for directory in (OURS, VOLCANO_CRDS):
            plane.kubectl("apply", "--server-side", *crd_source(directory))
        plane.wait_established([n for d in (OURS, VOLCANO_CRDS) for n in crd_names(d)])
        yield plane
    finally:
        controlplane.remove(plane)


def _apply(plane: controlplane.ControlPlane, *docs: dict[str, Any]) -> list[dict[str, Any]]:
    out = plane.kubectl(
        "apply",
        "--server-side",
        "--field-manager=realcp-test",
        "-o",
        "json",
        "-f",
        "-",
        stdin="\n---\n".join(json.dumps(d) for d in docs),
    ).stdout
    parsed = json.loads(out)
    items: list[dict[str, Any]] = parsed.get("items", [parsed])
    return items


def _get(plane: controlplane.ControlPlane, *args: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(plane.kubectl("get", *args, "-o", "json").stdout)
    return found


def _until(check: Any, what: str, seconds: float = 40.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.3)


def test_volcano_only_bridge_leads_and_checkpoints_a_volcano_eviction(
    volcano_plane: controlplane.ControlPlane,
) -> None:
    plane = volcano_plane
    assert "workloads.kueue.x-k8s.io" not in plane.kubectl("get", "crd").stdout
    installed = processes.install(
        plane, Variant("volcano", namespace=f"kontinue-{secrets.token_hex(3)}")
    )
    ns = f"ml-{secrets.token_hex(3)}"
    try:
        for deployment in ("kontinue-webhook", "kontinue-bridge"):
            assert processes.container_env(installed, deployment)["KONTINUE_QUEUE_SYSTEMS"] == (
                "volcano"
            )
        installed.programs["webhook"] = processes.start_webhook(installed)
        bridge = processes.start_bridge(installed, identity="bridge-0")
        installed.programs["bridge"] = bridge
        lease = _until(
            lambda: (
                plane.kubectl(
                    "get",
                    "lease",
                    "kontinue-bridge",
                    "-n",
                    installed.namespace,
                    "-o",
                    "jsonpath={.spec.holderIdentity}",
                    check=False,
                ).stdout
                == "bridge-0"
            ),
            "the Volcano-only bridge holds the Lease",
        )
        assert lease
        assert processes.bridge_ready(bridge)

        # A Volcano workload in an opted-in Queue: vcjob, PodGroup, and the PVC the policy names.
        plane.kubectl("create", "namespace", ns)
        # first the claim: without it the webhook leaves the workload alone (webhook/claims.py)
        _apply(
            plane,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "kontinue", "namespace": ns},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )
        queue = fixtures.load_one(VOLCANO_CRDS.parent / "examples" / "queue-checkpoint-optin.yaml")
        queue["metadata"]["name"] = f"q-{secrets.token_hex(3)}"
        _apply(plane, queue)
        body = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "ckpt-train", "namespace": ns},
            "spec": {
                "queue": queue["metadata"]["name"],
                "minAvailable": 1,
                # upstream issues #2560 / #5885: the webhook makes preemption harmless
                "policies": [
                    {"event": "PodEvicted", "action": "RestartJob"},
                    {"event": "PodFailed", "action": "TerminateJob"},
                ],
                "tasks": [
                    {
                        "name": "worker",
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "containers": [{"name": "trainer", "image": "registry.example/t:1"}]
                            }
                        },
                    }
                ],
            },
        }
        safe_task = [{"exitCode": 143, "action": "SyncJob"}]

        def rewritten() -> bool:  # the webhook's caches see the opted-in Queue
            dry = plane.kubectl(
                "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(body)
            ).stdout
            return bool(json.loads(dry)["spec"]["tasks"][0].get("policies") == safe_task)

        _until(rewritten, "the webhook rewrites an opted-in vcjob's policies")
        (vcjob,) = _apply(plane, body)
        # stored by a real apiserver through Volcano's CRD schema, as the webhook patched it
        assert vcjob["spec"]["policies"] == [{"event": "PodFailed", "action": "TerminateJob"}]
        assert vcjob["spec"]["tasks"][0]["policies"] == safe_task
        owner = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "name": "ckpt-train",
            "uid": vcjob["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        group = f"ckpt-train-{vcjob['metadata']['uid']}"
        _apply(
            plane,
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": group, "namespace": ns, "ownerReferences": [owner]},
                "spec": {"minMember": 1, "queue": queue["metadata"]["name"]},
            },
        )
        # The vc-controller's pod, bound by the scheduler; the real webhook plumbs it.
        pod = json.loads(
            plane.kubectl(
                "create",
                "-o",
                "json",
                "-f",
                "-",
                stdin=json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": "ckpt-train-worker-0",
                            "namespace": ns,
                            "labels": {
                                "volcano.sh/job-name": "ckpt-train",
                                "volcano.sh/queue-name": queue["metadata"]["name"],
                            },
                            "annotations": {
                                "scheduling.k8s.io/group-name": group,
                                "volcano.sh/queue-name": queue["metadata"]["name"],
                            },
                            "ownerReferences": [owner],
                        },
                        "spec": {
                            "schedulerName": "volcano",
                            "nodeName": "node-1",
                            "restartPolicy": "OnFailure",
                            "containers": [{"name": "trainer", "image": "registry.example/t:1"}],
                        },
                    }
                ),
            ).stdout
        )
        assert keys.CHECKPOINT_FINALIZER in pod["metadata"]["finalizers"]
        assert keys.LINEAGE_ANNOTATION in pod["metadata"]["annotations"]
        started = "2026-12-03T10:00:00Z"
        pod["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": started}],
            "containerStatuses": [
                {
                    "name": "trainer",
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example/t:1",
                    "imageID": "",
                    "state": {"running": {"startedAt": started}},
                }
            ],
        }
        plane.kubectl("replace", "--subresource=status", "-f", "-", stdin=json.dumps(pod))
        # Volcano's evictor: Ready=False (Evict) + DisruptionTarget, then a graceful DELETE.
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        current = _get(plane, "pod", pod["metadata"]["name"], "-n", ns)
        current["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Evict",
                "message": "Pod is evicted, because of reclaim",
                "lastTransitionTime": now,
            },
            {
                "type": keys.POD_CONDITION_DISRUPTION_TARGET,
                "status": "True",
                "reason": keys.DISRUPTION_PREEMPTION_BY_SCHEDULER,
                "message": "volcano: preempting to accommodate a higher priority pod",
                "lastTransitionTime": now,
            },
        ]
        plane.kubectl("replace", "--subresource=status", "-f", "-", stdin=json.dumps(current))
        plane.kubectl("delete", "pod", pod["metadata"]["name"], "-n", ns, "--wait=false")

        def checkpoint() -> dict[str, Any] | None:
            items = _get(plane, "checkpoints", "-n", ns)["items"]
            return items[0] if items else None

        cp = _until(checkpoint, "a Checkpoint of the Volcano eviction")
        assert cp["spec"]["trigger"]["source"] == "Volcano"
        assert cp["spec"]["lineage"]["ownerKind"] == "Job.batch.volcano.sh"
        assert [m["podUid"] for m in cp["spec"]["members"]] == [pod["metadata"]["uid"]]

        # The kubelet reports the saved exit (termination message), then its final DELETE.
        current = _get(plane, "pod", pod["metadata"]["name"], "-n", ns)
        current["status"]["phase"] = "Failed"
        current["status"]["containerStatuses"] = [
            {
                "name": "trainer",
                "ready": False,
                "restartCount": 0,
                "image": "registry.example/t:1",
                "imageID": "",
                "state": {
                    "terminated": {
                        "exitCode": 143,
                        "reason": "Error",
                        "message": SAVED,
                        "startedAt": started,
                        "finishedAt": now,
                    }
                },
            }
        ]
        plane.kubectl("replace", "--subresource=status", "-f", "-", stdin=json.dumps(current))

        def succeeded() -> bool:
            found = checkpoint()
            return bool(found and found.get("status", {}).get("phase") == "Succeeded")

        _until(succeeded, "the Checkpoint Succeeded")

        def released() -> bool:
            got = plane.kubectl(
                "get", "pod", pod["metadata"]["name"], "-n", ns, "-o", "json", check=False
            )
            if got.returncode != 0:
                return True
            return keys.CHECKPOINT_FINALIZER not in json.loads(got.stdout)["metadata"].get(
                "finalizers", []
            )

        _until(released, "the bridge released its finalizer")
        assert bridge.popen.poll() is None, bridge.tail()
    finally:
        installed.uninstall_webhooks()
        for program in installed.programs.values():
            program.stop()
