"""One run of the scavenger-queue scenario on the emulated cluster, with or without Kontinue.

Two nodes with four GPUs each. Eight long, low-priority *scavenger* Jobs (one GPU each) in one
Kueue ClusterQueue soak up the idle GPUs; high-priority Jobs arrive in seeded bursts and Kueue
preempts scavengers to admit them. When a burst's jobs finish, Kueue readmits the scavengers.
With Kontinue, the ClusterQueue carries ``kontinue.dev/enabled: "true"``: each preemption
becomes a checkpoint in the victim's grace period and each readmission a restore. Priority jobs
opt out (``kontinue.dev/checkpoint: "false"``): they are short and nothing should slow them.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emulator import gpus, nodes
from emulator.demo import observe, scrape, stack, systems, timeline, torch_workload, trace
from emulator.jobs import backoff
from kontinue import keys
from kontinue.kube import resources

NAMESPACE = "default"
QUEUE = "team"
CLUSTER_QUEUE = "gpu-cq"
POLICY = "demo"

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Options:
    seed: int = 1
    duration: float = 90.0
    scavengers: int = 8
    """Scavenger pods (one GPU each)."""
    pairs: int = 1
    """How many scavenger Jobs are 2-pod Indexed Jobs, created last — the multi-pod workload,
    whose pods each restore their own index's state (docs/api.md, "Member identity"); the rest
    are single-pod Jobs. ``scavengers`` pods in all. Volcano runs submit each pair as a vcjob of
    one task with 2 replicas (``systems.job``): identities ``task=train,index=0`` and ``1``,
    whose pods Volcano names ``<job>-train-<index>`` in every incarnation."""
    nodes: int = 2
    gpus_per_node: int = 4
    rate: float = 5.0
    """Trainer steps per second: the emulated training speed."""
    checkpoint_seconds: float = 1.0
    """How long a scavenger takes to save (its ``--save-seconds``)."""
    grace_seconds: int = 8
    burst_every: float = 30.0
    state_bytes: int = 1 << 16
    workload: str = "counter"
    """``counter``: reference_workload/trainer.py; ``torch``: scavengers train a real PyTorch
    model (emulator/demo/torch_workload.py) for ``torch_epochs`` epochs."""
    torch_epochs: int = 4
    queue_system: str = systems.KUEUE
    """``kueue``, ``volcano`` or ``scheduler`` (emulator/demo/systems.py)."""


def priority_classes() -> list[Obj]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        for name, value in (("scavenger", 100), ("priority", 1000))
    ]


def queues(total_gpus: int) -> list[tuple[resources.Resource, Obj]]:
    product = gpus.H100.product
    return [
        (
            resources.RESOURCE_FLAVORS,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "h100"},
                "spec": {"nodeLabels": {keys.GPU_PRODUCT_LABEL: product}},
            },
        ),
        (
            resources.CLUSTER_QUEUES,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": CLUSTER_QUEUE},
                "spec": {
                    "namespaceSelector": {},
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", keys.GPU_RESOURCE],
                            "flavors": [
                                {
                                    "name": "h100",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": 64},
                                        {"name": "memory", "nominalQuota": "256Gi"},
                                        {"name": keys.GPU_RESOURCE, "nominalQuota": total_gpus},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
        ),
        (
            resources.LOCAL_QUEUES,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": QUEUE, "namespace": NAMESPACE},
                "spec": {"clusterQueue": CLUSTER_QUEUE},
            },
        ),
    ]


def policy(options: Options, *, host_path: str = "/var/kontinue") -> Obj:
    """The demo's CheckpointPolicy: hostPath storage every node shares (development only)."""
    return {
        "apiVersion": keys.API_VERSION,
        "kind": "CheckpointPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "storage": {"hostPath": {"path": host_path}, "mountPath": "/checkpoints"},
            "minGracePeriodSeconds": options.grace_seconds,
            "compatibility": ["gpuProduct", "cudaDriverMajor", "gpuCount"],
        },
    }


