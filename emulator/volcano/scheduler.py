"""The emulated volcano-scheduler: enqueue, allocate, reclaim and preempt, and the evictor.

Acts as ``system:serviceaccount:volcano-system:volcano-scheduler``. One session per pass (and at
least every ``period`` s, like ``--schedule-period``) runs the CI action list
``enqueue, allocate, backfill, reclaim, preempt`` (config/volcano-scheduler-ci.conf):

- enqueue: a PodGroup in ``Pending`` whose queue is Open becomes ``Inqueue`` (full Update — the
  PodGroup CRD has no status subresource); ``Running`` once ``minMember`` pods run;
- allocate: pods with ``schedulerName: volcano`` and a ``scheduling.k8s.io/group-name`` whose
  queue has room under its ``capability`` bind to a node that fits (the node filter is
  :mod:`emulator.scheduling`'s). The bind is one ``pods/binding`` CREATE, as upstream's
  ``DefaultBinder.Bind`` (``pkg/scheduler/cache/cache.go``: ``Pods(ns).Bind`` with a
  ``v1.Binding`` naming the node): the apiserver sets ``spec.nodeName`` and ``PodScheduled``
  itself; a real kube-apiserver refuses a pod UPDATE that changes ``spec.nodeName``
  (tests/realcp/test_volcano_identity.py runs this scheduler against one);
- reclaim, then preempt: :mod:`emulator.volcano.victims`; each victim goes through
  ``defaultEvictor.Evict`` (``pkg/scheduler/cache/cache.go``): a Normal ``Evict`` Event on the
  PodGroup (message = the reason), a Warning ``Evict`` Event on the pod ("Pod is evicted,
  because of <reason>"), one ``pods/status`` UPDATE adding ``Ready=False`` (reason ``Evict``) and
  ``DisruptionTarget=True`` (reason ``PreemptionByScheduler``, message "<schedulerName>:
  preempting to accommodate a higher priority pod"), then a DELETE with empty options, so the
  pod's own grace period applies. An eviction whose conditions are already present writes and
  deletes nothing (``UpdatePodCondition`` reports no change), as upstream.
- pipelining: a pending pod that did not bind but for which reclaim or preempt found room (its
  victims evicted now, or still releasing) is *pipelined* on that node for the rest of the
  session (``Statement.Pipeline``, ``pkg/scheduler/framework/statement.go``): its request
  counts as used there, so a later, lower-priority pod of the same session does not bind onto
  the GPUs being freed for it (upstream's allocate predicate checks ``FutureIdle = Idle +
  Releasing - Pipelined``, ``pkg/scheduler/actions/allocate/allocate.go``). Pods are taken in
  priority order every session, so the claim holds until the preemptor binds.
"""

from __future__ import annotations

from typing import Any

from emulator import scheduling
from emulator.apiserver import server, strategy
from emulator.kueue import events
from emulator.volcano import loop, victims
from kontinue import keys
from kontinue.kube import errors, resources

Object = dict[str, Any]
USER = keys.VOLCANO_SCHEDULER_USER
NAME = "volcano"
COMPONENT = "volcano"


def _set_pod_condition(status: Object, condition: Object) -> bool:
    """``podutil.UpdatePodCondition``: False when nothing but timestamps would change."""
    conditions: list[Object] = status.setdefault("conditions", [])
    for i, old in enumerate(conditions):
        if old.get("type") != condition["type"]:
            continue
        same = all(old.get(k) == condition.get(k) for k in ("status", "reason", "message"))
        if same:
            return False
        if old.get("status") == condition["status"]:
            condition["lastTransitionTime"] = old.get("lastTransitionTime")
        conditions[i] = condition
        return True
    conditions.append(condition)
    return True


