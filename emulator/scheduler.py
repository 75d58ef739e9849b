"""The emulated kube-scheduler: binds pending pods, writes PodScheduled, preempts by priority.

Acts as ``system:kube-scheduler`` (the identity in tests/fixtures/admission 24-26) through the
emulator's normal write path, so webhooks see its requests. The decisions are
:mod:`emulator.scheduling` (pure); this module only watches and writes, in kube-scheduler's order
(pkg/scheduler/schedule_one.go ``handleSchedulingFailure``, framework/preemption/preemption.go
``prepareCandidate``), matching the recorded requests:

1. a pod that fits nowhere: a ``pods/status`` strategic-merge patch with ``PodScheduled=False``,
   reason ``Unschedulable`` (with ``observedGeneration``), and -- when preemption found room --
   ``status.nominatedNodeName`` in the same patch (recording 24);
2. each victim: a ``pods/status`` patch adding ``DisruptionTarget=True``, reason
   ``PreemptionByScheduler``, message ``default-scheduler: preempting to accommodate a higher
   priority pod`` (25), then a plain DELETE, so the pod's own grace period applies (26);
3. the preemptor stays Pending until the victims are gone or terminal (terminating pods keep
   holding their resources), then binds like any pod.

Binding: the emulator has no ``pods/binding`` subresource, so a bind is two writes through the
same pipeline: a ``pods/status`` patch setting ``PodScheduled=True`` (no reason, no
observedGeneration) and clearing ``nominatedNodeName`` -- the status the real binding produced
(recording 28's old object) -- then a merge patch of ``spec.nodeName``. A webhook therefore sees
a pod UPDATE where a real apiserver would send a ``pods/binding`` CREATE.

Limits: see :mod:`emulator.scheduling`; one scheduling pass at a time over all pending pods
(no backoff queue: an unschedulable pod is retried on the next pod or node change).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from emulator import informer, scheduling
from emulator.apiserver import server, strategy
from kontinue import keys
from kontinue.kube import api as kube_api
from kontinue.kube import errors, resources

log = logging.getLogger("emulator.scheduler")

USER = "system:kube-scheduler"
DEFAULT_NAME = "default-scheduler"
Object = dict[str, Any]


def _condition(pod: Object, **fields: Any) -> Object:
    return {
        "type": fields.pop("type"),
        "observedGeneration": int(pod["metadata"].get("generation") or 1),
        "status": fields.pop("status"),
        "lastProbeTime": None,
        "lastTransitionTime": strategy.now(),
        **fields,
    }


def _current(pod: Object, kind: str) -> Object | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


class Scheduler:
    """Run with ``await start()`` / ``await stop()``; ``passes`` counts scheduling passes."""

    def __init__(
        self, api: server.ApiServer, *, name: str = DEFAULT_NAME, user: str = USER
    ) -> None:
        self.name = name
        self.client = api.client(user)
        self.pods = informer.Informer(self.client, resources.PODS, on_change=self._changed)
        self.nodes = informer.Informer(self.client, resources.NODES, on_change=self._changed)
        self.passes = 0
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def _changed(self, _kind: str, _obj: Object) -> None:
        self._dirty.set()

    async def start(self) -> None:
        self._tasks = await informer.start([self.pods, self.nodes])
        self._tasks.append(asyncio.create_task(self._loop()))

    async def stop(self) -> None:
        await informer.stop(self._tasks)

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):  # not wait_for: it can swallow a cancel (3.11)
                    await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.schedule_pending()
            except errors.ApiError as error:
                log.info("scheduling pass failed (%s); retrying", error)
                self._dirty.set()
                await asyncio.sleep(0.1)

    async def schedule_pending(self) -> None:
        """One pass: every pending pod of this scheduler, most important first."""
        self.passes += 1
        nodes = self.nodes.items()
        pending = [
            p for p in self.pods.items() if scheduling.wants_scheduling(p, scheduler_name=self.name)
        ]
        for pod in scheduling.queue_order(pending):
            await self._schedule_one(pod, nodes)

    async def _schedule_one(self, pod: Object, nodes: list[Object]) -> None:
        pods = self.pods.items()
        fit = scheduling.find_fit(pod, nodes, pods)
        if fit.node is not None:
            await self._bind(pod, fit.node)
            return
        plan = scheduling.plan_preemption(pod, nodes, pods)
        if plan is None:
            if scheduling.eligible_to_preempt(pod, pods):
                message = scheduling.preemption_failure_message(fit, total=len(nodes))
            else:  # an earlier preemption is still under way: keep the nomination
                message = fit.message(len(nodes))
            await self._unschedulable(pod, message=message, nominate=None)
            return
        await self._unschedulable(pod, message=fit.message(len(nodes)), nominate=plan.node)
        for victim in plan.victims:
            await self._preempt(victim)

    async def _patch_status(self, pod: Object, status: Object) -> Object | None:
        meta = pod["metadata"]
        try:
            updated = await self.client.patch(
                resources.PODS,
                meta["name"],
                {"status": status},
                content_type=kube_api.STRATEGIC_MERGE_PATCH,
                namespace=meta["namespace"],
                subresource="status",
            )
        except errors.NotFound:
            return None
        self.pods.observe(updated)
        return updated

    async def _unschedulable(self, pod: Object, *, message: str, nominate: str | None) -> None:
        held = _current(pod, "PodScheduled")
        same = (
            held is not None
            and held.get("status") == "False"
            and held.get("message") == message
            and (nominate is None or scheduling.nominated(pod) == nominate)
        )
        if same:
            return
        status: Object = {
            "conditions": [
                _condition(
                    pod,
                    type="PodScheduled",
                    status="False",
                    reason="Unschedulable",
                    message=message,
                )
            ]
        }
        if held is not None and held.get("status") == "False" and held.get("lastTransitionTime"):
            status["conditions"][0]["lastTransitionTime"] = held["lastTransitionTime"]
        if nominate is not None:
            status["nominatedNodeName"] = nominate
        await self._patch_status(pod, status)

    async def _preempt(self, victim: Object) -> None:
        message = scheduling.PREEMPTION_MESSAGE.format(scheduler=self.name)
        condition = _condition(
            victim,
            type=keys.POD_CONDITION_DISRUPTION_TARGET,
            status="True",
            reason=keys.DISRUPTION_PREEMPTION_BY_SCHEDULER,
            message=message,
        )
        if await self._patch_status(victim, {"conditions": [condition]}) is None:
            return
        meta = victim["metadata"]
        try:
            deleted = await self.client.delete(
                resources.PODS, meta["name"], namespace=meta["namespace"]
            )
        except errors.NotFound:
            return
        self.pods.observe(deleted)

    async def _bind(self, pod: Object, node: str) -> None:
        scheduled = {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": strategy.now(),
            "reason": None,
            "message": None,
            "observedGeneration": None,
        }
        if (
            await self._patch_status(pod, {"conditions": [scheduled], "nominatedNodeName": None})
            is None
        ):
            return
        meta = pod["metadata"]
        try:
            bound = await self.client.patch(
                resources.PODS,
                meta["name"],
                {"spec": {"nodeName": node}},
                content_type=kube_api.MERGE_PATCH,
                namespace=meta["namespace"],
            )
        except errors.NotFound:
            return
        self.pods.observe(bound)
