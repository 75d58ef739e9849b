"""``python -m emulator.demo --scenario defrag``: a 4-GPU job that fits nowhere, three ways.

Two nodes with four GPUs each. Four one-GPU *scavenger* Jobs run spread 2 + 2 (the scheduler
scores "most free GPUs first", emulator/scheduling.py), so when a 4-GPU *urgent* Job arrives
4 GPUs are free in total but no node has four: it is pending though the cluster could run it.
The same arrival is run three times:

- **wait** (no Kontinue): the urgent job's PriorityClass has ``preemptionPolicy: Never``; it
  waits until two scavengers on one node finish;
- **preempt** (no Kontinue): the same PriorityClass may preempt (the default); kube-scheduler
  evicts two scavengers on one node, which restart from step 0 elsewhere;
- **defrag** (Kontinue installed, ``preemptionPolicy: Never`` again): at arrival the operator
  runs ``kubectl kontinue defrag --for job/urgent --wait`` — the real console script, as a
  subprocess with a kubeconfig, over HTTPS — which moves two scavengers to the other node
  (checkpoint, evict through the Eviction API, restore there) so the urgent job gets a node.

Measured per run, from the cluster and the trainers' own output (``reference_workload/
trainer.py``: ``PROGRESS step=N``, ``RESTORED step=N``): how long the urgent job waited (Job
created -> its pod Running), scavenger steps thrown away (an incarnation's last step minus the
step its successor started from), evictions, restores, moves, and ``Job.status.failed``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from emulator import gpus, nodes
from emulator.demo import observe, scenario, stack, timeline
from emulator.jobs import backoff
from kontinue import keys
from kontinue.kube import resources

Obj = dict[str, Any]
URGENT = "urgent"
MODES = ("wait", "preempt", "defrag")


@dataclasses.dataclass(frozen=True)
class Options:
    rate: float = 5.0
    """Trainer steps per second."""
    scavenger_seconds: float = 45.0
    """How long a scavenger trains when left alone (its steps = rate x this)."""
    urgent_seconds: float = 10.0
    arrive_after: float = 6.0
    """Seconds after the scavengers start training that the urgent job arrives."""
    checkpoint_seconds: float = 0.5
    grace_seconds: int = 6
    timeout: float = 180.0


@dataclasses.dataclass
class Result:
    mode: str
    urgent_wait: float
    lost_steps: int
    evictions: int
    restores: int
    moves: int
    failed: int
    """``Job.status.failed`` summed over the scavenger Jobs."""
    cli_output: str = ""


def _options(options: Options) -> scenario.Options:
    return scenario.Options(
        rate=options.rate,
        checkpoint_seconds=options.checkpoint_seconds,
        grace_seconds=options.grace_seconds,
        scavengers=4,
    )


def priority_classes(*, urgent_preempts: bool) -> list[Obj]:
    classes = scenario.priority_classes()
    for pc in classes:
        if pc["metadata"]["name"] == timeline.Role.PRIORITY.value and not urgent_preempts:
            pc["preemptionPolicy"] = "Never"
    return classes


def _node_specs() -> list[nodes.NodeSpec]:
    return [nodes.NodeSpec(f"gpu-{x}", gpu=gpus.GpuProfile(count=4)) for x in "ab"]


async def _running(admin: Any, job: str) -> Obj | None:
    listed = await admin.list(
        resources.PODS, namespace=scenario.NAMESPACE, label_selector={keys.JOB_NAME_LABEL: job}
    )
    for pod in listed["items"]:
        if (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
            "deletionTimestamp"
        ):
            return dict(pod)
    return None


def _steps(log: str, word: str) -> list[int]:
    return [int(m) for m in re.findall(rf"^{word} step=(\d+)", log, re.M)]


async def _kubectl_kontinue(kubeconfig: Path, *args: str, timeout: float) -> tuple[int, str]:  # noqa: ASYNC109
    """Run the plugin as a user would (``python -m kubectl_kontinue`` = ``kubectl kontinue``)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kubectl_kontinue",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def run(
    *, mode: str, options: Options, workdir: Path, say: Callable[[str], None] | None = None
) -> Result:
    """One run of the arrival in ``mode`` (one of :data:`MODES`)."""
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r}; known {MODES}")
    with_kontinue = mode == "defrag"
    demo = _options(options)
    _prepare(workdir)
    async with stack.running(
        workdir=workdir,
        node_specs=_node_specs(),
        with_kontinue=with_kontinue,
        policy=scenario.policy(demo) if with_kontinue else None,
        tls=with_kontinue,
        pod_failure_backoff=backoff.DEFAULT_SECONDS,
    ) as system:
        admin = system.admin
        for obj in priority_classes(urgent_preempts=mode == "preempt"):
            await admin.create(resources.PRIORITY_CLASSES, obj)
        for resource, obj in scenario.queues(8):
            await admin.create(resource, obj)
        kubeconfig = workdir / "kubeconfig"
        if with_kontinue:
            await scenario.opt_in(system, demo)
            kubeconfig.write_text(yaml.safe_dump(system.cluster.api.kubeconfig("operator")))
        seen: dict[str, Obj] = {}
        names = [f"scavenger-{i}" for i in range(4)]
        for name in names:
            job = scenario.trainer_job(
                name,
                role=timeline.Role.SCAVENGER,
                gpus=1,
                steps=int(options.rate * options.scavenger_seconds),
                options=demo,
            )
            await admin.create(resources.JOBS, job)
        deadline = time.monotonic() + options.timeout
        started: list[Obj] = []
        while len(started) < len(names):
            started = [p for n in names if (p := await _running(admin, n)) is not None]
            if time.monotonic() > deadline:
                raise TimeoutError("scavengers did not start")
            await asyncio.sleep(0.2)
        await asyncio.sleep(options.arrive_after)
        urgent = scenario.trainer_job(
            URGENT,
            role=timeline.Role.PRIORITY,
            gpus=4,
            steps=int(options.rate * options.urgent_seconds),
            options=demo,
        )
        await admin.create(resources.JOBS, urgent)
        arrived = time.monotonic()
        if say is not None:
            say(f"{mode}: urgent job (4 GPUs) arrived; scavengers spread 2 + 2")
        cli_output = ""
        defrag: asyncio.Task[tuple[int, str]] | None = None
        urgent_running: Obj | None = None
        while urgent_running is None:
            for pod in (await admin.list(resources.PODS, namespace=scenario.NAMESPACE))["items"]:
                seen[pod["metadata"]["uid"]] = pod
            if with_kontinue and defrag is None and await _pending_unschedulable(admin):
                defrag = asyncio.create_task(
                    _kubectl_kontinue(
                        kubeconfig,
                        "defrag",
                        "--for",
                        f"job/{URGENT}",
                        "--wait",
                        timeout=options.timeout,
                    )
                )
            urgent_running = await _running(admin, URGENT)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{mode}: the urgent job never ran")
            await asyncio.sleep(0.1)
        waited = time.monotonic() - arrived
        if defrag is not None:
            code, cli_output = await defrag
            if code != 0:
                raise RuntimeError(f"kubectl kontinue defrag failed:\n{cli_output}")
        # every scavenger back at work or done (a replaced pod's successor comes after the Job
        # controller's pod-failure backoff, 10 s), then take the record
        while not all([await _back(admin, n) for n in names]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{mode}: evicted scavengers did not come back")
            for pod in (await admin.list(resources.PODS, namespace=scenario.NAMESPACE))["items"]:
                seen[pod["metadata"]["uid"]] = pod
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)
        for pod in (await admin.list(resources.PODS, namespace=scenario.NAMESPACE))["items"]:
            seen[pod["metadata"]["uid"]] = pod
        lost, evictions, restores = _work(system, seen, names)
        moves = 0
        if with_kontinue:
            listed = await admin.list(resources.CHECKPOINTS, namespace=scenario.NAMESPACE)
            moves = sum(1 for cp in listed["items"] if cp["spec"]["trigger"]["source"] == "Manual")
        failed = 0
        for name in names:
            job = await admin.get(resources.JOBS, name, namespace=scenario.NAMESPACE)
            failed += int((job.get("status") or {}).get("failed") or 0)
    return Result(mode, waited, lost, evictions, restores, moves, failed, cli_output)


