"""Pod-level disruptions -> one Checkpoint per eviction event (the bridge's pod path).

The real bridge (``queue_bridge.app.run``) against the API emulator; the tests write what the
disrupting components write, as those users (recorded on a real v1.36.2 control plane):

- kube-scheduler: ``DisruptionTarget=True`` reason ``PreemptionByScheduler`` on pods/status as
  ``system:kube-scheduler``, then a graceful DELETE (recorded admission requests 25, 26, as
  tests/fixtures/README.md lists);
- the taint-eviction controller: ``DeletionByTaintManager`` on pods/status as
  ``system:serviceaccount:kube-system:node-controller`` (admission 41);
- Volcano's evictor: ``Ready=False`` (reason ``Evict``) + ``DisruptionTarget=True``
  (``PreemptionByScheduler``) on pods/status, then DELETE as the volcano-scheduler service
  account (tests/fixtures/upstream/volcano/examples/
  admissionreview-delete-victim-pod-by-vc-scheduler.json, whose pod is the victim used here).

The kubelet's final status and the job controller are as in conftest.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from kontinue import keys, lineage
from kontinue.kube import api, resources
from kontinue.models import base, checkpoint
from tests import fixtures, promlint
from tests.integration.bridge.conftest import NS, Bridge, Cluster
from tests.waiting import eventually

Obj = dict[str, Any]
SCHEDULER = "system:kube-scheduler"
TAINT_MANAGER = "system:serviceaccount:kube-system:node-controller"
VOLCANO_SCHEDULER = keys.VOLCANO_SCHEDULER_USER
VOLCANO = fixtures.FIXTURES / "upstream/volcano"
VOLCANO_VICTIM = VOLCANO / "examples/admissionreview-delete-victim-pod-by-vc-scheduler.json"
SCHEDULER_MESSAGE = "default-scheduler: preempting to accommodate a higher priority pod"


async def _queued_pods(cluster: Cluster, job: Obj, n: int = 2) -> list[Obj]:
    """Running pods of ``job`` with the queue label Kueue's Job template gives them."""
    pods = await cluster.pods(job, n)
    labelled = []
    for pod in pods:
        labelled.append(
            await cluster.admin.patch(
                resources.PODS,
                pod["metadata"]["name"],
                {"metadata": {"labels": {keys.KUEUE_QUEUE_NAME_LABEL: "lq"}}},
                content_type=api.MERGE_PATCH,
                namespace=NS,
            )
        )
    return labelled


async def _disrupt(
    cluster: Cluster,
    pod: Obj,
    *,
    user: str = SCHEDULER,
    reason: str = keys.DISRUPTION_PREEMPTION_BY_SCHEDULER,
    message: str = SCHEDULER_MESSAGE,
    when: str | None = None,
    volcano_evict: str | None = None,
    delete: bool = True,
) -> str:
    """The disrupting component's status write, then its graceful DELETE; the condition time."""
    writer = cluster.emulated.client(user)
    name = pod["metadata"]["name"]
    current = await writer.get(resources.PODS, name, namespace=NS)
    when = when or base.format_time(base.now())
    conditions = [
        c
        for c in current["status"].get("conditions", [])
        if c["type"] not in (keys.POD_CONDITION_DISRUPTION_TARGET, "Ready")
    ]
    if volcano_evict is not None:
        conditions.append(
            {
                "type": "Ready",
                "status": "False",
                "reason": "Evict",
                "message": f"Pod is evicted, because of {volcano_evict}",
                "lastTransitionTime": when,
            }
        )
    conditions.append(
        {
            "type": keys.POD_CONDITION_DISRUPTION_TARGET,
            "status": "True",
            "observedGeneration": 1,
            "lastProbeTime": None,
            "lastTransitionTime": when,
            "reason": reason,
            "message": message,
        }
    )
    current["status"]["conditions"] = conditions
    await writer.replace(resources.PODS, current, subresource="status")
    if delete:
        await writer.delete(resources.PODS, name, namespace=NS)
    return when


