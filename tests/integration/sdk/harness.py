"""Real training scripts as Jobs on the emulated cluster, preempted by real Kueue-style evictions.

The whole stack of emulator/demo/stack.py: the emulated apiserver, scheduler, Job controller and
kubelets (running each container as a local process of this interpreter), the emulated Kueue
preempting by priority, and — opted in — Kontinue's real webhook (over HTTPS) and real bridge.
A preemption is a high-priority Job that needs the victim's GPUs: Kueue evicts the victim's
Workload and suspends its Job, the Job controller deletes its pods with their grace period, the
kubelet sends SIGTERM, and when the preemptor is done the victim is readmitted.

Every container a kubelet started is kept (emulator/kubelet/runtime.py), so the logs of all
incarnations of a run can be stitched together after their pods are gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from emulator import cluster, gpus, nodes
from emulator.demo import stack
from emulator.kubelet import runtime, state
from kontinue import keys
from kontinue.kube import api, resources
from tests.integration.cluster.test_kueue import Env
from tests.waiting import eventually

Obj = dict[str, Any]
NS = "default"
ROOT = Path(__file__).resolve().parents[3]
STEP = re.compile(r"^STEP (\d+) (.*)$", re.MULTILINE)
DONE = re.compile(r"^DONE (.*)$", re.MULTILINE)
# One intra-op thread in every run, the reference and each incarnation: PyTorch's CPU kernels
# (and MKL's GEMM) split a reduction by thread count, so two processes that start with different
# thread counts round the last bit of a loss differently (seen once in CI: 1 ULP on 6 of 32 steps
# of the Trainer's reference run). One thread also fits the one CPU each Job requests.
PINNED_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def policy(grace: int, *, consistency: str | None = None) -> Obj:
    spec: Obj = {
        "storage": {"hostPath": {"path": "/var/kontinue"}, "mountPath": "/ckpt"},
        "minGracePeriodSeconds": grace,
    }
    if consistency is not None:
        spec["restore"] = {"consistency": consistency}
    return {
        "apiVersion": keys.API_VERSION,
        "kind": "CheckpointPolicy",
        "metadata": {"name": "sdk"},
        "spec": spec,
    }


def job(
    name: str,
    *,
    module: str,
    env: Mapping[str, str],
    priority: str = "low",
    gpus: int = 1,
    pods: int = 1,
    container: str = "train",
    grace: int = 30,
) -> Obj:
    """A Job running ``python -m module``; ``pods > 1``: Indexed, that many in parallel."""
    spec: Obj = {
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "priorityClassName": priority,
                "terminationGracePeriodSeconds": grace,
                "containers": [
                    {
                        "name": container,
                        "image": "kontinue/sdk-example:dev",
                        "command": ["python", "-m", module],
                        "env": [{"name": k, "value": v} for k, v in {**env, **PINNED_ENV}.items()],
                        "resources": {
                            "requests": {"cpu": "1", "memory": "1Gi"},
                            "limits": {keys.GPU_RESOURCE: str(gpus)},
                        },
                    }
                ],
            }
        },
    }
    if pods > 1:
        spec.update(completionMode="Indexed", completions=pods, parallelism=pods)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "team"},
        },
        "spec": spec,
    }


def preemptor(name: str, *, pods: int) -> Obj:
    """A high-priority Job of ``pods`` pods holding one GPU each for a moment."""
    high = job(name, module="", env={}, priority="high", pods=pods, container="preemptor")
    container = high["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["sleep", "0.5"]
    return high


@dataclasses.dataclass(frozen=True)
class Incarnation:
    """One started container of a run: its log lines and how it ended."""

    log: str
    exit_code: int | None
    message: str | None = None
    rank: int = 0

    @property
    def steps(self) -> list[tuple[int, str]]:
        return [(int(n), rest) for n, rest in STEP.findall(self.log)]

    @property
    def done(self) -> str | None:
        found = DONE.findall(self.log)
        return found[-1] if found else None


class Cluster:
    def __init__(self, st: stack.Stack) -> None:
        self.stack = st
        self.cluster = st.cluster
        self.admin = st.admin
        self.preempted: set[str] = set()

    def containers(self, name: str) -> list[runtime.Container]:
        return [
            started
            for kubelet in self.cluster.kubelets.values()
            for started in kubelet.runtime.containers
            if started.spec.name == name
        ]

    def incarnations(self, name: str = "train") -> list[Incarnation]:
        found = []
        for started in self.containers(name):
            log = started.spec.log_path.read_text() if started.spec.log_path.exists() else ""
            ended = started.record().state
            code = ended.exit_code if isinstance(ended, state.Terminated) else None
            message = ended.message if isinstance(ended, state.Terminated) else None
            rank = int(started.spec.env.get("JOB_COMPLETION_INDEX", "0"))
            found.append(Incarnation(log, code, message, rank))
        return found

    def last_step(self, name: str = "train") -> int:
        steps = [n for inc in self.incarnations(name) for n, _ in inc.steps]
        return max(steps, default=0)

    async def _told_to_stop(self, held: Sequence[runtime.Container]) -> bool:
        pods = {p["metadata"]["uid"]: p for p in await self.cluster.pods(NS)}
        for container in held:
            uid = str(container.spec.log_path).split("/pods/", 1)[1].split("/", 1)[0]
            pod = pods.get(uid)
            if pod is not None and not pod["metadata"].get("deletionTimestamp"):
                return False
        return True

    def _live(self) -> list[runtime.Container]:
        """Running trainers not yet preempted (a victim keeps running while it saves)."""
        return [
            c
            for c in self.containers("train")
            if not c.exited.is_set()
            and c.spec.log_path.exists()
            and c.container_id not in self.preempted
        ]

    async def preempt_after(self, steps: int, name: str, *, ranks: int = 1) -> None:
        """Once every live rank has made ``steps`` steps, preempt them all (see :meth:`preempt`)."""

        victims: list[runtime.Container] = []

        async def reached() -> bool:
            victims[:] = self._live()
            logged = [
                [int(n) for n, _ in STEP.findall(c.spec.log_path.read_text())] for c in victims
            ]
            return len(victims) >= ranks and all(s and s[-1] >= s[0] + steps for s in logged)

        await eventually(
            reached, within=180, what=f"{ranks} trainer(s) {steps} steps in", every=0.05
        )
        self.preempted.update(c.container_id for c in victims)
        await self.preempt(name, pods=ranks, held=victims)

    async def preempt(
        self, name: str, *, pods: int, held: Sequence[runtime.Container] = ()
    ) -> None:
        """A high-priority Job takes the GPUs, runs, completes; the victim is readmitted.

        ``held``: trainers stopped (SIGSTOP) where they are until their pods are deleted. On a
        loaded machine Kueue's eviction could land after the few steps a trainer had left, and
        a Job that completed first was never preempted. A stopped process computes nothing, so
        its steps stay those of the uninterrupted run; the SIGTERM that comes with the deletion
        waits, pending, for the SIGCONT."""
        for container in held:
            _signal(container, signal.SIGSTOP)
        try:
            await self.admin.create(resources.JOBS, preemptor(name, pods=pods))
            await eventually(
                lambda: self._told_to_stop(held),
                within=120,
                what=f"the pods of {len(held)} held trainer(s) deleted",
            )
        finally:
            for container in held:
                _signal(container, signal.SIGCONT)
        await self.cluster.wait_for(
            resources.JOBS, name, NS, cluster.job_condition("Complete"), timeout=120
        )

    async def wait_complete(self, name: str, *, within: float = 240) -> None:
        await self.cluster.wait_for(
            resources.JOBS, name, NS, cluster.job_condition("Complete"), timeout=within
        )

    async def checkpoints(self) -> list[Obj]:
        listed = await self.admin.list(resources.CHECKPOINTS, namespace=NS)
        return list(listed["items"])


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    *,
    opted_in: bool,
    quota: int = 1,
    grace: int = 30,
    consistency: str | None = None,
) -> AsyncIterator[Cluster]:
    """Two nodes of one GPU each; the ClusterQueue's quota is ``quota`` GPUs."""
    specs = [nodes.NodeSpec(name, gpu=gpus.GpuProfile(count=1)) for name in ("a", "b")]
    async with stack.running(
        workdir=tmp_path,
        node_specs=specs,
        with_kontinue=opted_in,
        policy=policy(grace, consistency=consistency) if opted_in else None,
    ) as st:
        await Env(st.cluster.api).setup_queues(gpus=quota)
        if opted_in:
            labels = {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "sdk"}
            await st.admin.patch(
                resources.CLUSTER_QUEUES,
                "gpu-cq",
                {"metadata": {"labels": labels}},
                content_type=api.MERGE_PATCH,
            )
            await stack.wait_plumbing(st, probe_job=job("probe", module="x", env={}))
        yield Cluster(st)


