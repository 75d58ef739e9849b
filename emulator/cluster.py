"""An emulated GPU cluster: the API emulator plus nodes, scheduler, Job controller and kubelets.

    async with cluster.Cluster(
        nodes=[nodes.NodeSpec("gpu-a"), nodes.NodeSpec("gpu-b", gpu=gpus.A100)], workdir=tmp_path
    ) as c:
        admin = c.client()
        await admin.create(resources.JOBS, job)
        done = await c.wait_for(resources.JOBS, "train", "default", cluster.job_finished)

Each component is what it emulates and acts under that component's identity through the
emulator's normal pipeline (admission webhooks, validation, watches): the kubelet of each node as
``system:node:<name>`` (:mod:`emulator.kubelet.agent`, real subprocesses), the scheduler as
``system:kube-scheduler`` (:mod:`emulator.scheduler`), the Job controller as
``system:serviceaccount:kube-system:job-controller`` (:mod:`emulator.jobs.controller`). Nothing
here knows about Kontinue: the cluster behaves the same whether or not Kontinue's webhook and
bridge are attached (the baseline later measurements need).

Files: ``workdir/nodes/<node>`` is each node's private disk (pod sandboxes, emptyDir, logs);
``workdir/shared`` is the one directory every node mounts for ``hostPath`` and PVC volumes (the
ReadWriteMany checkpoint storage). ``components`` picks what runs (e.g. leave out
``"scheduler"`` when a Volcano emulation binds pods itself).

Timings are the fast tier's by default (``timing=FAST`` for the kubelets; the Job controller's
pod-failure backoff ``pod_failure_backoff=0``); pass ``worker.Timing()`` and
``emulator.jobs.backoff.DEFAULT_SECONDS`` (10 s, as a real v1.36 controller) for real ones — the
demos pass the backoff (emulator/demo/scenario.py, defrag.py, cli_session.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from emulator import nodes as nodes_module
from emulator import scheduler as scheduler_module
from emulator.apiserver import server
from emulator.jobs import controller as job_controller
from emulator.kubelet import agent, launch, runtime, worker
from kontinue.kube import errors, resources
from kontinue.kube.resources import Resource

Object = dict[str, Any]
Predicate = Callable[[Object | None], bool]

ALL_COMPONENTS = frozenset({"scheduler", "job-controller", "kubelet"})
FAST = worker.Timing(relist_seconds=0.2, sandbox_seconds=0.05, terminal_delay_seconds=0.1)


def job_condition(kind: str) -> Predicate:
    """True once the Job has condition ``kind`` with status True."""

    def check(job: Object | None) -> bool:
        conditions = ((job or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)

    return check


def job_finished(job: Object | None) -> bool:
    return job_condition("Complete")(job) or job_condition("Failed")(job)


def gone(obj: Object | None) -> bool:
    return obj is None


def pod_phase(*phases: str) -> Predicate:
    def check(pod: Object | None) -> bool:
        return pod is not None and (pod.get("status") or {}).get("phase") in phases

    return check


class Cluster:
    """Start with ``async with``; ``api`` is the :class:`emulator.apiserver.server.ApiServer`."""

    def __init__(
        self,
        *,
        nodes: Sequence[nodes_module.NodeSpec],
        workdir: Path,
        timing: worker.Timing = FAST,
        components: Collection[str] = ALL_COMPONENTS,
        commands: runtime.Commands | None = None,
        api: server.ApiServer | None = None,
        tls: bool = False,
        queue_system: str | None = None,
        pod_failure_backoff: float = 0.0,
    ) -> None:
        unknown = set(components) - ALL_COMPONENTS
        if unknown:
            raise ValueError(
                f"components: unknown {sorted(unknown)}; known {sorted(ALL_COMPONENTS)}"
            )
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"nodes: duplicate names in {names}")
        self.specs = list(nodes)
        # Absolute: container processes run in their own working directory, so a relative
        # workdir would put "shared" volumes inside each container instead (make demo uses out/).
        self.workdir = Path(workdir).resolve()
        self.timing = timing
        self.components = frozenset(components)
        self.commands = commands
        self._own_api = api is None
        self.api = api or server.ApiServer(tls=tls)
        self.scheduler: scheduler_module.Scheduler | None = None
        self.job_controller: job_controller.JobController | None = None
        self.kubelets: dict[str, agent.Agent] = {}
        # --- queue system hook: emulated Kueue or Volcano (emulator/kueue, emulator/volcano) ---
        if queue_system not in (None, "kueue", "volcano"):
            raise ValueError(f"queue_system: {queue_system!r}; known: None, 'kueue', 'volcano'")
        self.queue_system = queue_system
        self.queues: Any = None
        self.pod_failure_backoff = pod_failure_backoff

    @property
    def shared_root(self) -> Path:
        return self.workdir / "shared"

    def node_ip(self, index: int) -> str:
        return f"10.0.{index // 250}.{index % 250 + 2}"

    async def __aenter__(self) -> Cluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        if self._own_api:
            await self.api.start()
        try:
            for index, spec in enumerate(self.specs):
                await nodes_module.register(self.api, spec, ip=self.node_ip(index))
            if "kubelet" in self.components:
                for index, spec in enumerate(self.specs):
                    node = launch.Node(
                        spec.name,
                        self.node_ip(index),
                        self.workdir / "nodes" / spec.name,
                        self.shared_root,
                    )
                    kubelet = agent.Agent(
                        self.api,
                        node=node,
                        runtime_=runtime.Runtime(commands=self.commands),
                        timing=self.timing,
                    )
                    self.kubelets[spec.name] = kubelet
                    await kubelet.start()
            if "job-controller" in self.components:
                self.job_controller = job_controller.JobController(
                    self.api, pod_failure_backoff=self.pod_failure_backoff
                )
                await self.job_controller.start()
            if "scheduler" in self.components:
                self.scheduler = scheduler_module.Scheduler(self.api)
                await self.scheduler.start()
            if self.queue_system == "kueue":
                from emulator.kueue import system as kueue_system

                self.queues = await kueue_system.start(self.api)
            elif self.queue_system == "volcano":
                from emulator.volcano import system as volcano_system

                self.queues = await volcano_system.start(self.api)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if self.queues is not None:
            await self.queues.stop()
            self.queues = None
        if self.scheduler is not None:
            await self.scheduler.stop()
            self.scheduler = None
        if self.job_controller is not None:
            await self.job_controller.stop()
            self.job_controller = None
        kubelets, self.kubelets = self.kubelets, {}
        await asyncio.gather(*(k.stop() for k in kubelets.values()))
        if self._own_api:
            await self.api.stop()

    # --- helpers for tests and the demo --------------------------------------------------------

    def client(
        self, user: str = "admin", *, groups: tuple[str, ...] | None = None
    ) -> server.Client:
        return self.api.client(user, groups=groups)

    async def wait_for(
        self,
        resource: Resource,
        name: str,
        namespace: str | None,
        predicate: Predicate,
        *,
        timeout: float = 30.0,  # noqa: ASYNC109 -- a poll bound, not a cancellation scope
    ) -> Object | None:
        """Poll (every 20 ms) until ``predicate(object or None)``; ``TimeoutError`` names what
        it waited for and shows the last state."""
        client = self.api.client("admin")
        deadline = time.monotonic() + timeout
        last: Object | None = None
        while True:
            try:
                last = await client.get(resource, name, namespace=namespace)
            except errors.NotFound:
                last = None
            if predicate(last):
                return last
            if time.monotonic() > deadline:
                state = (last or {}).get("status")
                raise TimeoutError(
                    f"{resource.plural} {namespace}/{name}: condition not met in {timeout}s; "
                    f"last status: {state}"
                )
            await asyncio.sleep(0.02)

    async def pods(
        self, namespace: str = "default", *, labels: Mapping[str, str] | str | None = None
    ) -> list[Object]:
        """The pods in ``namespace`` (optionally by label selector), oldest first."""
        listed = await self.api.client("admin").list(
            resources.PODS, namespace=namespace, label_selector=labels
        )
        return sorted(
            listed["items"],
            key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]),
        )

    def container(self, pod: Object, name: str) -> runtime.Container | None:
        """The live (or finished) container of ``pod`` on whichever node ran it."""
        uid = pod["metadata"]["uid"]
        for kubelet in self.kubelets.values():
            for started in kubelet.runtime.containers:
                if started.spec.name == name and f"/pods/{uid}/" in str(started.spec.log_path):
                    return started
        return None
