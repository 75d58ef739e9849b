"""The workload shapes the soak evicts (issue 19, "Prove it"): which objects make the workload,
which of its pods are its members, each member's identity, and which sources evict it.

- ``indexed``: a 2-pod Indexed batch/v1 Job in an opted-in Kueue ClusterQueue; ``kueue`` evicts
  the whole Workload (a higher-priority Job in the same ClusterQueue).
- ``jobset``: a JobSet of 2 replicated Jobs (``driver``, ``workers``) x 2 pods, as its controller
  creates it: two Indexed child Jobs whose metadata and pod templates carry the labels and
  annotations kubernetes-sigs/jobset pkg/controllers/jobset_controller.go
  ``labelAndAnnotateObject`` stamps (keys in api/jobset/v1alpha2/jobset_types.go). No JobSet
  controller or JobSet Workload exists on the emulated cluster (emulator/kueue has no JobSet
  integration; each child is its own Workload there, unlike upstream, where Kueue admits the
  JobSet as one), so the whole-workload source is ``drain``: every pod evicted through the
  Eviction API, as ``kubectl drain`` of every node would.
- ``vcjob``: a Volcano Job of 2 tasks (``master``, ``worker``) x 2 pods in an opted-in Volcano
  Queue on a cluster with no Kueue; ``volcano`` is a higher-priority vcjob in another Queue that
  Volcano reclaims the GPUs for (emulator/volcano/victims.py), evicting every pod.

Each shape's identities are written here from docs/api.md ("Member identity"), not taken from
kontinue/identity.py, so the product does not grade itself: ``index=<i>``;
``replicatedJob=<name>,jobIndex=<j>,index=<i>``; ``task=<name>,index=<i>``. ``eviction-api``
(one pod, as a drain of one node) and ``scheduler`` (a higher-priority bare pod that fits
nowhere: kube-scheduler preempts one pod) apply to the Kubernetes Job shapes; the emulated
kube-scheduler never preempts for the Volcano shape's cluster, whose pods Volcano schedules.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emulator.volcano import objects as volcano_objects
from kontinue import keys
from kontinue.kube import resources
from tests import jobsets
from tests.integration.workloads import member_trainer

Obj = dict[str, Any]
NAME = "par"
JOBSET_UID = "5b0c1f9e-7d1a-4f57-9a53-1e2d3c4b5a69"
"""The JobSet's uid as its controller would stamp it (no JobSet object exists: see above)."""
REPLICATED = ("driver", "workers")
TASKS = ("master", "worker")


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    queue_system: str
    """``kueue`` or ``volcano``: which queue system the soak's cluster runs."""
    identities: tuple[str, ...]
    sources: tuple[str, ...]
    """The first evicts the whole workload."""
    indexes: int
    """How many completion/task indexes a member can have (the ``torn-<i>``/``full-<i>``
    markers of tests/integration/workloads/member_trainer.py name one)."""

    @property
    def whole(self) -> str:
        return self.sources[0]

    @property
    def members(self) -> int:
        return len(self.identities)

    def index_of(self, victim: int) -> int:
        """The trailing index of ``identities[victim]``."""
        return int(self.identities[victim].rpartition("index=")[2])


def indexed(pods: int) -> Shape:
    """An Indexed Job of ``pods`` pods (``make soak`` runs 2; ``--members`` others)."""
    return Shape(
        "indexed",
        "kueue",
        identities=tuple(f"index={i}" for i in range(pods)),
        sources=("kueue", "eviction-api", "scheduler"),
        indexes=pods,
    )


INDEXED = indexed(2)
JOBSET = Shape(
    "jobset",
    "kueue",
    identities=tuple(
        f"replicatedJob={rj},jobIndex=0,index={i}" for rj in REPLICATED for i in range(2)
    ),
    sources=("drain", "eviction-api", "scheduler"),
    indexes=2,
)
VCJOB = Shape(
    "vcjob",
    "volcano",
    identities=tuple(f"task={t},index={i}" for t in TASKS for i in range(2)),
    sources=("volcano", "eviction-api"),
    indexes=2,
)
SHAPES = {s.name: s for s in (INDEXED, JOBSET, VCJOB)}