async def _released(cluster: Cluster, pods: list[Obj]) -> None:
    """Every pod gone: our finalizer was removed, so the bridge decided about each one."""

    async def gone() -> bool:
        return not any([await cluster.pod_exists(p["metadata"]["name"]) for p in pods])

    await eventually(gone, what="finalizers released and pods gone")


def _uids(cp: checkpoint.Checkpoint) -> list[str]:
    return [m.pod_uid for m in cp.spec.members]


EVICTIONS = "kontinue_bridge_evictions_total"


async def _evictions(bridge: Bridge) -> dict[tuple[str, str], float]:
    """The bridge's ``kontinue_bridge_evictions_total`` (issue 12: by source and reason), every
    series, from its own ``/metrics``."""
    scraped = await bridge.scrape()
    assert promlint.problems(scraped) == []
    family = promlint.families(scraped).get(EVICTIONS)
    samples = family.samples if family is not None else []
    return {
        (labels["source"], labels["reason"]): v for name, labels, v in samples if name == EVICTIONS
    }


async def test_scheduler_preemption_victims_make_one_checkpoint_that_succeeds(
    cluster: Cluster,
) -> None:
    await cluster.queues()
    job = await cluster.job()
    workload = await cluster.workload(job)
    pods = await _queued_pods(cluster, job)
    bridge = await cluster.start_bridge()
    when = await _disrupt(cluster, pods[0])

    async def created() -> bool:
        return len(await cluster.checkpoints()) == 1

    await eventually(created, what="Checkpoint of the first victim")
    # the second victim of the same preemption cycle reaches the bridge after the Checkpoint
    # exists: it joins it instead of starting a second set
    await _disrupt(cluster, pods[1], when=when)

    async def both() -> bool:
        return len(_uids(await cluster.one_checkpoint())) == 2

    await eventually(both, what="the later victim joined the open Checkpoint")
    cp = await cluster.one_checkpoint()
    assert cp.spec.trigger.source is checkpoint.TriggerSource.SCHEDULER
    assert cp.spec.trigger.reason == keys.DISRUPTION_PREEMPTION_BY_SCHEDULER
    assert cp.spec.trigger.message == SCHEDULER_MESSAGE
    assert cp.spec.workload == workload["metadata"]["name"]
    assert sorted(_uids(cp)) == sorted(p["metadata"]["uid"] for p in pods)
    assert sorted(m.index for m in cp.spec.members) == [0, 1]
    for pod in pods:
        await cluster.terminate(pod)

    async def succeeded() -> bool:
        return await cluster.phase() == "Succeeded"

    await eventually(succeeded, what="Succeeded once both victims saved")
    await _released(cluster, pods)
    assert len(await cluster.checkpoints()) == 1
    started = await cluster.events(reason=keys.EVENT_CHECKPOINT_STARTED)
    assert any(e["involvedObject"]["kind"] == "Job" for e in started)
    # one eviction (the second victim joined its set), counted by its source and reason
    assert await _evictions(bridge) == {("Scheduler", keys.DISRUPTION_PREEMPTION_BY_SCHEDULER): 1}


async def test_victims_of_a_queue_that_did_not_opt_in_get_no_checkpoint(cluster: Cluster) -> None:
    await cluster.queues(opted_in=False)
    job = await cluster.job()
    await cluster.workload(job)
    pods = await _queued_pods(cluster, job)
    await cluster.start_bridge()
    for pod in pods:
        await _disrupt(cluster, pod)
        await cluster.terminate(pod)
    await _released(cluster, pods)
    assert await cluster.checkpoints() == []


