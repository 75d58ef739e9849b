"""Proof 6 of issue 10: the Kueue flow end to end on a real control plane.

Real kube-apiserver, job controller, garbage collector and kube-scheduler v1.36.2; the project's
emulated kubelet (real local processes, real SIGTERM) and emulated Kueue act against that
apiserver in their own identities (tests/realcp/emulated.py); Kontinue's webhook and bridge run
as their console scripts under the ServiceAccounts and RBAC the ``kueue`` overlay renders
(tests/realcp/processes.py). The nodes register with a taint only these tests' pods tolerate, so
no other test's pending pod lands on them.

1. Kueue preemption: a low-priority Job of an opted-in ClusterQueue runs the reference trainer;
   a high-priority Job takes its quota. Kueue evicts the Workload and stops the Job with its real
   write sequence (suspend, the ``startTime=nil`` status patch that loses to the real job
   controller's update — 409 — and the second suspend), the real job controller deletes the pod
   (tracking finalizer first: never counted), the kubelet SIGTERMs the trainer, which saves; the
   bridge turns the termination message into a Succeeded Checkpoint. Once the high Job
   completes Kueue readmits the Job, the job controller creates a new pod, the webhook points it
   at the Checkpoint and it resumes from the saved step. ``status.failed`` stays 0.
2. kube-scheduler preemption: a high-priority pod outside Kueue needs the GPU the low Job's pod
   holds; the real scheduler sets ``DisruptionTarget`` (``PreemptionByScheduler``) and deletes
   it; the bridge checkpoints it, the podFailurePolicy the webhook added ignores the failure, the
   job controller creates the replacement (after its pod-failure backoff) and it restores.

Issue 19's proofs on this tier (member identity, consistency, carried-forward members, JobSets)
use this flow from tests/realcp/test_member_identity.py.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from emulator import cluster, gpus, nodes
from emulator.apiserver import server
from emulator.kueue import controller as kueue_controller
from kontinue import keys
from kontinue.kube import api, errors, resources
from kontinue.models import checkpoint
from tests.realcp import controlplane, emulated, jobset, processes
from tests.waiting import eventually

Obj = dict[str, Any]
GRACE = 8
PROGRESS = re.compile(r"^PROGRESS step=(\d+) ", re.MULTILINE)
KUEUE_EMULATION_CRDS = Path(__file__).parents[1] / "fixtures" / "kueue-emulation"
WAIT = 240.0
"""Bound for each step of the flow: generous, a loaded 2-core machine runs it."""
pytestmark = pytest.mark.timeout(900)


class Flow:
    """One run's objects: names are unique, so cluster-scoped ones never collide."""

    def __init__(self, c: cluster.Cluster, admin: api.Api, namespace: str, tag: str) -> None:
        self.cluster = c
        self.admin = admin
        self.namespace = namespace
        self.tag = tag
        self.low = f"low-{tag}"
        self.high = f"high-{tag}"
        self.queue = "team"
        self.taint = {"key": "kontinue.dev/realcp-flow", "value": tag, "effect": "NoSchedule"}
        self.node_label = {"kontinue.dev/realcp-flow": tag}
        self.nodes = [f"node-{tag}"]

    def pod_spec(self, *, priority: str, steps: int, save_seconds: float) -> Obj:
        return {
            "restartPolicy": "Never",
            "priorityClassName": priority,
            "terminationGracePeriodSeconds": GRACE,
            "nodeSelector": dict(self.node_label),
            "tolerations": [{**self.taint, "operator": "Equal"}],
            "containers": [
                {
                    "name": "trainer",
                    "image": "kontinue/reference-workload:dev",
                    "command": ["python", "-m", "reference_workload.trainer"],
                    "env": [
                        {"name": "TRAINER_STEPS", "value": str(steps)},
                        {"name": "TRAINER_RATE", "value": "20"},
                        {"name": "TRAINER_SAVE_SECONDS", "value": str(save_seconds)},
                        {"name": "TRAINER_PROGRESS_EVERY", "value": "1"},
                    ],
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {keys.GPU_RESOURCE: "1"},
                    },
                }
            ],
        }

    def job(
        self, name: str, *, priority: str, steps: int, save_seconds: float = 0.2, pods: int = 1
    ) -> Obj:
        job: Obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {keys.KUEUE_QUEUE_NAME_LABEL: self.queue},
            },
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": self.pod_spec(priority=priority, steps=steps, save_seconds=save_seconds)
                },
            },
        }
        if pods > 1:
            job["spec"].update(parallelism=pods, completions=pods, completionMode="Indexed")
        return job

    async def pods_of(self, job: str) -> list[Obj]:
        return await self.cluster.pods(self.namespace, labels={keys.JOB_NAME_LABEL: job})

    def log(self, pod: Obj) -> str:
        container = self.cluster.container(pod, "trainer")
        if container is None or not container.spec.log_path.exists():
            return ""
        return container.spec.log_path.read_text()

    async def running_pod(self, job: str, *, min_step: int, exclude: set[str]) -> Obj:
        found: list[Obj] = []

        async def progressing() -> bool:
            for pod in await self.pods_of(job):
                if pod["metadata"]["uid"] in exclude or pod["metadata"].get("deletionTimestamp"):
                    continue
                steps = [int(s) for s in PROGRESS.findall(self.log(pod))]
                if steps and max(steps) >= min_step:
                    found.append(pod)
                    return True
            return False

        await self.until(progressing, f"a running {job} pod past step {min_step}")
        return found[-1]

    async def run_urgent_pod(self) -> None:
        """Create a pod outside Kueue (named :attr:`high`, high priority, one GPU, a few steps)
        and wait until it Succeeded: kube-scheduler preempts a low pod to place it."""
        urgent = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.high, "namespace": self.namespace},
            "spec": self.pod_spec(priority=f"high-{self.tag}", steps=5, save_seconds=0.2),
        }
        await self.admin.create(resources.PODS, urgent, namespace=self.namespace)

        async def urgent_done() -> bool:
            pod = await self.admin.get(resources.PODS, self.high, namespace=self.namespace)
            return (pod.get("status") or {}).get("phase") == "Succeeded"

        await self.until(urgent_done, "the urgent pod Succeeded")

    async def until(self, check: Any, what: str) -> None:
        """``eventually`` within :data:`WAIT`, failing with the state of the flow's objects."""
        try:
            await eventually(check, within=WAIT, what=what)
        except pytest.fail.Exception as exc:
            raise AssertionError(f"{exc}\n{await self.describe()}") from None

    async def describe(self) -> str:
        """Jobs, Workloads and pods of the namespace, in one line each (for a failure)."""
        lines = []
        for resource in (resources.JOBS, resources.WORKLOADS, resources.PODS):
            listed = await self.admin.list(resource, namespace=self.namespace)
            for obj in listed["items"]:
                status = obj.get("status") or {}
                conditions = [
                    f"{c['type']}={c['status']}({c.get('reason', '')})"
                    for c in status.get("conditions") or []
                ]
                extra = {
                    k: status.get(k)
                    for k in ("phase", "active", "failed", "startTime")
                    if k in status
                }
                node = (obj.get("spec") or {}).get("nodeName")
                lines.append(
                    f"{resource.kind} {obj['metadata']['name']} suspend="
                    f"{(obj.get('spec') or {}).get('suspend')} node={node} {extra} {conditions}"
                    + (self._pod_detail(obj) if resource is resources.PODS else "")
                )
        events = await self.admin.list(resources.EVENTS, namespace=self.namespace)
        for event in events["items"]:
            involved = event.get("involvedObject") or {}
            lines.append(
                f"Event {involved.get('kind')}/{involved.get('name')} {event.get('reason')}: "
                f"{event.get('message')}"
            )
        return "\n".join(lines)

    def _pod_detail(self, pod: Obj) -> str:
        """Each container's state, and what the node's emulated kubelet holds for the pod."""
        status = pod.get("status") or {}
        states = [
            f"{c['name']}={next(iter(c.get('state') or {'?': 0}))}"
            for c in [
                *(status.get("initContainerStatuses") or []),
                *(status.get("containerStatuses") or []),
            ]
        ]
        uid = pod["metadata"]["uid"]
        kubelet = self.cluster.kubelets.get(str((pod.get("spec") or {}).get("nodeName")))
        held = "no kubelet"
        if kubelet is not None:
            held = "worker" if uid in kubelet.workers else "unseen"
            if uid in kubelet.finished:
                held = f"finished {kubelet.finished[uid].phase}"
            elif kubelet.pods.get(pod["metadata"]["name"], self.namespace) is None:
                held += ", not in its informer"
        deleting = " deleting" if pod["metadata"].get("deletionTimestamp") else ""
        return f" containers={states} kubelet={held}{deleting}"

    async def checkpoints(self) -> list[checkpoint.Checkpoint]:
        listed = await self.admin.list(resources.CHECKPOINTS, namespace=self.namespace)
        return [checkpoint.load(item) for item in listed["items"]]

    async def events(self, name: str) -> list[str]:
        listed = await self.admin.list(
            resources.EVENTS,
            namespace=self.namespace,
            field_selector=f"involvedObject.name={name}",
        )
        ordered = sorted(
            listed["items"],
            key=lambda e: (
                e.get("eventTime") or e.get("firstTimestamp") or "",
                e["metadata"]["name"],
            ),
        )
        return [str(e["reason"]) for e in ordered]