class VolcanoScheduler:
    def __init__(self, api: server.ApiServer, *, period: float = 1.0) -> None:
        self.client = api.client(USER)
        self.loop = loop.Loop(
            self.client,
            (resources.PODS, resources.NODES, resources.PODGROUPS, resources.VOLCANO_QUEUES),
            self.session,
            name="volcano-scheduler",
            period=period,
        )

    async def start(self) -> None:
        await self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()

    async def _items(self, resource: resources.Resource) -> list[Object]:
        items: list[Object] = (await self.client.list(resource))["items"]
        return items

    async def session(self) -> None:
        pods = await self._items(resources.PODS)
        nodes = await self._items(resources.NODES)
        groups = {
            (g["metadata"]["namespace"], g["metadata"]["name"]): g
            for g in await self._items(resources.PODGROUPS)
        }
        queues = {q["metadata"]["name"]: q for q in await self._items(resources.VOLCANO_QUEUES)}
        await self._enqueue(groups, queues, pods)
        pending = [
            p
            for p in pods
            if scheduling.wants_scheduling(p, scheduler_name=NAME)
            and (p["metadata"]["namespace"], victims.group_of(p)) in groups
            and (groups[(p["metadata"]["namespace"], victims.group_of(p))].get("status") or {}).get(
                "phase"
            )
            not in (None, "", "Pending")
        ]
        pipelined: list[Object] = []  # this session's claims, as bound copies of the pods
        for pod in scheduling.queue_order(pending):
            queue = queues.get(victims.queue_of(pod))
            fit = scheduling.find_fit(pod, nodes, [*pods, *pipelined])
            if fit.node is not None and victims.queue_has_room(pod, queue, pods):
                bound = await self._bind(pod, fit.node)
                pods = [
                    bound if p["metadata"]["uid"] == bound["metadata"]["uid"] else p for p in pods
                ]
                continue
            for action in ("reclaim", "preempt"):
                plan = victims.plan(
                    pod, nodes=nodes, pods=pods, queues=queues, action=action, pipelined=pipelined
                )
                if plan is None:
                    continue
                for victim in plan.victims:
                    group = groups.get((victim["metadata"]["namespace"], victims.group_of(victim)))
                    await self.evict(victim, reason=action, group=group)
                pipelined.append({**pod, "spec": {**pod["spec"], "nodeName": plan.node}})
                break

    async def _enqueue(
        self, groups: dict[tuple[str, str], Object], queues: dict[str, Object], pods: list[Object]
    ) -> None:
        for (ns, name), group in groups.items():
            phase = (group.get("status") or {}).get("phase") or "Pending"
            queue = queues.get((group.get("spec") or {}).get("queue") or "default")
            state = ((queue or {}).get("status") or {}).get("state") or "Open"
            running = sum(
                1
                for p in pods
                if p["metadata"]["namespace"] == ns
                and victims.group_of(p) == name
                and (p.get("status") or {}).get("phase") == "Running"
                and not scheduling.is_deleting(p)
            )
            wanted = phase
            if phase == "Pending" and queue is not None and state == "Open":
                wanted = "Inqueue"
            if (
                phase in ("Inqueue", "Pending")
                and running
                and running >= int((group.get("spec") or {}).get("minMember") or 1)
            ):
                wanted = "Running"
            if wanted != phase:
                group.setdefault("status", {})["phase"] = wanted
                group["status"]["running"] = running
                await self.client.replace(resources.PODGROUPS, group)

    async def _bind(self, pod: Object, node: str) -> Object:
        """``DefaultBinder.Bind``: one ``pods/binding`` CREATE; the session's view of the pod
        is then bound to ``node`` (the binding's response is a Status, not the pod)."""
        meta = pod["metadata"]
        await self.client.bind(resources.PODS, meta["name"], node=node, namespace=meta["namespace"])
        return {**pod, "spec": {**pod["spec"], "nodeName": node}}

    async def evict(self, pod: Object, *, reason: str, group: Object | None) -> bool:
        """``SchedulerCache.Evict`` + ``defaultEvictor.Evict``; False when nothing was written."""
        meta = pod["metadata"]
        if group is not None:
            await events.record(
                self.client, group, reason="Evict", message=reason, component=COMPONENT
            )
        message = f"Pod is evicted, because of {reason}"
        await events.record(
            self.client,
            pod,
            reason="Evict",
            message=message,
            component=COMPONENT,
            type_="Warning",
        )
        now = strategy.now()
        status = dict(pod.get("status") or {})
        status["conditions"] = [dict(c) for c in status.get("conditions") or []]
        changed = _set_pod_condition(
            status,
            {
                "type": "Ready",
                "status": "False",
                "reason": "Evict",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": now,
            },
        )
        scheduler_name = (pod.get("spec") or {}).get("schedulerName") or NAME
        changed |= _set_pod_condition(
            status,
            {
                "type": keys.POD_CONDITION_DISRUPTION_TARGET,
                "status": "True",
                "reason": keys.DISRUPTION_PREEMPTION_BY_SCHEDULER,
                "message": f"{scheduler_name}: preempting to accommodate a higher priority pod",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            },
        )
        if not changed:
            return False
        try:
            await self.client.replace(
                resources.PODS, {**pod, "status": status}, subresource="status"
            )
            await self.client.delete(resources.PODS, meta["name"], namespace=meta["namespace"])
        except errors.ApiError:
            return False  # Evict returns the error; the cache resyncs, nothing is retried here
        return True
