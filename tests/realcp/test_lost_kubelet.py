"""Issue 20 item 2 on a real kube-apiserver v1.36.2 and job controller: the kubelet is lost.

There is no kubelet in this tier, which is exactly a lost one: the Job's pod is bound to a Node
object no kubelet serves, the test writes the statuses a kubelet would (running; then, late, the
saved exit), and the real Eviction API deletes the pod, which then stays ``Terminating`` because
no kubelet confirms it. The real bridge (its console script, under its ServiceAccount) marks the
member ``Unreported`` at grace period + margin, fails the set and releases its finalizer; the
webhook then offers the unreported member's directory, unwaited, to a new pod of the Job (a
dry-run create through the real apiserver); when the kubelet's report finally arrives the set
becomes ``Succeeded`` (``LateReport``) and the Job's replacement restores from it without the
Job counting a failure. The timeline is docs/troubleshooting.md's.
"""

from __future__ import annotations

import json
from typing import Any

from kontinue import keys
from kontinue.kube import api, resources
from queue_bridge import lifecycle
from tests.realcp import objects, processes, unserved_node

Obj = dict[str, Any]
GRACE = 2
MARGIN = 3
SAVED = json.dumps({"kontinue": "saved", "step": 33, "bytes": 4096})


def _env(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env") or []}


async def test_a_save_whose_kubelet_was_lost_is_offered_verified_then_upgraded_late(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    queue = await unserved_node.short_grace_queue(admin, namespace)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    node = await unserved_node.node(admin)
    bridge = processes.start_bridge(kontinue, KONTINUE_FINALIZER_MARGIN_SECONDS=str(MARGIN))
    kontinue.programs["bridge"] = bridge
    try:
        job = await admin.create(
            resources.JOBS,
            unserved_node.bound_job(namespace, queue, node, grace=GRACE),
            namespace=namespace,
        )

        async def plumbed() -> bool:
            pods = await objects.pods(admin, namespace)
            return len(pods) == 1 and keys.CHECKPOINT_FINALIZER in (
                pods[0]["metadata"].get("finalizers") or []
            )

        await objects.until(plumbed, "the pod created and plumbed", seconds=60)
        (pod,) = await objects.pods(admin, namespace)
        assert pod["spec"]["terminationGracePeriodSeconds"] == GRACE
        started = unserved_node.now()
        await unserved_node.write_status(
            admin, pod, {"trainer": {"running": {"startedAt": started}}}, "Running"
        )
        await objects.until(lambda: _ready(bridge), f"bridge ready\n{bridge.tail()}", seconds=60)
        await admin.evict(pod["metadata"]["name"], namespace=namespace)

        async def sets() -> list[Obj]:
            items: list[Obj] = (await admin.list(resources.CHECKPOINTS, namespace=namespace))[
                "items"
            ]
            return items

        async def unreported() -> bool:
            found = await sets()
            return len(found) == 1 and (found[0].get("status") or {}).get("phase") == "Failed"

        await objects.until(
            unreported, f"the set Failed at grace + margin\n{bridge.tail()}", seconds=90
        )
        (cp,) = await sets()
        (member,) = cp["status"]["members"]
        assert member["state"] == "Unreported", member
        assert member["reason"].endswith(lifecycle.NO_REPORT), member
        assert "exitCode" not in member
        saved = next(c for c in cp["status"]["conditions"] if c["type"] == keys.CONDITION_SAVED)
        assert (saved["status"], saved["reason"]) == ("False", "MemberUnreported")

        async def released() -> bool:
            current = await admin.get(resources.PODS, pod["metadata"]["name"], namespace=namespace)
            return keys.CHECKPOINT_FINALIZER not in (current["metadata"].get("finalizers") or [])

        await objects.until(released, "the bridge released its finalizer", seconds=60)
        lost = await admin.get(resources.PODS, pod["metadata"]["name"], namespace=namespace)
        assert lost["metadata"].get("deletionTimestamp")  # still Terminating: no kubelet

        # Unknown but verifiable: a new pod of the Job is told to check that directory, unwaited.
        probe = objects.pod(namespace, queue=queue)
        probe["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job["metadata"]["name"],
                "uid": job["metadata"]["uid"],
                "controller": True,
            }
        ]
        offered: list[Obj] = []

        async def webhook_offers_it() -> bool:
            dry = await admin.create(resources.PODS, probe, namespace=namespace, dry_run=True)
            if (dry["metadata"].get("annotations") or {}).get(keys.RESTORE_FROM_ANNOTATION) != cp[
                "metadata"
            ]["name"]:
                return False
            offered.append(dry)
            return True

        await objects.until(webhook_offers_it, "the webhook offers the unreported member")
        (restore,) = [
            c
            for c in offered[-1]["spec"]["initContainers"]
            if c["name"] == keys.RESTORE_INIT_CONTAINER
        ]
        env = _env(restore)
        assert env[keys.ENV_WAIT_FOR]["value"].endswith(f"/{pod['metadata']['uid']}")
        assert env[keys.ENV_WAIT_SECONDS]["value"] == "0"

        # The kubelet returns and reports the save: exit 143 with the saved message, finished
        # inside the grace period.
        await unserved_node.write_status(
            admin,
            pod,
            {
                "trainer": {
                    "terminated": {
                        "exitCode": 143,
                        "reason": "Error",
                        "message": SAVED,
                        "startedAt": started,
                        "finishedAt": lost["metadata"]["deletionTimestamp"],
                    }
                }
            },
            "Failed",
        )

        async def upgraded() -> bool:
            (found,) = await sets()
            return (found.get("status") or {}).get("phase") == "Succeeded"

        await objects.until(
            upgraded, f"the late report upgrades the set\n{bridge.tail()}", seconds=60
        )
        (cp,) = await sets()
        (member,) = cp["status"]["members"]
        assert (member["state"], member["exitCode"], member["step"]) == ("Saved", 143, 33)
        assert lifecycle.LATE_REPORT in member["reason"]
        saved = next(c for c in cp["status"]["conditions"] if c["type"] == keys.CONDITION_SAVED)
        assert (saved["status"], saved["reason"]) == ("True", "LateReport")

        # The job controller replaces the failed pod (DisruptionTarget: ignored, not counted);
        # the replacement restores from the upgraded set.
        gone = pod["metadata"]["uid"]

        async def replaced() -> bool:
            return any(p["metadata"]["uid"] != gone for p in await objects.pods(admin, namespace))

        await objects.until(replaced, "the job controller's replacement", seconds=60)
        (new,) = [p for p in await objects.pods(admin, namespace) if p["metadata"]["uid"] != gone]
        assert (
            new["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == (cp["metadata"]["name"])
        )
        current = await admin.get(resources.JOBS, job["metadata"]["name"], namespace=namespace)
        assert not (current.get("status") or {}).get("failed"), current.get("status")
    finally:
        await admin.delete(resources.NODES, node)


async def _ready(program: processes.Program) -> bool:
    return processes.bridge_ready(program)
