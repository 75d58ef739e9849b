"""The demo's queue systems: the objects each needs, its opt-in, and one job as it submits it.

- ``kueue`` (``make demo``'s default): one ClusterQueue with exactly the cluster's GPUs and
  ``withinClusterQueue: LowerPriority`` — Kueue evicts scavenger Workloads to admit priority
  Jobs (emulator/kueue).
- ``scheduler``: the same Jobs through Kueue, but the ClusterQueue has twice the GPUs and
  ``withinClusterQueue: Never``: Kueue admits everything and never evicts; the nodes are full,
  so the emulated kube-scheduler preempts scavenger pods by priority (``DisruptionTarget`` /
  ``PreemptionByScheduler``, emulator/scheduler.py), the case Kontinue handles through the pod
  condition (docs/bridge.md).
- ``volcano``: Volcano Jobs on a cluster without Kueue. Scavengers run in the Volcano Queue
  ``scavenge`` (``deserved`` 0, so it only borrows); priority vcjobs alternate between the queue
  ``prod`` (``deserved`` every GPU: Volcano's ``reclaim`` takes GPUs back across queues) and
  ``scavenge`` itself at a higher priority (Volcano's ``preempt`` inside the queue),
  emulator/volcano. A scavenger carries upstream's example policy ``PodEvicted -> RestartJob``
  with Volcano's default ``maxRetry`` (3): without Kontinue each eviction restarts it and uses a
  retry (the third fails it, upstream issue #2560); with Kontinue the webhook rewrites the
  policies at CREATE (docs/webhook.md). Priority pods carry ``volcano.sh/preemptable: "false"``:
  Volcano's reclaim takes from an over-share queue whatever the priority, and the priority
  vcjobs in ``scavenge`` would otherwise be reclaimed by those in ``prod``.
"""

from __future__ import annotations

import copy
from typing import Any

from emulator.demo import timeline
from emulator.volcano import objects
from kontinue import keys
from kontinue.kube import resources

Obj = dict[str, Any]
KUEUE = "kueue"
SCHEDULER = "scheduler"
VOLCANO = "volcano"
ALL = (KUEUE, VOLCANO, SCHEDULER)
SCAVENGE = "scavenge"
PROD = "prod"
PREEMPTABLE = "volcano.sh/preemptable"
"""pkg/scheduler/api/pod_info.go ``GetPodPreemptable``: ``"false"`` keeps a pod off every victim
list (the priority plugin orders preempt victims only; reclaim across queues ignores priority)."""
SCAVENGER_POLICIES = [{"event": "PodEvicted", "action": "RestartJob"}]


def setup(
    system: str, total_gpus: int, kueue_queues: list[tuple[resources.Resource, Obj]]
) -> list[tuple[resources.Resource, Obj]]:
    """The queue objects to create before any job (``kueue_queues``: the Kueue demo's)."""
    if system == VOLCANO:
        return [
            (resources.VOLCANO_QUEUES, _volcano_queue(SCAVENGE, total_gpus, deserved=0)),
            (resources.VOLCANO_QUEUES, _volcano_queue(PROD, total_gpus, deserved=total_gpus)),
        ]
    found = kueue_queues
    if system == SCHEDULER:
        found = [(resource, copy.deepcopy(obj)) for resource, obj in found]
        for resource, obj in found:
            if resource == resources.CLUSTER_QUEUES:
                obj["spec"]["preemption"] = {"withinClusterQueue": "Never"}
                (group,) = obj["spec"]["resourceGroups"]
                for quota in group["flavors"][0]["resources"]:
                    if quota["name"] == keys.GPU_RESOURCE:
                        quota["nominalQuota"] = 2 * total_gpus
    return found


def _volcano_queue(name: str, total_gpus: int, *, deserved: int) -> Obj:
    """``deserved`` names every resource the pods request: the capacity plugin counts one left
    out as nothing deserved, so a queue could never reclaim for a pod requesting it."""
    share = deserved / total_gpus
    return objects.queue(
        name,
        capability={keys.GPU_RESOURCE: str(total_gpus), "cpu": "64", "memory": "256Gi"},
        deserved={
            keys.GPU_RESOURCE: str(deserved),
            "cpu": str(int(64 * share)),
            "memory": f"{int(256 * share)}Gi",
        },
    )


def opted_in_queue(system: str, cluster_queue: str) -> tuple[resources.Resource, str]:
    """The queue that carries ``kontinue.dev/enabled``: the scavengers'."""
    if system == VOLCANO:
        return resources.VOLCANO_QUEUES, SCAVENGE
    return resources.CLUSTER_QUEUES, cluster_queue


def job(
    system: str, batch: Obj, *, role: timeline.Role, index: int = 0
) -> tuple[resources.Resource, Obj]:
    """The demo's ``batch/v1`` Job ``batch`` as ``system`` runs it: itself, or a one-task
    Volcano Job with its pod template, one replica per pod of ``batch`` (its ``parallelism``:
    a 2-pod Indexed Job becomes task ``train`` with 2 replicas, identities ``task=train,index=0``
    and ``index=1``, kontinue/identity.py); ``index`` alternates a priority vcjob's queue.

    ``minAvailable`` stays 1: Volcano's gang plugin never preempts a job below its
    ``minAvailable`` (volcano-sh/volcano pkg/scheduler/plugins/gang/gang.go ``preemptableFn``),
    so a gang of every replica would never be evicted, and the emulation does not copy that
    protection (emulator/volcano/victims.py); with 1, a session may evict one pod of the pair
    and a later session the other, as upstream does."""
    if system != VOLCANO:
        return resources.JOBS, batch
    template = copy.deepcopy(batch["spec"]["template"])
    priority = role is timeline.Role.PRIORITY
    if priority:  # Volcano's reclaim ignores priority: keep priority work off its victim list
        template.setdefault("metadata", {}).setdefault("annotations", {})[PREEMPTABLE] = "false"
    return resources.VOLCANO_JOBS, objects.job(
        batch["metadata"]["name"],
        batch["metadata"]["namespace"],
        queue=PROD if priority and index % 2 == 0 else SCAVENGE,
        tasks=[
            objects.task("train", template, replicas=int(batch["spec"].get("parallelism") or 1))
        ],
        priority=role.value,
        policies=[] if priority else SCAVENGER_POLICIES,
    )