def trainer_job(
    name: str,
    *,
    role: timeline.Role,
    gpus: int,
    steps: int,
    options: Options,
    dry_run_probe: bool = False,
    pods: int = 1,
) -> Obj:
    template_meta: Obj = {"labels": {observe.ROLE_LABEL: role.value}}
    module, env = (
        "reference_workload.trainer",
        {
            "TRAINER_STEPS": str(steps),
            "TRAINER_RATE": str(options.rate),
            "TRAINER_SAVE_SECONDS": str(options.checkpoint_seconds),
            "TRAINER_STATE_BYTES": str(options.state_bytes),
        },
    )
    if options.workload == "torch" and role is timeline.Role.SCAVENGER:
        module = torch_workload.MODULE
        env = torch_workload.env(epochs=options.torch_epochs, rate=options.rate)
    if role is timeline.Role.PRIORITY:
        template_meta["annotations"] = {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"}
    shape: Obj = {}
    if pods > 1:  # Indexed: every pod has its completion index as its member identity
        shape = {"parallelism": pods, "completions": pods, "completionMode": "Indexed"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {keys.KUEUE_QUEUE_NAME_LABEL: QUEUE},
        },
        "spec": {
            **shape,
            "backoffLimit": 6,
            "template": {
                "metadata": {} if dry_run_probe else template_meta,
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": role.value,
                    "terminationGracePeriodSeconds": options.grace_seconds,
                    "containers": [
                        {
                            "name": observe.CONTAINER,
                            "image": "ghcr.io/kontinue/kontinue:dev",
                            "command": ["python", "-m", module],
                            "env": [{"name": k, "value": v} for k, v in env.items()],
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "128Mi"},
                                "limits": {keys.GPU_RESOURCE: str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


Progress = Callable[[float, dict[str, int]], None]


async def run(
    *,
    options: Options,
    with_kontinue: bool,
    workdir: Path,
    progress: Progress | None = None,
) -> timeline.Run:
    """Run the trace once and return what was observed."""
    node_specs = [
        nodes.NodeSpec(f"gpu-{chr(ord('a') + i)}", gpu=gpus.GpuProfile(count=options.gpus_per_node))
        for i in range(options.nodes)
    ]
    total_gpus = options.nodes * options.gpus_per_node
    arrivals = trace.bursts(
        seed=options.seed, duration=options.duration, burst_every=options.burst_every
    )
    name = "with Kontinue" if with_kontinue else "without (baseline)"
    kind = options.queue_system

    def submit(
        name: str, role: timeline.Role, gpus: int, steps: int, index: int = 0, pods: int = 1
    ) -> Any:
        batch = trainer_job(
            name,
            role=role,
            gpus=gpus,
            steps=steps,
            options=options,
            dry_run_probe=name == "probe",
            pods=pods,
        )
        return systems.job(kind, batch, role=role, index=index)

    async with stack.running(
        workdir=workdir,
        node_specs=node_specs,
        with_kontinue=with_kontinue,
        policy=policy(options) if with_kontinue else None,
        queue_system=kind,
        pod_failure_backoff=backoff.DEFAULT_SECONDS,
    ) as system:
        admin = system.admin
        for obj in priority_classes():
            await admin.create(resources.PRIORITY_CLASSES, obj)
        for resource, obj in systems.setup(kind, total_gpus, queues(total_gpus)):
            await admin.create(resource, obj)
        if with_kontinue:
            queue_resource, queue_name = systems.opted_in_queue(kind, CLUSTER_QUEUE)
            await admin.patch(
                queue_resource, queue_name, stack.opt_in_labels(POLICY), content_type=stack.MERGE
            )
            _, probe = submit("probe", timeline.Role.SCAVENGER, 1, 1)
            await stack.wait_plumbing(system, probe_job=probe)
        loop = asyncio.get_running_loop()
        recorder = observe.Recorder(system.cluster, namespace=NAMESPACE, started_at=loop.time())
        await recorder.start()
        for index, size in enumerate(scavenger_shapes(options)):
            await admin.create(
                *submit(f"scavenger-{index}", timeline.Role.SCAVENGER, 1, 10**9, pods=size)
            )
        pending = list(arrivals)
        submitted = 0
        while (elapsed := recorder.now()) < options.duration:
            while pending and pending[0].at <= elapsed:
                arrival = pending.pop(0)
                await admin.create(
                    *submit(
                        arrival.name, timeline.Role.PRIORITY, arrival.gpus, arrival.steps, submitted
                    )
                )
                submitted += 1
            if progress is not None:
                progress(elapsed, _counts(recorder))
            await asyncio.sleep(0.25)
        await system.freeze()  # nothing moves from here on: the counts below are final
        checkpoints: list[Obj] = []
        scraped: dict[str, int] = {}
        if with_kontinue:
            listed = await admin.list(resources.CHECKPOINTS, namespace=NAMESPACE)
            checkpoints = listed["items"]
            scraped = await scrape.settled_restores(
                system.bridge_url,
                restored=lambda: sum(
                    1 for p in recorder.pods.values() if p.restored_from and p.restore_exit == 0
                ),
            )
        await recorder.stop()
        pods = recorder.records(checkpoints=checkpoints)
    return timeline.Run(
        name=name,
        duration=options.duration,
        gpus_total=total_gpus,
        steps_per_second=options.rate,
        pods=tuple(pods),
        workload=options.workload,
        bridge_restores=scraped,
        queue_system=kind,
        checkpoint_sources=dict(
            collections.Counter(str(cp["spec"]["trigger"]["source"]) for cp in checkpoints)
        ),
    )


def scavenger_shapes(options: Options) -> list[int]:
    """Pods per scavenger Job, ``scavengers`` pods in all: single pods, then ``pairs`` Jobs of 2
    last — the most recently admitted, so the first Kueue preempts (candidates of equal priority
    go newest reservation first: kubernetes-sigs/kueue pkg/scheduler/preemption/common/
    ordering.go ``CandidatesOrdering``, emulator/kueue/quota.py) and the multi-pod case is
    exercised early in a run."""
    pairs = max(0, min(options.pairs, options.scavengers // 2))
    return [1] * (options.scavengers - 2 * pairs) + [2] * pairs


def _counts(recorder: observe.Recorder) -> dict[str, int]:
    pods = list(recorder.pods.values())
    return {
        "preemptions": sum(
            1 for p in pods if p.role is timeline.Role.SCAVENGER and p.terminating is not None
        ),
        "restores": sum(1 for p in pods if p.restored_from),
        "priority": sum(1 for p in pods if p.role is timeline.Role.PRIORITY),
    }


async def wait_plumbed(system: stack.Stack, options: Options) -> None:
    """Wait until the webhook plumbs a dry-run scavenger Job of the opted-in ClusterQueue."""
    probe = trainer_job(
        "probe", role=timeline.Role.SCAVENGER, gpus=1, steps=1, options=options, dry_run_probe=True
    )
    await stack.wait_plumbing(system, probe_job=probe)


async def opt_in(system: stack.Stack, options: Options) -> None:
    """Opt the demo's Kueue ClusterQueue in (policy ``demo``), then :func:`wait_plumbed`."""
    await system.admin.patch(
        resources.CLUSTER_QUEUES,
        CLUSTER_QUEUE,
        stack.opt_in_labels(POLICY),
        content_type=stack.MERGE,
    )
    await wait_plumbed(system, options)