def reference_run(
    module: str, env: Mapping[str, str], *, ranks: int = 1, timeout: float = 240
) -> list[Incarnation]:
    """The same script, uninterrupted, as plain local processes (no Kontinue variables)."""
    procs = []
    for rank in range(ranks):
        full = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env, **PINNED_ENV}
        if ranks > 1:
            full["JOB_COMPLETION_INDEX"] = str(rank)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", module],
                env=full,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    runs: list[Incarnation] = []
    for proc in procs:
        out, _ = proc.communicate(timeout=timeout)
        runs.append(Incarnation(out, proc.returncode, rank=len(runs)))
    return runs


def _signal(container: runtime.Container, sig: signal.Signals) -> None:
    """``sig`` to the container's process group (each container is a session of its own)."""
    if container.pid is not None and not container.exited.is_set():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(container.pid, sig)


def preemption_points(seed: int, count: int, *, low: int, high: int) -> list[int]:
    """How many steps into an incarnation each preemption comes: seeded, so a failure repeats."""
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(count)]


def stitched(incarnations: Sequence[Incarnation]) -> list[tuple[int, str]]:
    """Every STEP line of every incarnation, in the order the incarnations ran."""
    ordered = sorted(incarnations, key=lambda inc: (inc.steps or [(10**9, "")])[0][0])
    return [step for inc in ordered for step in inc.steps]