async def test_only_reasons_the_policy_lists_make_checkpoints(cluster: Cluster) -> None:
    await cluster.policy(
        "taints-only",
        {"triggers": {"disruptionReasons": [keys.DISRUPTION_DELETION_BY_TAINT_MANAGER]}},
    )
    await cluster.queues(policy="taints-only")
    job = await cluster.job()
    await cluster.workload(job)
    pods = await _queued_pods(cluster, job)
    bridge = await cluster.start_bridge()
    await _disrupt(cluster, pods[0])  # PreemptionByScheduler: not listed
    await _disrupt(
        cluster,
        pods[1],
        user=TAINT_MANAGER,
        reason=keys.DISRUPTION_DELETION_BY_TAINT_MANAGER,
        message="Taint manager: deleting due to NoExecute taint",
    )

    async def created() -> bool:
        return len(await cluster.checkpoints()) == 1

    await eventually(created, what="Checkpoint of the taint-manager victim")
    for pod in pods:
        await cluster.terminate(pod)
    await _released(cluster, pods)
    cp = await cluster.one_checkpoint()
    assert cp.spec.trigger.source is checkpoint.TriggerSource.TAINT_MANAGER
    assert cp.spec.policy_name == "taints-only"
    assert _uids(cp) == [pods[1]["metadata"]["uid"]]
    assert cp.status.phase is checkpoint.Phase.SUCCEEDED
    assert await _evictions(bridge) == {
        ("TaintManager", keys.DISRUPTION_DELETION_BY_TAINT_MANAGER): 1  # the unlisted one: none
    }


async def test_a_drain_victim_is_an_eviction_api_checkpoint_and_counted_as_one(
    cluster: Cluster,
) -> None:
    """The Eviction API (``kubectl drain``): ``DisruptionTarget`` reason
    ``EvictionByEvictionAPI``, written by the apiserver itself, then the graceful DELETE."""
    await cluster.queues()
    job = await cluster.job()
    await cluster.workload(job)
    pods = await _queued_pods(cluster, job)
    bridge = await cluster.start_bridge()
    await _disrupt(
        cluster,
        pods[0],
        user="system:apiserver",
        reason=keys.DISRUPTION_EVICTION_BY_API,
        message="Eviction API: evicting",
    )

    async def created() -> bool:
        return len(await cluster.checkpoints()) == 1

    await eventually(created, what="Checkpoint of the evicted pod")
    await cluster.terminate(pods[0])
    await _released(cluster, pods[:1])
    cp = await cluster.one_checkpoint()
    assert cp.spec.trigger.source is checkpoint.TriggerSource.EVICTION_API
    assert _uids(cp) == [pods[0]["metadata"]["uid"]]
    assert await _evictions(bridge) == {("EvictionAPI", keys.DISRUPTION_EVICTION_BY_API): 1}


async def test_a_kueue_evicted_pod_that_also_carries_disruption_target_is_counted_once(
    cluster: Cluster,
) -> None:
    await cluster.queues()
    job = await cluster.job()
    workload = await cluster.workload(job)
    pods = await _queued_pods(cluster, job)
    await cluster.start_bridge()
    # both signals for the same pods, back to back: Kueue's Evicted and a DisruptionTarget
    await cluster.evict(workload)
    await _disrupt(cluster, pods[0], delete=False)

    async def recorded() -> bool:
        found = await cluster.checkpoints()
        return sorted(u for cp in found for u in _uids(cp)) == sorted(
            p["metadata"]["uid"] for p in pods
        )

    await eventually(recorded, what="every pod a member")
    for pod in pods:
        await cluster.delete_pod(pod)
        await cluster.terminate(pod)

    async def settled() -> bool:
        found = await cluster.checkpoints()
        return bool(found) and all(cp.status.phase.terminal for cp in found)

    await eventually(settled, what="terminal checkpoints")
    await _released(cluster, pods)
    found = await cluster.checkpoints()
    members = [u for cp in found for u in _uids(cp)]
    assert sorted(members) == sorted(p["metadata"]["uid"] for p in pods)  # each exactly once
    assert all(cp.status.phase is checkpoint.Phase.SUCCEEDED for cp in found)


