"""The emulated GPU cluster with Kontinue installed, over HTTPS, and the real console script.

``kubectl-kontinue`` runs as a subprocess (the script pip installed next to this interpreter)
with a kubeconfig file, exactly as a user runs it; the API emulator, the real webhook and the
real bridge run in this test's event loop, so the subprocess is awaited with asyncio (a
blocking ``subprocess.run`` would stop the server it talks to).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from emulator import gpus, nodes
from emulator.demo import observe, scenario, stack, timeline
from kontinue import keys
from kontinue.kube import resources
from tests import waiting

Obj = dict[str, Any]
SCRIPT = Path(sys.executable).with_name("kubectl-kontinue")
NS = scenario.NAMESPACE
OPTIONS = scenario.Options(rate=20.0, checkpoint_seconds=0.3, grace_seconds=5)


@dataclasses.dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


@dataclasses.dataclass
class Kube:
    """A running stack plus a kubeconfig file for it."""

    system: stack.Stack
    kubeconfig: Path

    @property
    def admin(self) -> Any:
        return self.system.admin

    async def kk(self, *args: str, timeout: float = 150.0) -> Result:  # noqa: ASYNC109
        """Run ``kubectl-kontinue ARGS`` with this cluster's kubeconfig."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        proc = await asyncio.create_subprocess_exec(
            str(SCRIPT),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return Result(proc.returncode, out.decode(), err.decode())

    async def job(
        self,
        name: str,
        *,
        gpus: int = 1,
        steps: int = 10**9,
        role: timeline.Role = timeline.Role.SCAVENGER,
        env: dict[str, str] | None = None,
        opt_out: bool = False,
    ) -> Obj:
        """The demo's trainer Job, env overridden; ``opt_out``: its pods are not checkpointed
        (``role`` PRIORITY: the higher PriorityClass, opted out too)."""
        job = scenario.trainer_job(name, role=role, gpus=gpus, steps=steps, options=OPTIONS)
        if opt_out:
            template = job["spec"]["template"]["metadata"]
            template.setdefault("annotations", {})[keys.CHECKPOINT_OPT_OUT_ANNOTATION] = "false"
        for var in job["spec"]["template"]["spec"]["containers"][0]["env"]:
            var["value"] = (env or {}).get(var["name"], var["value"])
        created: Obj = await self.admin.create(resources.JOBS, job)
        return created

    async def running_pods(self, job: str, count: int = 1, *, within: float = 120) -> list[Obj]:
        """Wait until ``job`` has ``count`` Running pods (its container started) and return them."""

        async def check() -> list[Obj] | None:
            pods = await self.pods(job)
            live = [
                p
                for p in pods
                if (p.get("status") or {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
            ]
            return live if len(live) >= count else None

        pods: list[Obj] = await eventually(
            check, within=within, what=f"{count} running pod(s) of {job}"
        )
        return pods

    def log(self, pod: Obj) -> str:
        """The trainer's output so far (what the kubelet's runtime wrote for its container)."""
        container = self.system.cluster.container(pod, observe.CONTAINER)
        if container is None or not container.spec.log_path.exists():
            return ""
        return container.spec.log_path.read_text(errors="replace")

    def said(self, pod: Obj, word: str) -> list[int]:
        """The steps of every ``WORD step=N`` line the trainer printed (SAVED, RESTORED, ...)."""
        return [int(m) for m in re.findall(rf"^{word} step=(\d+)", self.log(pod), re.M)]

    async def restored(self, pod: Obj, *, within: float = 30) -> list[int]:
        """The step(s) the trainer in ``pod`` says it restored (waits for the line)."""

        async def poll() -> list[int]:
            return self.said(pod, "RESTORED")

        steps: list[int] = await eventually(
            poll, within=within, what=f"{pod['metadata']['name']} RESTORED"
        )
        return steps

    async def training(self, pod: Obj, *, within: float = 30) -> None:
        """Wait until the trainer in ``pod`` reports progress (its SIGTERM handler is set)."""

        def check() -> bool:
            return bool(self.said(pod, "PROGRESS"))

        async def poll() -> bool:
            return check()

        await eventually(poll, within=within, what=f"{pod['metadata']['name']} training")

    async def pods(self, job: str) -> list[Obj]:
        listed = await self.admin.list(
            resources.PODS, namespace=NS, label_selector={keys.JOB_NAME_LABEL: job}
        )
        return sorted(listed["items"], key=lambda p: p["metadata"]["creationTimestamp"])


eventually = functools.partial(waiting.eventually, every=0.1)
"""tests/waiting.py ``eventually``, polling the emulated cluster every 0.1 s."""


def node_specs(count: int = 2, gpus_per_node: int = 4) -> list[nodes.NodeSpec]:
    return [
        nodes.NodeSpec(f"gpu-{chr(ord('a') + i)}", gpu=gpus.GpuProfile(count=gpus_per_node))
        for i in range(count)
    ]


@contextlib.asynccontextmanager
async def kube(
    workdir: Path, *, node_count: int = 2, gpus_per_node: int = 4, pod_failure_backoff: float = 0.0
) -> AsyncIterator[Kube]:
    """The demo's stack (Kueue, opted-in ClusterQueue ``gpu-cq``, policy ``demo``) over HTTPS.

    ``pod_failure_backoff``: the Job controller's wait before it replaces a failed pod
    (emulator/jobs/backoff.py); 0 here, the real 10 s (``backoff.DEFAULT_SECONDS``) when a
    test is about it.
    """
    async with stack.running(
        workdir=workdir / "cluster",
        node_specs=node_specs(node_count, gpus_per_node),
        with_kontinue=True,
        policy=scenario.policy(OPTIONS),
        tls=True,
        pod_failure_backoff=pod_failure_backoff,
    ) as system:
        admin = system.admin
        for obj in scenario.priority_classes():
            await admin.create(resources.PRIORITY_CLASSES, obj)
        for resource, obj in scenario.queues(node_count * gpus_per_node):
            await admin.create(resource, obj)
        await scenario.opt_in(system, OPTIONS)
        config = system.cluster.api.kubeconfig("kubectl-user")
        path = workdir / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        yield Kube(system, path)