async def _back(admin: Any, job: str) -> bool:
    """The scavenger Job runs a pod again, or has finished."""
    got = await admin.get(resources.JOBS, job, namespace=scenario.NAMESPACE)
    if (got.get("status") or {}).get("succeeded"):
        return True
    return await _running(admin, job) is not None


def _prepare(workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)


async def _pending_unschedulable(admin: Any) -> bool:
    listed = await admin.list(
        resources.PODS,
        namespace=scenario.NAMESPACE,
        label_selector={keys.JOB_NAME_LABEL: URGENT},
    )
    for pod in listed["items"]:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return True
    return False


def _work(system: stack.Stack, seen: dict[str, Obj], names: list[str]) -> tuple[int, int, int]:
    """(steps thrown away, evictions, restores) over the scavengers' incarnations."""
    lost = evictions = restores = 0
    for name in names:
        pods = sorted(
            (
                p
                for p in seen.values()
                if p["metadata"].get("labels", {}).get(keys.JOB_NAME_LABEL) == name
            ),
            key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]),
        )
        logs = []
        for pod in pods:
            container = system.cluster.container(pod, observe.CONTAINER)
            path = container.spec.log_path if container is not None else None
            logs.append(path.read_text(errors="replace") if path and path.exists() else "")
        for before, after in zip(logs, logs[1:], strict=False):
            reached = max(_steps(before, "PROGRESS") or [0])
            start = (_steps(after, "RESTORED") or [0])[0]
            lost += max(0, reached - start)
            evictions += 1
        restores += sum(1 for log in logs if _steps(log, "RESTORED"))
    return lost, evictions, restores


def table(results: list[Result]) -> str:
    rows: list[tuple[str, Callable[[Result], str]]] = [
        ("urgent job waited (created -> running)", lambda r: f"{r.urgent_wait:.1f} s"),
        ("scavenger steps thrown away", lambda r: str(r.lost_steps)),
        ("scavenger evictions", lambda r: str(r.evictions)),
        ("restores", lambda r: str(r.restores)),
        ("moves (Checkpoints with source Manual)", lambda r: str(r.moves)),
        ("scavenger Job.status.failed", lambda r: str(r.failed)),
    ]
    titles = {
        "wait": "wait (no Kontinue)",
        "preempt": "preempt (no Kontinue)",
        "defrag": "defrag (Kontinue)",
    }
    head = f"{'':40} | " + " | ".join(f"{titles[r.mode]:>22}" for r in results)
    lines = [head, "-" * len(head)]
    for label, cell in rows:
        lines.append(f"{label:40} | " + " | ".join(f"{cell(r):>22}" for r in results))
    return "\n".join(lines)