def _volcano_victim(
    index: int, *, task: str = "worker", slot: int | None = None, owner_uid: str | None = None
) -> Obj:
    """The recorded victim pod, as the vc-controller made it, plumbed by our webhook
    (``owner_uid``: of a Volcano Job created in the test, instead of the recorded one)."""
    with VOLCANO_VICTIM.open() as stream:
        recorded = json.load(stream)["request"]["oldObject"]
    pod: Obj = copy.deepcopy(recorded)
    meta = pod["metadata"]
    for field in ("uid", "resourceVersion", "creationTimestamp"):
        meta.pop(field, None)
    meta["namespace"] = NS
    task_index = index if slot is None else slot
    meta["name"] = f"ckpt-train-{task}-{task_index}"
    meta["labels"]["volcano.sh/task-index"] = str(task_index)
    meta["annotations"]["volcano.sh/task-index"] = str(task_index)
    meta["labels"]["volcano.sh/task-spec"] = task
    meta["labels"][keys.PLUMBED_LABEL] = keys.PLUMBED_VALUE  # as the webhook plumbs it
    meta["annotations"]["volcano.sh/task-spec"] = task
    owner = meta["ownerReferences"][0]
    if owner_uid is not None:
        owner["uid"] = owner_uid
    meta["annotations"][keys.LINEAGE_ANNOTATION] = lineage.annotation_value(
        checkpoint.Lineage(
            namespace=NS,
            owner_kind=lineage.owner_kind(api_version=owner["apiVersion"], kind=owner["kind"]),
            owner_name=owner["name"],
            owner_uid=owner["uid"],
        )
    )
    meta["finalizers"] = [keys.CHECKPOINT_FINALIZER]
    pod["spec"]["nodeName"] = f"node-{index + 1}"
    # conftest's kubelet writes the recorded final status of a container named "main"
    pod["spec"]["containers"][0]["name"] = "main"
    pod["spec"]["terminationGracePeriodSeconds"] = 30
    pod.pop("status", None)
    return pod


async def _volcano(cluster: Cluster, *, opted_in: bool = True) -> str:
    for crd in sorted((VOLCANO / "crds").glob("*.yaml")):
        cluster.emulated.install_crd(fixtures.load_one(crd))
    await cluster.admin.create(  # the victim's priorityClassName
        resources.PRIORITY_CLASSES,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "low-priority"},
            "value": 100,
        },
    )
    queue = fixtures.load_one(VOLCANO / "examples/queue-checkpoint-optin.yaml")
    if not opted_in:
        queue["metadata"]["labels"].pop(keys.ENABLED_LABEL)
    await cluster.admin.create(resources.VOLCANO_QUEUES, queue)
    group = fixtures.load_one(VOLCANO / "examples/podgroup-ckpt-train.yaml")
    group["metadata"]["namespace"] = NS
    await cluster.admin.create(resources.PODGROUPS, group)
    return str(group["metadata"]["name"])


async def _volcano_pods(
    cluster: Cluster,
    n: int = 2,
    *,
    tasks: tuple[str, ...] = ("worker",),
    owner_uid: str | None = None,
) -> list[Obj]:
    """``n`` pods per task; a task's pods are indexed 0..n-1 (the vc-controller's task index)."""
    controller = cluster.emulated.client("system:serviceaccount:volcano-system:volcano-controllers")
    pods = []
    shapes = [(task, slot) for task in tasks for slot in range(n)]
    for index, (task, slot) in enumerate(shapes):
        victim = _volcano_victim(index, task=task, slot=slot, owner_uid=owner_uid)
        pod = await controller.create(resources.PODS, victim)
        kubelet = cluster.emulated.client(f"system:node:node-{index + 1}")
        pod["status"] = {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-02T10:00:00Z"}
            ],
            "containerStatuses": [
                {
                    "name": pod["spec"]["containers"][0]["name"],
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": base.format_time(base.now())}},
                }
            ],
        }
        pods.append(await kubelet.replace(resources.PODS, pod, subresource="status"))
    return pods