async def _queues(admin: api.Api, flow: Flow, policy: str, *, gpus: int) -> None:
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
    flavor = f"gpu-{flow.tag}"
    await admin.create(
        resources.RESOURCE_FLAVORS,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": dict(flow.node_label)},
        },
    )
    cq = f"cq-{flow.tag}"
    await admin.create(
        resources.CLUSTER_QUEUES,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {
                "name": cq,
                "labels": {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: policy},
            },
            "spec": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": flow.namespace}
                },
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", keys.GPU_RESOURCE],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 8},
                                    {"name": "memory", "nominalQuota": "32Gi"},
                                    {"name": keys.GPU_RESOURCE, "nominalQuota": gpus},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    await admin.create(
        resources.LOCAL_QUEUES,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": flow.queue, "namespace": flow.namespace},
            "spec": {"clusterQueue": cq},
        },
        namespace=flow.namespace,
    )


NOT_READY = "node.kubernetes.io/not-ready"


async def _lift_not_ready_taint(admin: api.Api, node: str) -> None:
    """The real apiserver's ``TaintNodesByCondition`` admission taints every new Node
    ``node.kubernetes.io/not-ready:NoSchedule``; the node lifecycle controller lifts it once the
    kubelet reports Ready (kubernetes/kubernetes pkg/controller/nodelifecycle
    ``doNoScheduleTaintingPass``). That controller is not run here (it would also taint a node
    whose kubelet renews no Lease, as the emulated one does not), so the test does its one act."""

    async def tainted() -> list[Obj]:
        current = await admin.get(resources.NODES, node)
        return list((current.get("spec") or {}).get("taints") or [])

    taints = await tainted()
    kept = [t for t in taints if t.get("key") != NOT_READY]
    if kept != taints:
        await admin.merge_patch(resources.NODES, node, {"spec": {"taints": kept}})
    assert all(t.get("key") != NOT_READY for t in await tainted())