def identity(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """A pod's identity from what its controllers stamped ("" if it has none)."""

    def read(key: str) -> str | None:
        value = labels.get(key)
        return annotations.get(key) if value is None else value

    completion = read(keys.JOB_COMPLETION_INDEX_ANNOTATION)
    if read(keys.JOBSET_NAME_LABEL):
        replicated = read(keys.JOBSET_REPLICATED_JOB_LABEL)
        job_index = read(keys.JOBSET_JOB_INDEX_LABEL)
        return f"replicatedJob={replicated},jobIndex={job_index},index={completion}"
    task = read(keys.VOLCANO_TASK_SPEC_KEY)
    if task is not None:
        return f"task={task},index={read(keys.VOLCANO_TASK_INDEX_KEY)}"
    return f"index={completion}" if completion is not None else ""


def workload_of(labels: Mapping[str, str]) -> str:
    """The name of the workload a pod belongs to: its JobSet, vcjob or Job."""
    return (
        labels.get(keys.JOBSET_NAME_LABEL)
        or labels.get(keys.VOLCANO_JOB_NAME_LABEL)
        or labels.get(keys.JOB_NAME_LABEL)
        or ""
    )


def owner_uid(labels: Mapping[str, str], owners: list[Obj]) -> str:
    """The lineage's owner uid: the JobSet's (its label), else the pod's controller's."""
    if labels.get(keys.JOBSET_UID_LABEL):
        return str(labels[keys.JOBSET_UID_LABEL])
    return next((str(o.get("uid", "")) for o in owners if o.get("controller")), "")


def selector(shape: Shape) -> dict[str, str]:
    """The labels every pod of the soak's workload carries."""
    if shape is JOBSET:
        return {keys.JOBSET_NAME_LABEL: NAME}
    if shape is VCJOB:
        return {keys.VOLCANO_JOB_NAME_LABEL: NAME}
    return {keys.JOB_NAME_LABEL: NAME}


def trainer_job(name: str, *, priority: str, members: int, control: Path, grace: int) -> Obj:
    return member_trainer.job(
        name,
        namespace="default",
        priority=priority,
        members=members,
        control=control,
        grace=grace,
        backoff_limit=0,
        short=priority == "high",
    )


def jobset_child(replicated: str, *, control: Path, grace: int) -> Obj:
    """The child Job of ``replicated`` as the JobSet controller creates it (tests/jobsets.py),
    for a JobSet ``par`` of uid :data:`JOBSET_UID` (no such object exists) whose replicated Jobs
    template 2-pod Indexed Jobs of the member trainer, each in the LocalQueue ``team``."""
    job = trainer_job(
        f"{NAME}-{replicated}-0", priority="low", members=2, control=control, grace=grace
    )
    template = {"metadata": {"labels": job["metadata"]["labels"]}, "spec": job["spec"]}
    replicated_jobs = [{"name": rj, "replicas": 1, "template": template} for rj in REPLICATED]
    jobset = {
        "metadata": {"name": NAME, "namespace": "default", "uid": JOBSET_UID},
        "spec": {"replicatedJobs": replicated_jobs},
    }
    entry = next(rj for rj in replicated_jobs if rj["name"] == replicated)
    return jobsets.child_job(jobset, entry, 0)


VOLCANO_POLICIES = [{"event": "PodEvicted", "action": "RestartJob"}]
"""Upstream's example policy of issue #2560, which the webhook rewrites at CREATE. Not
``PodFailed -> TerminateJob`` as well: Volcano raises ``PodFailed`` for an evicted pod that ends
Failed while it terminates (emulator/volcano/controller.py, upstream #5885), so a member whose
save the grace period cuts short (SIGKILL, exit 137: the ``torn`` fault) would end the vcjob by
the user's own rule, which the webhook keeps (docs/webhook.md)."""


PREEMPTOR_SECONDS = 12
"""How long the Volcano preemptor's pods hold their GPUs. The emulated Volcano, like upstream's
allocate without gang victim protection (emulator/volcano/victims.py), places the preemptor's pods
one by one: had its first pods finished within the seconds a torn victim holds its GPU (the
grace period), the last one would take their GPUs and the soak's workload would not be evicted
whole (seen: one vcjob pod never evicted)."""


def vcjob(
    name: str, *, queue: str, priority: str, control: Path, grace: int, tasks: tuple[str, ...]
) -> Obj:
    """A vcjob of ``tasks`` x 2 one-GPU pods of the member trainer (``high``: pods that sleep
    :data:`PREEMPTOR_SECONDS` and complete).
    No CPU or memory requests: Volcano's capacity plugin reclaims only for a queue that stays
    within its ``deserved`` in every resource it asks for (emulator/volcano/victims.py)."""
    container = copy.deepcopy(
        trainer_job(name, priority=priority, members=1, control=control, grace=grace)["spec"][
            "template"
        ]["spec"]
    )
    for c in container["containers"]:  # GPUs only, as the Queues' capability and deserved name
        c["resources"] = {"limits": {keys.GPU_RESOURCE: "1"}}
        if priority == "high":
            c["command"] = ["python", "-c", f"import time; time.sleep({PREEMPTOR_SECONDS})"]
    template = {"metadata": {"labels": {"app": name}}, "spec": container}
    return volcano_objects.job(
        name,
        "default",
        queue=queue,
        tasks=[volcano_objects.task(t, copy.deepcopy(template), replicas=2) for t in tasks],
        priority=priority,
        policies=VOLCANO_POLICIES,
        min_available=2 * len(tasks),
    )


def workload(shape: Shape, *, control: Path, grace: int) -> list[tuple[Any, Obj]]:
    """The objects to create for the soak's workload, with their resources."""
    if shape is JOBSET:
        return [
            (resources.JOBS, jobset_child(rj, control=control, grace=grace)) for rj in REPLICATED
        ]
    if shape is VCJOB:
        body = vcjob(
            NAME, queue="research", priority="low", control=control, grace=grace, tasks=TASKS
        )
        return [(resources.VOLCANO_JOBS, body)]
    return [
        (
            resources.JOBS,
            trainer_job(NAME, priority="low", members=shape.members, control=control, grace=grace),
        )
    ]


def preemptor(shape: Shape, name: str, *, control: Path, grace: int) -> tuple[Any, Obj]:
    """What evicts the whole workload: a higher-priority Job in the ClusterQueue (Kueue) or a
    higher-priority vcjob in the Queue ``prod`` (Volcano reclaims the GPUs)."""
    if shape is VCJOB:
        body = vcjob(name, queue="prod", priority="high", control=control, grace=grace, tasks=TASKS)
        return resources.VOLCANO_JOBS, body
    return resources.JOBS, trainer_job(
        name, priority="high", members=shape.members, control=control, grace=grace
    )


def probe(shape: Shape, *, control: Path, grace: int) -> tuple[Any, Obj]:
    """A dry-run object the webhook rewrites once its caches see the opted-in queue."""
    if shape is VCJOB:
        body = vcjob(
            "probe", queue="research", priority="low", control=control, grace=grace, tasks=TASKS[:1]
        )
        return resources.VOLCANO_JOBS, body
    return resources.JOBS, trainer_job(
        "probe", priority="low", members=1, control=control, grace=grace
    )


def plumbed(shape: Shape, dry: Obj) -> bool:
    if shape is VCJOB:  # the webhook removed PodEvicted -> RestartJob (kontinue/vcjob_policies)
        return not dry["spec"].get("policies")
    return bool(dry["spec"].get("podReplacementPolicy") == "Failed")