async def test_volcano_reclaim_victims_make_one_checkpoint_that_succeeds(cluster: Cluster) -> None:
    group = await _volcano(cluster)
    vcjob = fixtures.load_one(VOLCANO / "examples/vcjob-gpu-ckpt-train.yaml")
    vcjob["metadata"]["namespace"] = NS  # the victims' owner, by name (the recorded pod's)
    vcjob = await cluster.admin.create(resources.VOLCANO_JOBS, vcjob)
    pods = await _volcano_pods(cluster, owner_uid=vcjob["metadata"]["uid"])
    bridge = await cluster.start_bridge(queue_systems=("kueue", "volcano"))
    when = base.format_time(base.now())
    for pod in pods:
        await _disrupt(
            cluster,
            pod,
            user=VOLCANO_SCHEDULER,
            message="volcano: preempting to accommodate a higher priority pod",
            when=when,
            volcano_evict="reclaim",
        )

    async def both() -> bool:
        found = await cluster.checkpoints()
        return len(found) == 1 and len(_uids(found[0])) == 2

    await eventually(both, what="one Checkpoint of both victims")
    cp = await cluster.one_checkpoint()
    assert cp.spec.trigger.source is checkpoint.TriggerSource.VOLCANO
    assert cp.spec.trigger.message == "Pod is evicted, because of reclaim"
    assert cp.spec.workload == group
    assert cp.spec.lineage.owner_kind == "Job.batch.volcano.sh"
    for pod in pods:
        await cluster.terminate(pod)

    async def succeeded() -> bool:
        return await cluster.phase() == "Succeeded"

    await eventually(succeeded, what="Succeeded once both victims saved")
    await _released(cluster, pods)
    assert await _evictions(bridge) == {("Volcano", cp.spec.trigger.reason): 1}

    # issue 12: told where a Volcano user looks — the PodGroup and the Volcano Job — and on
    # the Checkpoint, like a Kueue set's Workload, Job and Checkpoint
    where = {
        ("PodGroup", group, resources.PODGROUPS.api_version),
        ("Job", vcjob["metadata"]["name"], resources.VOLCANO_JOBS.api_version),
        ("Checkpoint", cp.name, keys.API_VERSION),
    }

    def told(events: list[Obj]) -> set[tuple[str, str, str]]:
        return {
            (o["kind"], o["name"], o["apiVersion"]) for o in (e["involvedObject"] for e in events)
        }

    async def on_all_three() -> bool:
        for reason in (keys.EVENT_CHECKPOINT_STARTED, keys.EVENT_CHECKPOINT_SUCCEEDED):
            if told(await cluster.events(reason=reason)) != where:
                return False
        return True

    await eventually(
        on_all_three, within=30, what="Started and Succeeded on PodGroup, vcjob, Checkpoint"
    )
    (on_group,) = [
        e
        for e in await cluster.events(reason=keys.EVENT_CHECKPOINT_STARTED)
        if e["involvedObject"]["kind"] == "PodGroup"
    ]
    assert (
        on_group["involvedObject"]["uid"]
        == (await cluster.admin.get(resources.PODGROUPS, group, namespace=NS))["metadata"]["uid"]
    )
    assert on_group["reportingComponent"] == "kontinue.dev/bridge"


async def test_volcano_victims_of_a_queue_that_did_not_opt_in_get_no_checkpoint(
    cluster: Cluster,
) -> None:
    await _volcano(cluster, opted_in=False)
    pods = await _volcano_pods(cluster)
    await cluster.start_bridge(queue_systems=("kueue", "volcano"))
    for pod in pods:
        await _disrupt(cluster, pod, user=VOLCANO_SCHEDULER, volcano_evict="preempt")
        await cluster.terminate(pod)
    await _released(cluster, pods)
    assert await cluster.checkpoints() == []


async def test_volcano_tasks_make_distinct_member_identities(cluster: Cluster) -> None:
    """Issue 19 item 3: a vcjob with 2 tasks x 2 pods has two pods of each task index; their
    members are named by task and index, so no two collide (kontinue/identity.py)."""
    await _volcano(cluster)
    pods = await _volcano_pods(cluster, 2, tasks=("ps", "worker"))
    await cluster.start_bridge(queue_systems=("kueue", "volcano"))
    when = base.format_time(base.now())
    for pod in pods:
        await _disrupt(cluster, pod, user=VOLCANO_SCHEDULER, when=when, volcano_evict="reclaim")

    async def all_four() -> bool:
        found = await cluster.checkpoints()
        return len(found) == 1 and len(_uids(found[0])) == 4

    await eventually(all_four, what="one Checkpoint of the four victims")
    cp = await cluster.one_checkpoint()
    identities = {m.pod_name: m.identity for m in cp.spec.members}
    assert identities == {
        "ckpt-train-ps-0": "task=ps,index=0",
        "ckpt-train-ps-1": "task=ps,index=1",
        "ckpt-train-worker-0": "task=worker,index=0",
        "ckpt-train-worker-1": "task=worker,index=1",
    }