@contextlib.asynccontextmanager
async def running_node(
    plane: controlplane.ControlPlane,
    installed: processes.Installed,
    admin: api.Api,
    namespace: str,
    workdir: Path,
    *,
    gpus_per_node: int = 1,
    gpus_of_nodes: tuple[int, ...] = (),
    consistency: str | None = None,
    users: tuple[str, ...] = (),
) -> AsyncIterator[tuple[Flow, str, emulated.RealApi]]:
    """What every flow of this tier needs, whatever its queue system: one tainted node of
    ``gpus_per_node`` GPUs run by the emulated kubelet against ``plane`` (or one node per entry
    of ``gpus_of_nodes``, the first named ``node-<tag>``, the others ``node-<tag>-<i>``), a
    hostPath CheckpointPolicy (``consistency``: its ``spec.restore.consistency``; unset: the
    default, ``coupled``), and the bridge, ready. Yields the :class:`Flow`, the policy's name,
    and the :class:`emulated.RealApi` the queue system's emulation acts through (``users``: its
    identities, besides the kubelets')."""
    tag = secrets.token_hex(3)
    specs = [
        nodes.NodeSpec(
            f"node-{tag}-{i}" if i else f"node-{tag}",
            gpu=gpus.GpuProfile(count=count),
            labels={"kontinue.dev/realcp-flow": tag},
            taints=({"key": "kontinue.dev/realcp-flow", "value": tag, "effect": "NoSchedule"},),
        )
        for i, count in enumerate(gpus_of_nodes or (gpus_per_node,))
    ]
    real = await emulated.RealApi(plane, [*users, *(spec.user for spec in specs)]).open()
    bridge = processes.start_bridge(installed)
    installed.programs["bridge"] = bridge
    # RealApi stands where the emulator takes its ApiServer (it offers ``client(user)``).
    c = cluster.Cluster(
        nodes=specs, workdir=workdir, components={"kubelet"}, api=cast(server.ApiServer, real)
    )
    try:
        await c.start()
        for spec in specs:
            await _lift_not_ready_taint(admin, spec.name)
        flow = Flow(c, admin, namespace, tag)
        flow.nodes = [spec.name for spec in specs]
        policy = f"hostpath-{tag}"
        restore = {"restore": {"consistency": consistency}} if consistency else {}
        await admin.create(
            resources.CHECKPOINT_POLICIES,
            {
                "apiVersion": keys.API_VERSION,
                "kind": "CheckpointPolicy",
                "metadata": {"name": policy},
                "spec": {
                    "storage": {"hostPath": {"path": f"/var/kontinue-{tag}"}, "mountPath": "/ckpt"},
                    "minGracePeriodSeconds": GRACE,
                    **restore,
                },
            },
        )
        await eventually(
            lambda: processes.bridge_ready(bridge), within=WAIT, what="the bridge ready"
        )
        yield flow, policy, real
    finally:
        await c.stop()
        for spec in specs:
            with contextlib.suppress(errors.NotFound):
                await admin.delete(resources.NODES, spec.name)
        await real.close()


