"""Issue 19 on the real control-plane tier: a Volcano Job of 2 tasks x 2 pods, evicted and
readmitted: 4 distinct identities, each restores its own.

Volcano's own controllers are not in the tier: the project's emulated Volcano (emulator/volcano:
the vc-controller's job controller and the volcano-scheduler with its evictor) acts against the
real kube-apiserver in its own ServiceAccount identities (tests/realcp/emulated.py), as the
emulated kubelet does (real local processes, real SIGTERM), on a cluster with Volcano's upstream
CRDs (tests/fixtures/upstream/volcano/crds) and the ``volcano`` overlay (webhook and bridge watch
Volcano only). So the emulation's writes — pods created from the vcjob's tasks
(``<job>-<task>-<index>``, the same names in every incarnation), PodGroups, the ``pods/binding``
of a bind, the evictor's ``pods/status`` UPDATE and graceful DELETE, the vcjob's status — are
validated and stored by a real apiserver, and a real apiserver calls Kontinue's webhook for them.

The flow: the vcjob (tasks ``leader`` and ``worker``, 2 replicas each, the reference trainer,
which records its identity and step in every save and refuses a directory another identity
saved) runs on one 4-GPU node; a higher-priority vcjob of the same Queue needs all 4 GPUs, so
Volcano's ``preempt`` evicts the 4 pods in one session (emulator/volcano/victims.py); the bridge
records one Checkpoint set of 4 members with 4 distinct identities, each ``Saved`` from its
termination message. When the urgent vcjob completes, the vc-controller's ``SyncJob`` has
recreated the 4 pods under their old names (new UIDs); the webhook points each at its own
identity's member (``KONTINUE_RESTORE_MEMBER``) and each trainer resumes from the step its own
predecessor saved.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from emulator.apiserver import server
from emulator.volcano import controller as volcano_controller
from emulator.volcano import objects
from emulator.volcano import scheduler as volcano_scheduler
from emulator.volcano import system as volcano_system
from kontinue import keys
from kontinue.kube import api, resources
from kontinue.models import checkpoint
from tests.realcp import controlplane, emulated, processes
from tests.realcp.conftest import installed_overlay
from tests.realcp.test_kueue_flow import PROGRESS, Flow, restore_member, running_node

Obj = dict[str, Any]
TASKS = ("leader", "worker")
REPLICAS = 2
IDENTITIES = [f"task={t},index={i}" for t in TASKS for i in range(REPLICAS)]
RESTORED = re.compile(r"^RESTORED step=(\d+) from=\S+ member=(\S+) as=(\S+)$", re.MULTILINE)
"""reference_workload/trainer.py: the step restored, who saved the directory, who restores."""
pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def kontinue_volcano(crds: controlplane.ControlPlane) -> Iterator[processes.Installed]:
    """The ``volcano`` overlay (tests/realcp/conftest.py ``installed_overlay``)."""
    with installed_overlay(crds, "volcano") as installed:
        yield installed


def _identity(pod: Obj) -> str:
    labels = pod["metadata"]["labels"]
    return f"task={labels['volcano.sh/task-spec']},index={labels['volcano.sh/task-index']}"


def _vcjob(flow: Flow, name: str, *, priority: str, tasks: list[Obj], opted_out: bool) -> Obj:
    if opted_out:
        for task in tasks:
            meta = task["template"].setdefault("metadata", {})
            meta["annotations"] = {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"}
    return objects.job(
        name,
        flow.namespace,
        queue=flow.queue,
        tasks=tasks,
        priority=priority,
        # upstream's example policy; the webhook rewrites it at CREATE (docs/webhook.md)
        policies=[{"event": "PodEvicted", "action": "RestartJob"}],
    )


async def _queue(admin: api.Api, flow: Flow, policy: str, *, gpus: int) -> None:
    for name, value in ((f"low-{flow.tag}", 100), (f"high-{flow.tag}", 1000)):
        await admin.create(
            resources.PRIORITY_CLASSES,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
    body = objects.queue(
        flow.queue,
        capability={keys.GPU_RESOURCE: str(gpus), "cpu": "64", "memory": "256Gi"},
        deserved={keys.GPU_RESOURCE: str(gpus), "cpu": "64", "memory": "256Gi"},
        labels={keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: policy},
    )
    await admin.create(resources.VOLCANO_QUEUES, body)


async def test_issue_19_a_volcano_job_of_2_tasks_x_2_pods_each_identity_restores_its_own(
    kontinue_volcano: processes.Installed,
    crds: controlplane.ControlPlane,
    admin: api.Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    for user in (volcano_controller.USER, volcano_scheduler.USER):
        await emulated.grant(admin, user)
    async with running_node(
        crds,
        kontinue_volcano,
        admin,
        namespace,
        tmp_path,
        gpus_per_node=len(IDENTITIES),
        users=(volcano_controller.USER, volcano_scheduler.USER),
    ) as (flow, policy, real):
        flow.queue = f"q-{flow.tag}"  # Volcano Queues are cluster-scoped
        await _queue(admin, flow, policy, gpus=len(IDENTITIES))
        volcano = await volcano_system.start(cast(server.ApiServer, real))
        try:
            await _run(flow, admin, namespace)
        finally:
            await volcano.stop()


async def _run(flow: Flow, admin: api.Api, namespace: str) -> None:
    low_tasks = [
        objects.task(
            task,
            {"spec": flow.pod_spec(priority=f"low-{flow.tag}", steps=100000, save_seconds=0.2)},
            replicas=REPLICAS,
        )
        for task in TASKS
    ]
    low = _vcjob(flow, flow.low, priority=f"low-{flow.tag}", tasks=low_tasks, opted_out=False)

    async def plumbed() -> bool:  # the webhook's caches see the opted-in Queue
        dry = await admin.create(resources.VOLCANO_JOBS, low, namespace=namespace, dry_run=True)
        return bool(dry["spec"].get("policies") != low["spec"]["policies"])

    await flow.until(plumbed, "the webhook rewriting the opted-in vcjob's policies")
    await admin.create(resources.VOLCANO_JOBS, low, namespace=namespace)

    async def pods_of(job: str) -> list[Obj]:
        return await flow.cluster.pods(namespace, labels={keys.VOLCANO_JOB_NAME_LABEL: job})

    first: dict[str, Obj] = {}

    async def all_progressing() -> bool:
        for pod in await pods_of(flow.low):
            if len(PROGRESS.findall(flow.log(pod))) >= 3:
                first.setdefault(_identity(pod), pod)
        return len(first) == len(IDENTITIES)

    await flow.until(all_progressing, "the 4 pods of the vcjob training")
    assert sorted(first) == IDENTITIES
    for who, pod in first.items():  # Volcano's names: <job>-<task>-<index>
        task, index = (part.split("=")[1] for part in who.split(","))
        assert pod["metadata"]["name"] == f"{flow.low}-{task}-{index}"
        assert pod["spec"]["nodeName"] == f"node-{flow.tag}"  # bound through pods/binding

    # A higher-priority vcjob of the same Queue needs every GPU: preempt evicts all 4 pods.
    urgent_spec = flow.pod_spec(priority=f"high-{flow.tag}", steps=5, save_seconds=0.2)
    urgent_spec["containers"][0]["resources"]["limits"][keys.GPU_RESOURCE] = str(len(IDENTITIES))
    urgent = _vcjob(
        flow,
        flow.high,
        priority=f"high-{flow.tag}",
        tasks=[objects.task("urgent", {"spec": urgent_spec})],
        opted_out=True,
    )
    await admin.create(resources.VOLCANO_JOBS, urgent, namespace=namespace)

    async def urgent_done() -> bool:
        return any(
            (p.get("status") or {}).get("phase") == "Succeeded" for p in await pods_of(flow.high)
        )

    await flow.until(urgent_done, "the urgent vcjob's pod Succeeded")
    saved: dict[str, int] = {}
    for who, pod in first.items():
        log = flow.log(pod)
        assert "SAVED" in log, (who, log[-500:])
        saved[who] = max(int(step) for step in PROGRESS.findall(log))

    # Readmission: each identity's new pod (same name, new UID) restores its own member.
    old = {p["metadata"]["uid"] for p in first.values()}
    successors: dict[str, Obj] = {}

    async def all_restored() -> bool:
        for pod in await pods_of(flow.low):
            who = _identity(pod)
            if pod["metadata"]["uid"] in old or who in successors:
                continue
            found = RESTORED.search(flow.log(pod))
            if found is not None and PROGRESS.findall(flow.log(pod)):
                successors[who] = pod
        return len(successors) == len(IDENTITIES)

    await flow.until(all_restored, "the 4 new pods restored and training")
    (cp,) = await flow.checkpoints()
    assert cp.status.phase is checkpoint.Phase.SUCCEEDED, cp.status
    assert (cp.spec.trigger.source, cp.spec.trigger.reason) == (
        "Volcano",
        keys.DISRUPTION_PREEMPTION_BY_SCHEDULER,
    )
    members = {m.identity: m for m in cp.spec.members}
    assert sorted(members) == IDENTITIES  # 4 members, 4 distinct identities
    for who in IDENTITIES:
        member = members[who]
        assert member.pod_uid == first[who]["metadata"]["uid"]
        result = checkpoint.result_of(cp.status.members, member)
        assert result is not None
        assert (result.pod_uid, result.state, result.step) == (
            member.pod_uid,
            checkpoint.MemberState.SAVED,
            saved[who],
        ), result
        pod = await admin.get(
            resources.PODS, successors[who]["metadata"]["name"], namespace=namespace
        )
        assert pod["metadata"]["name"] == first[who]["metadata"]["name"]  # the name, reused
        assert pod["metadata"]["uid"] != member.pod_uid
        assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == cp.name
        assert restore_member(pod) == who
        found = RESTORED.search(flow.log(successors[who]))
        assert found is not None
        # the trainer's own word: the step its predecessor saved, a directory saved by its
        # identity, restored as its identity
        assert found.groups() == (str(saved[who]), who, who), found.group(0)
