"""The emulated Job controller and scheduler make the requests the real ones made.

A mutating webhook over real HTTPS (the recording rig's rules) sees every pod request of a
preemption scenario like the recorded one (tests/fixtures/cluster: AdmissionReviews a real
kube-apiserver v1.36.2 sent, 03/06/07/24/25/26/30). Compared per request: who (username and
groups), the operation, the (sub)resource, the options, the order, and the fields each writer
touches. Like the recorded Jobs, both carry the podFailurePolicy rule Ignore on DisruptionTarget.
Values that differ by nature (uids, names, times, the 120 s grace) are left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from emulator import cluster, gpus, nodes
from kontinue import keys
from kontinue.kube import api as kube_api
from kontinue.kube import resources
from tests.integration.cluster import recording, workloads
from tests.integration.emulator import test_admission

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "cluster"
Object = dict[str, Any]


def _recorded(name: str) -> Object:
    review: Object = json.loads((RECORDED / f"{name}.json").read_text())["request"]
    return review


def _envelope(request: Object) -> Object:
    options = dict(request.get("options") or {})
    options.pop("gracePeriodSeconds", None)  # the pod's own grace: 120 recorded, 5 here
    return {
        "who": (request["userInfo"]["username"], request["userInfo"]["groups"]),
        "operation": request["operation"],
        "resource": request["resource"],
        "subResource": request.get("subResource"),
        "requestSubResource": request.get("requestSubResource"),
        "options": options,
        "grace given": "gracePeriodSeconds" in (request.get("options") or {}),
        "dryRun": request["dryRun"],
    }


def _by(reviews: list[Object], user: str) -> list[Object]:
    return [r["request"] for r in reviews if r["request"]["userInfo"]["username"] == user]


def _conditions(obj: Object) -> dict[str, Object]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


async def test_controller_and_scheduler_requests_match_the_recording(tmp_path: Path) -> None:
    webhook = test_admission.Webhook(hosts=["127.0.0.1"])
    await webhook.start()
    try:
        one_gpu = [nodes.NodeSpec("gpu-a", gpu=gpus.GpuProfile(count=1))]
        async with cluster.Cluster(nodes=one_gpu, workdir=tmp_path) as c:
            admin = c.client()
            config = test_admission.mutating(
                "capture",
                {"url": f"{webhook.url}/mutate", "caBundle": webhook.ca_bundle},
                failurePolicy="Ignore",
            )
            await admin.create(resources.MUTATING_WEBHOOKS, config)
            await admin.create(resources.PRIORITY_CLASSES, workloads.priority_class("low", 100))
            await admin.create(
                resources.PRIORITY_CLASSES, workloads.priority_class("high", 1000000)
            )
            long = workloads.trainer_container(steps=100000, rate=50, save_seconds=0.1)
            await admin.create(
                resources.JOBS,
                workloads.job("low-job", long, priority_class="low", ignore_disruption=True),
            )
            await recording.running_pod(c, "low-job")
            short = workloads.trainer_container(steps=2)
            await admin.create(
                resources.JOBS,
                workloads.job("high-job", short, priority_class="high", ignore_disruption=True),
            )
            await c.wait_for(resources.JOBS, "high-job", "default", cluster.job_finished)
            await recording.running_pod(c, "low-job", progress=1)  # the replacement runs
            await admin.patch(
                resources.JOBS,
                "low-job",
                {"spec": {"suspend": True}},
                content_type=kube_api.MERGE_PATCH,
                namespace="default",
            )
            await c.wait_for(
                resources.JOBS,
                "low-job",
                "default",
                lambda j: (
                    not ((j or {}).get("status") or {}).get("active")
                    and not ((j or {}).get("status") or {}).get("terminating")
                ),
            )
    finally:
        await webhook.stop()

    # --- the scheduler: preemptor status, victim DisruptionTarget, victim DELETE (24, 25, 26)
    scheduler = _by(webhook.reviews, "system:kube-scheduler")
    start = next(
        i
        for i, r in enumerate(scheduler)
        if (r["object"] or {}).get("status", {}).get("nominatedNodeName")
    )
    nominate, disrupt, delete = scheduler[start : start + 3]
    for sent, name in (
        (nominate, "24-preemption-update-pod-status-by-scheduler"),
        (disrupt, "25-preemption-update-pod-status-by-scheduler"),
        (delete, "26-preemption-delete-pod-by-scheduler"),
    ):
        assert _envelope(sent) == _envelope(_recorded(name)), name
    want = _recorded("24-preemption-update-pod-status-by-scheduler")
    assert nominate["object"]["status"]["nominatedNodeName"] == "gpu-a"
    got_cond = _conditions(nominate["object"])["PodScheduled"]
    want_cond = _conditions(want["object"])["PodScheduled"]
    assert sorted(got_cond) == sorted(want_cond)
    assert got_cond["message"] == want_cond["message"]
    victim = disrupt["name"]
    assert delete["name"] == victim
    got_target = _conditions(disrupt["object"])[keys.POD_CONDITION_DISRUPTION_TARGET]
    want_target = _conditions(_recorded("25-preemption-update-pod-status-by-scheduler")["object"])[
        keys.POD_CONDITION_DISRUPTION_TARGET
    ]
    assert sorted(got_target) == sorted(want_target)
    for field in ("status", "reason", "message"):
        assert got_target[field] == want_target[field]
    # The pod's generation (recorded: 1; here 2, because binding is a spec.nodeName patch that
    # bumps it -- the emulator has no pods/binding subresource yet).
    assert got_target["observedGeneration"] == disrupt["oldObject"]["metadata"]["generation"]
    assert delete["options"]["gracePeriodSeconds"] == 5  # resolved from the pod, none was sent

    # --- the job controller: CREATE from the template (03), finalizer after terminal (30),
    #     and on suspend finalizer first (06), then DELETE (07)
    controller = _by(webhook.reviews, "system:serviceaccount:kube-system:job-controller")
    creates = [r for r in controller if r["operation"] == "CREATE"]
    want_create = _recorded("03-job-unsuspend-create-pod-by-job-controller")
    assert _envelope(creates[0]) == _envelope(want_create)
    got_meta = creates[0]["object"]["metadata"]
    want_meta = {k: v for k, v in want_create["object"]["metadata"].items() if k != "managedFields"}
    assert list(got_meta) == list(want_meta)
    assert sorted(got_meta["labels"]) == sorted(want_meta["labels"])
    assert got_meta["finalizers"] == want_meta["finalizers"]
    assert [sorted(ref) for ref in got_meta["ownerReferences"]] == [
        sorted(ref) for ref in want_meta["ownerReferences"]
    ]

    victim_updates = [r for r in controller if r.get("name") == victim]
    assert victim_updates  # one patch; the emulator may review it more than once (a retry)
    for drop in victim_updates:
        want_drop = _recorded("30-preemption-update-pod-by-job-controller")
        assert _envelope(drop) == _envelope(want_drop)
        assert drop["oldObject"]["status"]["phase"] == "Failed"  # after terminal, as recorded
        assert drop["object"]["metadata"]["finalizers"] == []

    suspended = [
        r
        for r in controller
        if r["operation"] in ("UPDATE", "DELETE")
        and r.get("name") != victim
        and r["name"].startswith("low-job-")
    ]
    operations = [r["operation"] for r in suspended]
    assert operations[0] == "UPDATE"  # the finalizer goes first ...
    assert "DELETE" in operations  # ... then the pod is deleted
    assert "UPDATE" not in operations[operations.index("DELETE") :]
    for sent in suspended:
        if sent["operation"] == "UPDATE":
            want = _recorded("06-job-suspend-update-pod-by-job-controller")
            assert _envelope(sent) == _envelope(want)
            assert sent["object"]["metadata"]["finalizers"] == []
            assert sent["oldObject"]["status"]["phase"] == "Running"
        else:
            want = _recorded("07-job-suspend-delete-pod-by-job-controller")
            assert _envelope(sent) == _envelope(want)
            assert sent["oldObject"]["metadata"]["finalizers"] == []