@contextlib.asynccontextmanager
async def running_flow(
    plane: controlplane.ControlPlane,
    installed: processes.Installed,
    admin: api.Api,
    namespace: str,
    workdir: Path,
    *,
    gpus_per_node: int = 1,
    gpus_of_nodes: tuple[int, ...] = (),
    consistency: str | None = None,
    jobsets: bool = False,
) -> AsyncIterator[Flow]:
    """:func:`running_node` with the emulated Kueue and an opted-in ClusterQueue, whose GPU
    quota is the nodes' GPUs; ``jobsets``: the upstream JobSet CRD installed and the emulated
    Kueue's JobSet integration on (emulator/kueue/jobsets.py; the test plays the JobSet
    controller: tests/realcp/jobset.py)."""
    plane.kubectl("apply", "--server-side", "-f", str(KUEUE_EMULATION_CRDS))
    await emulated.grant(admin, kueue_controller.USER)
    if jobsets:
        jobset.install_crd(plane)
    async with running_node(
        plane,
        installed,
        admin,
        namespace,
        workdir,
        gpus_per_node=gpus_per_node,
        gpus_of_nodes=gpus_of_nodes,
        consistency=consistency,
        users=(kueue_controller.USER,),
    ) as (flow, policy, real):
        await _queues(admin, flow, policy, gpus=sum(gpus_of_nodes or (gpus_per_node,)))
        kueue = kueue_controller.Kueue(
            cast(server.ApiServer, real), stop_wait=60.0, jobsets=jobsets
        )
        try:
            await kueue.start()

            async def plumbing() -> bool:  # the webhook's caches see the labelled queue
                dry = await admin.create(
                    resources.JOBS,
                    flow.job("probe", priority=f"low-{flow.tag}", steps=1),
                    namespace=namespace,
                    dry_run=True,
                )
                return bool(dry["spec"].get("podReplacementPolicy") == "Failed")

            await eventually(plumbing, within=WAIT, what="the webhook plumbing the queue's Jobs")
            yield flow
        finally:
            await kueue.stop()


