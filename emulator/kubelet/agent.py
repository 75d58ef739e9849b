"""The kubelet's API side for one emulated node: watch bound pods, run a worker each, write status.

What a real kubelet does around its pod workers (pkg/kubelet/config/apiserver.go: a watch of
pods with ``spec.nodeName=<node>``; pkg/kubelet/status/status_manager.go ``syncPod``: status
writes as ``system:node:<node>``, and once a deleted pod's containers are all stopped, the final
DELETE with ``gracePeriodSeconds: 0`` and a ``uid`` precondition -- recordings 09/29/33 in
tests/fixtures/admission). The pod's life itself (start, relist, SIGTERM, grace, SIGKILL, the
exact status sequence) is :class:`emulator.kubelet.worker.PodWorker`; this module only wires it
to the API, and gives it the Service-link variables a real kubelet adds to every container
(:mod:`emulator.kubelet.servicelinks`).

Status writes replace ``pods/status`` at the resourceVersion just read, keeping conditions the
kubelet does not own that appeared meanwhile (a scheduler's ``DisruptionTarget``), and retry on a
conflict: the outcome of ``mergePodStatus`` without the two-way patch. A pod whose finalizers keep
the object after the final DELETE stays in the API, terminal, and is not run again.

An API error never ends a pod's life here, as it never does on a real node: the status manager
logs a failed read or write ("Failed to get status for pod") and retries it on its next sync
(pkg/kubelet/status/status_manager.go ``syncPod``, ``syncBatch`` every ``syncPeriod`` = 10 s),
independently of the pod worker. Here a failed read, status write, Service list or final DELETE
is retried every ``Timing.status_retry_seconds`` until it succeeds or the pod is gone (404, or
another uid). One real cause, measured on the real control-plane tier: the Node authorizer
answers 403 "no relationship found between node ... and this object" to a kubelet's GET of a pod
bound a moment ago, until its graph — fed by the apiserver's own pod informer
(plugin/pkg/auth/authorizer/node/graph_populator.go, node_authorizer.go) — has seen the binding.
The emulator's one simplification: the worker waits for its write instead of running on while
the status manager retries, so the pod's next step comes that much later.

Checkpoint storage: a ``hostPath`` or ``persistentVolumeClaim`` volume maps to one directory under
the cluster's shared root (:func:`emulator.kubelet.launch.volume_host_path`), the same for every
node, so a pod on node B reads what a pod on node A wrote -- the ReadWriteMany volume of a real
cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from emulator import informer
from emulator.apiserver import server
from emulator.kubelet import launch, runtime, servicelinks, status, worker
from kontinue.kube import errors, resources

log = logging.getLogger("emulator.kubelet")

Object = dict[str, Any]


def _uid(pod: Object) -> str:
    return str(pod["metadata"].get("uid") or "")


class Agent:
    """One node's kubelet. ``await start()`` / ``await stop()``; ``workers`` by pod uid."""

    def __init__(
        self,
        api: server.ApiServer,
        *,
        node: launch.Node,
        runtime_: runtime.Runtime | None = None,
        timing: worker.Timing | None = None,
    ) -> None:
        self.node = node
        self.user = f"system:node:{node.name}"
        self.client = api.client(self.user)
        self.runtime = runtime_ or runtime.Runtime()
        self.timing = timing or worker.Timing()
        self.pods = informer.Informer(
            self.client,
            resources.PODS,
            field_selector=f"spec.nodeName={node.name}",
            on_change=self._changed,
        )
        self.workers: dict[str, worker.PodWorker] = {}
        self.finished: dict[str, worker.Outcome] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._informer_tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._informer_tasks = await informer.start([self.pods])

    async def stop(self) -> None:
        await informer.stop(self._informer_tasks)
        await informer.stop(list(self._tasks.values()))
        await self.runtime.close()

    def _changed(self, kind: str, pod: Object) -> None:
        uid = _uid(pod)
        if uid in self.finished:
            return
        running = self.workers.get(uid)
        if kind == "DELETED":
            if running is not None:  # removed outright (force delete): stop at once
                meta = {**pod["metadata"], "deletionGracePeriodSeconds": 0}
                meta.setdefault("deletionTimestamp", pod["metadata"].get("creationTimestamp"))
                running.update({**pod, "metadata": meta})
            return
        if running is not None:
            running.update(pod)
            return
        if (pod.get("status") or {}).get("phase") in status.TERMINAL_PHASES:
            return  # ran before this agent started, or elsewhere: nothing to do

        async def sink(new: Object) -> None:
            await self._write(pod, new)

        pod_worker = worker.PodWorker(
            pod, runtime_=self.runtime, node=self.node, sink=sink, timing=self.timing
        )
        self.workers[uid] = pod_worker
        self._tasks[uid] = asyncio.create_task(self._run(pod_worker))

    async def _run(self, pod_worker: worker.PodWorker) -> None:
        uid = _uid(pod_worker.pod)
        try:
            pod_worker.service_env = await self._service_env(pod_worker.pod)
            outcome = await pod_worker.run()
            self.finished[uid] = outcome
            if outcome.final_delete:
                await self._final_delete(pod_worker.pod)
        except errors.ApiError as error:  # not expected: every call below retries its own
            log.warning("pod %s on %s: %s", pod_worker.pod["metadata"]["name"], self.node, error)
        finally:
            self.workers.pop(uid, None)
            self._tasks.pop(uid, None)

    async def _retry_pause(self, pod: Object, what: str, error: errors.ApiError) -> None:
        """Log a failed call for ``pod`` and wait before the next attempt (module docstring)."""
        log.info(
            "pod %s on %s: %s failed (%s); retrying",
            pod["metadata"]["name"],
            self.node.name,
            what,
            error,
        )
        await asyncio.sleep(self.timing.status_retry_seconds)

    async def _service_env(self, pod: Object) -> dict[str, str]:
        """Service links for the pod's containers (:mod:`emulator.kubelet.servicelinks`)."""
        namespace = pod["metadata"]["namespace"]
        while True:
            try:
                found = (await self.client.list(resources.SERVICES, namespace=namespace))["items"]
                if namespace != "default":
                    found += (await self.client.list(resources.SERVICES, namespace="default"))[
                        "items"
                    ]
                break
            except errors.ApiError as error:
                await self._retry_pause(pod, "listing Services", error)
        enabled = (pod.get("spec") or {}).get("enableServiceLinks", True) is not False
        return servicelinks.variables(found, namespace=namespace, enable_service_links=enabled)

    async def _final_delete(self, pod: Object) -> None:
        meta = pod["metadata"]
        while True:
            try:
                with contextlib.suppress(errors.NotFound, errors.Conflict):
                    await self.client.delete(
                        resources.PODS,
                        meta["name"],
                        namespace=meta["namespace"],
                        grace_period_seconds=0,
                        preconditions={"uid": meta["uid"]},
                    )
                return
            except errors.ApiError as error:
                await self._retry_pause(pod, "the final DELETE", error)

    async def _write(self, pod: Object, new: Object) -> None:
        meta = pod["metadata"]
        conflicts = 0
        while conflicts < 20:
            try:
                current = await self.client.get(
                    resources.PODS, meta["name"], namespace=meta["namespace"]
                )
            except errors.NotFound:
                return
            except errors.ApiError as error:
                await self._retry_pause(pod, "reading it for a status write", error)
                continue
            if _uid(current) != meta["uid"]:
                return
            merged = dict(new)
            mine = {c.get("type") for c in new.get("conditions") or []}
            theirs = [
                c
                for c in (current.get("status") or {}).get("conditions") or []
                if c.get("type") not in mine and c.get("type") not in status.KUBELET_CONDITIONS
            ]
            if theirs:
                merged["conditions"] = [*theirs, *(new.get("conditions") or [])]
            try:
                await self.client.replace(
                    resources.PODS, {**current, "status": merged}, subresource="status"
                )
                return
            except errors.NotFound:
                return
            except errors.Conflict:
                conflicts += 1
            except errors.ApiError as error:
                await self._retry_pause(pod, "its status write", error)
        log.warning("pod %s: status write kept conflicting", meta["name"])
