"""One pod's life on the emulated kubelet: start, observe, stop, and the status writes between.

The order of writes is the v1.36.2 kubelet's as recorded in tests/fixtures/kubelet (README there):

1. first sight: everything waiting, sandbox not ready; then the sandbox is up;
2. init containers one at a time: a write right after each start (showing it running, even if it
   already exited), its exit seen at the next PLEG relist; a native sidecar is started and not
   waited for; then all regular containers are started and one write shows them running;
3. natural end (all regular containers exited, restartPolicy Never): the relist write shows them
   terminated while the phase stays Running; sidecars are then stopped (reverse order, full pod
   grace) with the sandbox; after the pod worker finishes, the terminal phase is written;
4. deletion: a write carrying only the new ``observedGeneration``; then regular containers are
   stopped (preStop, SIGTERM, grace, SIGKILL), sidecars after them with the grace left, and one
   write carries every termination and the terminal phase. The caller then deletes the pod
   object with grace 0 (``Outcome.final_delete``), as the kubelet's status manager does.

Timings (relist period, sandbox start, the pause before the terminal write) are parameters so
tests can run fast without changing the sequence. The worker never talks to the API: it hands
each status to ``sink`` and reads pod updates given to :meth:`PodWorker.update`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from emulator.kubelet import launch, runtime, state, status

Sink = Callable[[dict[str, Any]], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class Timing:
    relist_seconds: float = 1.0  # generic PLEG relist period
    sandbox_seconds: float = 0.4  # binding -> PodReadyToStartContainers=True
    terminal_delay_seconds: float = 1.0  # last container stopped -> terminal phase written
    minimum_grace_seconds: int = runtime.MINIMUM_GRACE_SECONDS
    status_retry_seconds: float = 1.0  # a failed status write retried (upstream: every 10 s)


@dataclasses.dataclass(frozen=True)
class Outcome:
    phase: str
    final_delete: bool  # the pod was deleted while running: delete the object with grace 0 now


class PodWorker:
    """Runs one bound pod; construct, then ``await run()``; feed API updates to ``update``."""

    def __init__(
        self,
        pod: Mapping[str, Any],
        *,
        runtime_: runtime.Runtime,
        node: launch.Node,
        sink: Sink,
        timing: Timing | None = None,
        service_env: Mapping[str, str] | None = None,
    ) -> None:
        self.pod: dict[str, Any] = dict(pod)
        self.runtime = runtime_
        self.node = node
        self.sink = sink
        self.timing = timing or Timing()
        self.service_env = dict(service_env or {})
        self.containers: dict[str, runtime.Container] = {}
        self.records: dict[str, state.ContainerRecord] = {}
        self.written: list[dict[str, Any]] = []
        self._deleted = asyncio.Event()
        self._changed = asyncio.Event()
        self._sandbox_ready = False
        self._terminal = False
        self._stopped_all = False
        self._watchers: set[asyncio.Task[None]] = set()
        self._start_time = state.now()
        self._epoch = time.monotonic()
        spec = self.pod.get("spec") or {}
        self._pod_ip = node.ip if spec.get("hostNetwork") else None

    # --- inputs ------------------------------------------------------------------------------

    def update(self, pod: Mapping[str, Any]) -> None:
        """A newer API view of the pod (a deletion, a finalizer change, someone's condition).

        Like the kubelet's status manager, the worker keeps its own last write for what it owns
        and takes from the API only metadata, spec and the conditions it does not own (e.g. a
        scheduler's or Volcano's ``DisruptionTarget``), so a late watch event of an older write
        never rolls its view back.
        """
        ours = self.written[-1] if self.written else None
        self.pod = dict(pod)
        if ours is not None:
            api_conditions = (pod.get("status") or {}).get("conditions") or []
            foreign = [c for c in api_conditions if c["type"] not in status.KUBELET_CONDITIONS]
            owned = [
                c for c in ours.get("conditions") or [] if c["type"] in status.KUBELET_CONDITIONS
            ]
            self.pod["status"] = {**ours, "conditions": foreign + owned}
        if (pod.get("metadata") or {}).get("deletionTimestamp") is not None:
            self._deleted.set()

    @property
    def deleted(self) -> bool:
        return self._deleted.is_set()

    # --- outputs -----------------------------------------------------------------------------

    async def _write(self) -> None:
        view = status.PodView(
            records=dict(self.records),
            sandbox_ready=self._sandbox_ready,
            start_time=self._start_time,
            host_ip=self.node.ip,
            pod_ip=self._pod_ip,
            pod_is_terminal=self._terminal,
            could_have_running_containers=not self._stopped_all,
        )
        new = status.pod_status(self.pod, view, now=state.now())
        if new == self.pod.get("status"):
            return
        self.pod = {**self.pod, "status": new}
        self.written.append(new)
        await self.sink(new)

    # --- helpers -----------------------------------------------------------------------------

    def _spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.pod.get("spec") or {}
        return spec

    def _grace(self) -> int:
        meta = self.pod.get("metadata") or {}
        if meta.get("deletionGracePeriodSeconds") is not None:
            return int(meta["deletionGracePeriodSeconds"])
        return int(self._spec().get("terminationGracePeriodSeconds", 30))

    async def _start(self, container: Mapping[str, Any], *, where: str) -> runtime.Container | None:
        name = container["name"]
        try:
            plan = launch.plan(
                self.pod, container, where=where, node=self.node, service_env=self.service_env
            )
        except launch.ConfigError as error:
            self.records[name] = state.ContainerRecord(
                name=name,
                state=state.Waiting("CreateContainerConfigError", str(error)),
                image=str(container.get("image", "")),
            )
            return None
        started = await self.runtime.start(plan)
        self.containers[name] = started
        record = started.record()
        if isinstance(record.state, state.Terminated) and record.state.reason != "StartError":
            # The kubelet writes the state it saw right after the start: running.
            assert record.state.started_at is not None
            record = dataclasses.replace(record, state=state.Running(record.state.started_at))
        self.records[name] = record
        self._watchers.add(asyncio.create_task(self._notify(started.exited)))
        return started

    async def _notify(self, event: asyncio.Event) -> None:
        await event.wait()
        self._changed.set()

    def _until_relist(self) -> float:
        period = self.timing.relist_seconds
        elapsed = time.monotonic() - self._epoch
        return period - (elapsed % period)

    def _relist(self) -> bool:
        """Copy every container's current state into the records; True if anything changed."""
        changed = False
        for name, container in self.containers.items():
            record = container.record()
            if record != self.records.get(name):
                self.records[name] = record
                changed = True
        return changed

    async def _wait_change_or_delete(self) -> bool:
        """Wait for the next relist that sees a change (False) or for a deletion (True)."""
        while True:
            self._changed.clear()
            if self._relist_pending():
                if await self._pause(self._until_relist()):
                    return True
                if self._relist():
                    return False
                continue
            changed = asyncio.create_task(self._changed.wait())
            deleted = asyncio.create_task(self._deleted.wait())
            try:
                done, _ = await asyncio.wait(
                    {changed, deleted}, return_when=asyncio.FIRST_COMPLETED
                )
            finally:  # also when this worker is cancelled: never leave the waiters behind
                for task in (changed, deleted):
                    task.cancel()
                await asyncio.gather(changed, deleted, return_exceptions=True)
            if deleted in done:
                return True

    def _relist_pending(self) -> bool:
        return any(c.record() != self.records.get(n) for n, c in self.containers.items())

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> Outcome:
        """Drive the pod to its end; returns its phase and whether to delete it with grace 0."""
        try:
            return await self._run()
        finally:
            for container in self.containers.values():
                await container.kill_now()
            for watcher in self._watchers:
                watcher.cancel()
            await asyncio.gather(*self._watchers, return_exceptions=True)

    async def _run(self) -> Outcome:
        await self._write()
        if not await self._pause(self.timing.sandbox_seconds):
            self._sandbox_ready = True
            await self._write()
        if not self.deleted:
            failed_init = await self._run_init_containers()
            if failed_init:
                return await self._finish_naturally()
        if not self.deleted:
            for index, container in enumerate(self._spec().get("containers") or []):
                await self._start(container, where=f"spec.containers[{index}]")
            await self._write()
        while not self.deleted:
            if self._regular_all_terminated():
                return await self._finish_naturally()
            if await self._wait_change_or_delete():
                break
            await self._write()
        return await self._terminate_deleted()

    async def _pause(self, seconds: float) -> bool:
        """Sleep, unless deleted first; True if deleted."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._deleted.wait()
        return self.deleted

    async def _run_init_containers(self) -> bool:
        """Run init containers in order; True if one failed (restartPolicy Never ends the pod)."""
        for index, container in enumerate(self._spec().get("initContainers") or []):
            if self.deleted:
                return False
            started = await self._start(container, where=f"spec.initContainers[{index}]")
            await self._write()
            if started is None:
                return False  # CreateContainerConfigError: stays Pending, as on a real node
            if status.is_sidecar(container):
                continue
            while not self._is_terminated(container["name"]):
                if await self._wait_change_or_delete():
                    return False
                await self._write()
            final = self.records[container["name"]].state
            if isinstance(final, state.Terminated) and final.exit_code != 0:
                return str(self._spec().get("restartPolicy", "Always")) == "Never"
        return False

    def _is_terminated(self, name: str) -> bool:
        record = self.records.get(name)
        return record is not None and isinstance(record.state, state.Terminated)

    def _regular_all_terminated(self) -> bool:
        names = [c["name"] for c in self._spec().get("containers") or []]
        return bool(names) and all(self._is_terminated(n) for n in names)

    def _sidecars_running(self) -> list[runtime.Container]:
        found = []
        for container in self._spec().get("initContainers") or []:
            started = self.containers.get(container["name"])
            if status.is_sidecar(container) and started and not started.exited.is_set():
                found.append(started)
        return found

    async def _finish_naturally(self) -> Outcome:
        self._terminal = True
        sidecars = self._sidecars_running()
        if sidecars:
            for sidecar in reversed(sidecars):
                await sidecar.stop(
                    grace_seconds=self._grace(),
                    commands=self.runtime.commands,
                    minimum_grace=self.timing.minimum_grace_seconds,
                )
            self._sandbox_ready = False
            self._relist()
            await self._write()
        self._sandbox_ready = False
        deleted = await self._pause(self.timing.terminal_delay_seconds)
        self._relist()
        self._stopped_all = True
        await self._write()
        return Outcome(phase=str(self.pod["status"]["phase"]), final_delete=deleted)

    async def _terminate_deleted(self) -> Outcome:
        await self._write()  # observedGeneration of the deletion, nothing else yet
        self._terminal = True
        grace = self._grace()
        deadline = time.monotonic() + grace
        regular = [
            self.containers[c["name"]]
            for c in self._spec().get("containers") or []
            if c["name"] in self.containers
        ]
        await asyncio.gather(
            *(
                c.stop(
                    grace_seconds=grace,
                    commands=self.runtime.commands,
                    minimum_grace=self.timing.minimum_grace_seconds,
                )
                for c in regular
            )
        )
        for sidecar in reversed(self._sidecars_running()):
            left = max(0, math.ceil(deadline - time.monotonic()))
            await sidecar.stop(
                grace_seconds=left,
                commands=self.runtime.commands,
                minimum_grace=self.timing.minimum_grace_seconds,
            )
        for container in self.containers.values():  # e.g. an init container still running
            await container.stop(
                grace_seconds=max(0, math.ceil(deadline - time.monotonic())),
                commands=self.runtime.commands,
                minimum_grace=self.timing.minimum_grace_seconds,
            )
        self._sandbox_ready = False
        self._stopped_all = True
        self._relist()
        await self._write()
        return Outcome(phase=str(self.pod["status"]["phase"]), final_delete=True)