async def test_a_kueue_preemption_is_checkpointed_readmitted_and_restored(
    scheduler: controlplane.ControlPlane,
    kontinue: processes.Installed,
    admin: api.Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    async with running_flow(scheduler, kontinue, admin, namespace, tmp_path) as flow:
        low = flow.job(flow.low, priority=f"low-{flow.tag}", steps=100000)
        created = await admin.create(resources.JOBS, low, namespace=namespace)
        assert created["spec"]["suspend"] is True  # Kueue's webhook, called by the apiserver
        victim = await flow.running_pod(flow.low, min_step=10, exclude=set())
        assert victim["spec"]["nodeName"] == f"node-{flow.tag}"  # bound by kube-scheduler

        high = flow.job(flow.high, priority=f"high-{flow.tag}", steps=5)
        await admin.create(resources.JOBS, high, namespace=namespace)

        async def high_complete() -> bool:
            job = await admin.get(resources.JOBS, flow.high, namespace=namespace)
            return cluster.job_condition("Complete")(job)

        await flow.until(high_complete, "the high-priority Job Complete")
        saved_log = flow.log(victim)
        assert "SAVED" in saved_log, saved_log[-500:]
        saved = max(int(step) for step in PROGRESS.findall(saved_log))

        successor = await flow.running_pod(
            flow.low, min_step=saved + 1, exclude={victim["metadata"]["uid"]}
        )
        (cp,) = await flow.checkpoints()
        assert cp.status.phase is checkpoint.Phase.SUCCEEDED, cp.status
        assert [m.pod_uid for m in cp.spec.members] == [victim["metadata"]["uid"]]
        pod = await admin.get(resources.PODS, successor["metadata"]["name"], namespace=namespace)
        assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == cp.name
        assert f"RESTORED step={saved} " in flow.log(successor), flow.log(successor)[:500]

        job = await admin.get(resources.JOBS, flow.low, namespace=namespace)
        assert not (job.get("status") or {}).get("failed"), job["status"]
        # Kueue's write sequence: its startTime=nil patch lost to the job controller's update
        # (which cleared startTime itself), so Stop ran again: two Stopped, then readmission.
        reasons = await flow.events(flow.low)
        assert reasons.count("Stopped") >= 2, reasons
        assert reasons.count("Started") >= 2, reasons
        assert "Suspended" in reasons, reasons  # the real job controller's Events
        assert "Resumed" in reasons, reasons


async def test_a_kube_scheduler_preemption_ends_restored(
    scheduler: controlplane.ControlPlane,
    kontinue: processes.Installed,
    admin: api.Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    async with running_flow(scheduler, kontinue, admin, namespace, tmp_path) as flow:
        low = flow.job(flow.low, priority=f"low-{flow.tag}", steps=100000)
        await admin.create(resources.JOBS, low, namespace=namespace)
        victim = await flow.running_pod(flow.low, min_step=10, exclude=set())

        # A pod outside Kueue that needs the node's only GPU, at a higher priority.
        await flow.run_urgent_pod()
        saved_log = flow.log(victim)
        assert "SAVED" in saved_log, saved_log[-500:]
        saved = max(int(step) for step in PROGRESS.findall(saved_log))

        successor = await flow.running_pod(
            flow.low, min_step=saved + 1, exclude={victim["metadata"]["uid"]}
        )
        (cp,) = await flow.checkpoints()
        assert cp.status.phase is checkpoint.Phase.SUCCEEDED, cp.status
        assert (cp.spec.trigger.source, cp.spec.trigger.reason) == (
            "Scheduler",
            "PreemptionByScheduler",
        )
        assert [m.pod_uid for m in cp.spec.members] == [victim["metadata"]["uid"]]
        pod = await admin.get(resources.PODS, successor["metadata"]["name"], namespace=namespace)
        assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == cp.name
        assert f"RESTORED step={saved} " in flow.log(successor), flow.log(successor)[:500]

        job = await admin.get(resources.JOBS, flow.low, namespace=namespace)
        # the webhook's podFailurePolicy ignored the preemption: nothing counted
        assert not (job.get("status") or {}).get("failed"), job["status"]
        wl = (await admin.list(resources.WORKLOADS, namespace=namespace))["items"]
        assert [w["metadata"]["name"] for w in wl if _evicted(w)] == []  # Kueue never evicted
        # The real job controller created the replacement only after its pod-failure backoff
        # (pkg/controller/job/backoff_utils.go: 10 s after the failed pod finished). A lower
        # bound only, and in whole seconds: under load the gap only grows.
        (member,) = cp.status.members
        assert member.finished_at is not None, member
        created = datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"])
        assert (created - member.finished_at).total_seconds() >= 8, (member, created)


def _evicted(wl: Obj) -> bool:
    return any(
        c["type"] == "Evicted" and c["status"] == "True"
        for c in (wl.get("status") or {}).get("conditions") or []
    )


def restore_member(pod: Obj) -> str | None:
    """``KONTINUE_RESTORE_MEMBER`` of the pod's restore init container, if it restores."""
    for container in pod["spec"].get("initContainers") or []:
        for env in container.get("env") or []:
            if env["name"] == "KONTINUE_RESTORE_MEMBER":
                return str(env.get("value"))
    return None
