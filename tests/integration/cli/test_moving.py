"""``move`` and ``drain`` through the real console script, and plain ``kubectl drain``.

Each test has its own emulated cluster (2 nodes x 4 GPUs, Kueue, Kontinue's real webhook and
bridge, kubelets running the reference trainer, HTTPS). Done means what the issue says: the
workload runs again on another node, restored from the step it saved (the trainer's own
``SAVED step=N`` / ``RESTORED step=N`` lines), its Checkpoint has trigger source ``Manual``,
and ``Job.status.failed`` stays 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from emulator.demo import scenario, stack, timeline
from kontinue import keys, moving
from kontinue.kube import resources
from tests.integration.cli import harness

pytestmark = pytest.mark.timeout(240)

NS = harness.NS
Obj = dict[str, Any]


@pytest_asyncio.fixture
async def kube(tmp_path: Path) -> AsyncIterator[harness.Kube]:
    async with harness.kube(tmp_path) as k:
        yield k


async def _started(kube: harness.Kube, name: str, **kw: Any) -> Obj:
    await kube.job(name, **kw)
    (pod,) = await kube.running_pods(name)
    await kube.training(pod)
    return pod


def _annotation(obj: Obj, key: str) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(key)


def _required_expressions(pod: Obj) -> list[Obj]:
    affinity = pod["spec"].get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return [e for t in required.get("nodeSelectorTerms") or [] for e in t["matchExpressions"]]


async def _successor(kube: harness.Kube, job: str, old: Obj) -> Obj:
    pods = await kube.running_pods(job)
    (new,) = [p for p in pods if p["metadata"]["uid"] != old["metadata"]["uid"]]
    return new


async def _failed_stays_zero(kube: harness.Kube, job: str) -> None:
    await asyncio.sleep(1.0)  # let the job controller count the evicted pod, if it would
    got = await kube.admin.get(resources.JOBS, job, namespace=NS)
    assert (got["status"].get("failed") or 0) == 0, got["status"]


async def test_move_to_a_node_then_away_resumes_from_the_saved_step_each_time(
    kube: harness.Kube,
) -> None:
    first = await _started(kube, "train")
    assert first["spec"]["nodeName"] == "gpu-a"

    result = await kube.kk("move", "job/train", "--to-node", "gpu-b", "--wait")
    assert result.code == 0, result
    second = await _successor(kube, "train", first)
    assert second["spec"]["nodeName"] == "gpu-b"
    (saved,) = kube.said(first, "SAVED")
    assert await kube.restored(second) == [saved]

    (cp,) = (await kube.admin.list(resources.CHECKPOINTS, namespace=NS))["items"]
    assert cp["spec"]["trigger"]["source"] == "Manual"
    assert cp["spec"]["trigger"]["reason"] == "Move"
    assert cp["spec"]["trigger"]["message"] == "kubectl kontinue move: to node gpu-b"
    assert moving.of(cp["metadata"]["annotations"]) == moving.Move(by="move", to_node="gpu-b")
    assert cp["status"]["phase"] == "Succeeded"
    assert [m["step"] for m in cp["status"]["members"]] == [saved]
    assert _annotation(second, keys.RESTORE_FROM_ANNOTATION) == cp["metadata"]["name"]
    assert {"key": keys.HOSTNAME_LABEL, "operator": "In", "values": ["gpu-b"]} in (
        _required_expressions(second)
    )
    lines = result.out.splitlines()
    assert lines[0] == f"moving job/train ({first['metadata']['name']} on gpu-a) to node gpu-b"
    assert lines[1] == "job/train moved:"
    assert lines[2].startswith(
        f"  {second['metadata']['name']} running on gpu-b (was gpu-a), restored from "
        f"{cp['metadata']['name']}, step {saved}; handover "
    )
    await _failed_stays_zero(kube, "train")

    # no flags: away from where it runs now; the earlier "to gpu-b" is not applied again
    await kube.training(second)
    again = await kube.kk("move", "job/train", "--wait")
    assert again.code == 0, again
    third = await _successor(kube, "train", second)
    assert third["spec"]["nodeName"] == "gpu-a"
    expressions = _required_expressions(third)
    assert {"key": keys.HOSTNAME_LABEL, "operator": "NotIn", "values": ["gpu-b"]} in expressions
    assert not any(e["operator"] == "In" and e["key"] == keys.HOSTNAME_LABEL for e in expressions)
    assert await kube.restored(third) == kube.said(second, "SAVED")
    await _failed_stays_zero(kube, "train")

    # the queue system was not involved: Kueue never evicted the Workload, it stayed admitted
    (workload,) = (await kube.admin.list(resources.WORKLOADS, namespace=NS))["items"]
    conditions = {c["type"]: c["status"] for c in workload["status"].get("conditions") or []}
    assert conditions.get("Admitted") == "True", conditions
    assert conditions.get("Evicted") != "True", conditions
    assert conditions.get("Preempted") != "True", conditions

    story = await kube.kk("describe", "job/train", "-o", "json")
    evictions = [e for e in json.loads(story.out)["timeline"] if e["what"] == "Evicted"]
    assert [(e["source"], e["reason"]) for e in evictions] == [("Manual", "Move")] * 2


async def test_move_refusals_say_why(kube: harness.Kube) -> None:
    # a job whose save outlasts its grace period: SIGKILLed mid-save, its set Failed
    await kube.job("slow2", env={"TRAINER_SAVE_SECONDS": "60"})
    (pod,) = await kube.running_pods("slow2")
    await kube.training(pod)
    await kube.system.cluster.api.client("admin").evict(
        resources.PODS, pod["metadata"]["name"], namespace=NS
    )

    async def failed() -> bool:
        items = (await kube.admin.list(resources.CHECKPOINTS, namespace=NS))["items"]
        return any(c.get("status", {}).get("phase") == "Failed" for c in items)

    await harness.eventually(failed, within=60, what="the slow job's set Failed")
    refused = await kube.kk("move", "job/slow2")
    assert refused.code == 1, refused
    assert refused.err.startswith("refused: the newest checkpoint set of job/slow2, slow2-")
    assert "Failed" in refused.err
    assert "a move would resume from an older set or from zero" in refused.err

    unknown = await kube.kk("move", "job/nothing")
    assert unknown.code == 1
    assert unknown.err.startswith("refused: job/nothing in namespace default has no pod")
    await _started(kube, "fine")
    nowhere = await kube.kk("move", "job/fine", "--to-node", "gpu-z")
    assert nowhere.code == 1
    assert nowhere.err == "refused: node gpu-z does not exist\n"
    both = await kube.kk("move", "job/fine", "--to-node", "gpu-b", "--away-from", "gpu-a")
    assert both.code == 2
    assert "not allowed with argument" in both.err
    await kube.admin.patch(
        resources.NODES, "gpu-b", {"spec": {"unschedulable": True}}, content_type=stack.MERGE
    )
    cordoned = await kube.kk("move", "job/fine", "--to-node", "gpu-b")
    assert cordoned.code == 1
    assert cordoned.err.startswith("refused: node gpu-b is cordoned"), cordoned
    await kube.admin.patch(
        resources.NODES, "gpu-b", {"spec": {"unschedulable": None}}, content_type=stack.MERGE
    )
    (pod,) = await kube.running_pods("fine")
    away = await kube.kk("move", "job/fine", "--away-from", pod["spec"]["nodeName"], "--wait")
    assert away.code == 0, away
    new = await _successor(kube, "fine", pod)
    assert new["spec"]["nodeName"] != pod["spec"]["nodeName"]
    assert {
        "key": keys.HOSTNAME_LABEL,
        "operator": "NotIn",
        "values": [pod["spec"]["nodeName"]],
    } in _required_expressions(new)
    assert await kube.restored(new) == kube.said(pod, "SAVED")
    await _failed_stays_zero(kube, "fine")


async def test_move_of_a_job_whose_queue_did_not_opt_in_is_refused(kube: harness.Kube) -> None:
    await kube.admin.patch(
        resources.CLUSTER_QUEUES,
        scenario.CLUSTER_QUEUE,
        {"metadata": {"labels": {keys.ENABLED_LABEL: None}}},
        content_type=stack.MERGE,
    )

    async def webhook_sees_it() -> bool:
        job = scenario.trainer_job(
            "dry", role=timeline.Role.SCAVENGER, gpus=1, steps=1, options=harness.OPTIONS
        )
        dry = await kube.admin.create(resources.JOBS, job, dry_run=True)
        return bool(dry["spec"].get("podReplacementPolicy") != "Failed")

    await harness.eventually(webhook_sees_it, within=30, what="the webhook sees the opt-out")
    await kube.job("plain")
    await kube.running_pods("plain")
    result = await kube.kk("move", "job/plain")
    assert result.code == 1
    assert "has no pod Kontinue plumbed: its queue has not opted in" in result.err


async def test_drain_moves_opted_in_pods_and_evicts_the_rest(kube: harness.Kube) -> None:
    # the scheduler spreads (most free GPUs, then name): a and c on gpu-a, b and d on gpu-b
    a = await _started(kube, "a")
    b = await _started(kube, "b")
    c = await _started(kube, "c")
    await _started(kube, "d")
    # an opted-out job without GPUs (ties go to gpu-a): evicted as kubectl drain evicts it
    await kube.job("out", gpus=0, opt_out=True)
    (out_pod,) = await kube.running_pods("out")
    assert [p["spec"]["nodeName"] for p in (a, b, c, out_pod)] == ["gpu-a", "gpu-b"] + ["gpu-a"] * 2

    # a DaemonSet's pod (ignored, as kubectl drain --ignore-daemonsets) and a pod no controller
    # would recreate (refused without --force, before anything is cordoned)
    agent = await kube.admin.create(resources.PODS, _bare_pod("agent", owner_kind="DaemonSet"))
    await kube.admin.create(resources.PODS, _bare_pod("lonely"))
    refused = await kube.kk("drain", "gpu-a", "--wait")
    assert refused.code == 1, refused
    assert refused.err == (
        f"refused: cannot drain gpu-a: pods without a controller would be lost (nothing "
        f"recreates them): {NS}/lonely; use --force to delete them anyway\n"
    )
    assert not (await kube.admin.get(resources.NODES, "gpu-a"))["spec"].get("unschedulable")
    await kube.admin.delete(resources.PODS, "lonely", namespace=NS)

    async def lonely_gone() -> bool:
        names = [p["metadata"]["name"] for p in await _pods_on(kube, "gpu-a")]
        return "lonely" not in names

    await harness.eventually(lonely_gone, within=60, what="the bare pod gone")

    result = await kube.kk("drain", "gpu-a", "--wait")
    assert result.code == 0, result
    node = await kube.admin.get(resources.NODES, "gpu-a")
    assert node["spec"]["unschedulable"] is True
    assert f"ignoring {NS}/agent (DaemonSet-managed)" in result.out.splitlines()
    agent_now = await kube.admin.get(resources.PODS, "agent", namespace=NS)
    assert agent_now["metadata"]["uid"] == agent["metadata"]["uid"]
    assert not agent_now["metadata"].get("deletionTimestamp")
    for job, old in (("a", a), ("c", c)):
        new = await _successor(kube, job, old)
        assert new["spec"]["nodeName"] == "gpu-b"
        assert await kube.restored(new) == kube.said(old, "SAVED")
        assert f"{NS}/{old['metadata']['name']} moved:" in result.out
        assert f"  {new['metadata']['name']} running on gpu-b (was gpu-a)" in result.out
        await _failed_stays_zero(kube, job)
    items = (await kube.admin.list(resources.CHECKPOINTS, namespace=NS))["items"]
    assert sorted(c["spec"]["lineage"]["ownerName"] for c in items) == ["a", "c"]
    assert f"evicting {NS}/{out_pod['metadata']['name']}\n" in result.out
    (out_now,) = await kube.running_pods("out")
    assert out_now["spec"]["nodeName"] == "gpu-b"
    assert not _annotation(out_now, keys.LINEAGE_ANNOTATION)
    for cp in items:
        assert (cp["spec"]["trigger"]["source"], cp["spec"]["trigger"]["reason"]) == (
            "Manual",
            "Drain",
        )
    assert result.out.splitlines()[0] == "node/gpu-a cordoned"
    assert result.out.splitlines()[-1] == "node/gpu-a drained"
    (b_now,) = await kube.running_pods("b")
    assert b_now["metadata"]["uid"] == b["metadata"]["uid"]  # gpu-b untouched


def _bare_pod(name: str, *, owner_kind: str | None = None) -> Obj:
    """A pod bound to gpu-a that sleeps, owned by nothing (or by a ``owner_kind`` controller)."""
    meta: Obj = {"name": name, "namespace": NS}
    if owner_kind is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner_kind,
                "name": name,
                "uid": f"00000000-0000-4000-8000-{name.encode().hex():0>12}"[:36],
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": "gpu-a",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "command": ["python", "-c", "import time; time.sleep(600)"],
                }
            ],
        },
    }


async def _pods_on(kube: harness.Kube, node: str) -> list[Obj]:
    listed = await kube.admin.list(resources.PODS, namespace=NS)
    return [p for p in listed["items"] if p["spec"].get("nodeName") == node]


async def test_a_budget_refusal_is_retried_as_kubectl_drain_does(kube: harness.Kube) -> None:
    first = await _started(kube, "train")
    fault = kube.system.cluster.api.faults.add(
        verb="create", resource="pods", subresource="eviction", status=429, count=2, retry_after=1
    )
    result = await kube.kk("move", "job/train", "--wait")
    assert result.code == 0, result
    assert fault.fired == 2
    assert f"{NS}/{first['metadata']['name']}: waiting: " in result.out
    second = await _successor(kube, "train", first)
    assert await kube.restored(second) == kube.said(first, "SAVED")


def _kubectl() -> str:
    """The real kubectl v1.36.2 of the real-control-plane assets (``KUBEBUILDER_ASSETS``,
    tests/realcp/prepare-assets.sh), else one on PATH; ``.ci/run`` requires the assets, so in
    CI this test always runs with the release the rest of the suite measures against."""
    assets = os.environ.get("KUBEBUILDER_ASSETS", "")
    if assets and os.access(Path(assets) / "kubectl", os.X_OK):
        return str(Path(assets) / "kubectl")
    if os.environ.get("KONTINUE_REQUIRE_REALCP") == "1":
        pytest.fail(f"KONTINUE_REQUIRE_REALCP=1 but no kubectl in KUBEBUILDER_ASSETS={assets!r}")
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("no kubectl: set KUBEBUILDER_ASSETS (tests/realcp/prepare-assets.sh)")
    return found


async def test_plain_kubectl_drain_still_checkpoints_and_restores(kube: harness.Kube) -> None:
    kubectl = _kubectl()
    first = await _started(kube, "train")
    node = first["spec"]["nodeName"]
    proc = await asyncio.create_subprocess_exec(
        kubectl,
        "--kubeconfig",
        str(kube.kubeconfig),
        "drain",
        node,
        "--ignore-daemonsets",
        "--timeout=120s",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 150)
    assert proc.returncode == 0, (out.decode(), err.decode())
    assert f"pod/{first['metadata']['name']} evicted" in out.decode()
    second = await _successor(kube, "train", first)
    assert second["spec"]["nodeName"] != node
    assert await kube.restored(second) == kube.said(first, "SAVED")
    (cp,) = (await kube.admin.list(resources.CHECKPOINTS, namespace=NS))["items"]
    assert cp["spec"]["trigger"]["source"] == "EvictionAPI"
    assert moving.ANNOTATION not in (cp["metadata"].get("annotations") or {})
    await _failed_stays_zero(kube, "train")
