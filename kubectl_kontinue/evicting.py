"""The writes a move is made of, and the waits that follow it (``move``, ``drain``, ``defrag``).

A move of one pod is two writes (kontinue/moving.py explains the protocol): a merge patch that
puts the ``kontinue.dev/move`` annotation on the pod (:func:`mark`), then a POST to its
``eviction`` subresource (:func:`evict`) — what ``kubectl drain`` sends, so PodDisruptionBudgets
are respected: a 429 from a budget is retried every few seconds until the deadline, as kubectl
drain does. Following a moved lineage (:func:`wait_arrivals`) polls until as many restored pods
as were moved run, and reports where each went, from which set (and step, when recorded) and the
handover time (from the eviction to the successor Running).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import Any, TextIO

from kontinue import keys, moving
from kontinue.kube import api as kube_api
from kontinue.kube import errors, resources
from kontinue.models import base, core
from kubectl_kontinue import commands, gathering, lineages, planning, printing

Obj = dict[str, Any]
POLL_SECONDS = 0.25
BUDGET_RETRY_SECONDS = 5.0
"""kubectl drain's wait between evictions a PodDisruptionBudget refused (pkg/drain/drain.go)."""


def say(out: TextIO, text: str) -> None:
    print(text, file=out, flush=True)


async def mark(kube: kube_api.Api, pod: core.Pod, move: moving.Move) -> None:
    """Write the move request on the pod the eviction will take (see kontinue/moving.py)."""
    await kube.merge_patch(
        resources.PODS,
        pod.name,
        {"metadata": {"annotations": {moving.ANNOTATION: move.encode()}}},
        namespace=pod.namespace,
    )


async def evict(kube: kube_api.Api, pod: core.Pod, *, deadline: float, out: TextIO) -> bool:
    """Evict through the Eviction API; ``False`` when the pod was already gone.

    429 (a PodDisruptionBudget forbids it now) is retried until ``deadline``, then refused.
    """
    said = False
    while True:
        try:
            await kube.evict(pod.name, namespace=pod.namespace)
            return True
        except errors.NotFound:
            return False
        except errors.TooManyRequests as exc:
            if time.monotonic() > deadline:
                raise commands.Refused(
                    f"eviction of {pod.namespace}/{pod.name} still refused at the timeout: {exc}"
                ) from exc
            if not said:
                say(out, f"  {pod.namespace}/{pod.name}: waiting: {exc}")
                said = True
            await asyncio.sleep(retry_delay(exc.retry_after))


def retry_delay(retry_after: float | None) -> float:
    """Seconds before evicting again after a 429: what the apiserver asked (``Retry-After``),
    within [0.5, 5]; kubectl drain's 5 s when it asked nothing — a budget's refusal carries no
    Retry-After (kubernetes ``pkg/registry/core/pod/storage/eviction.go``)."""
    if not retry_after or retry_after <= 0:
        return BUDGET_RETRY_SECONDS
    return min(BUDGET_RETRY_SECONDS, max(0.5, retry_after))


@dataclasses.dataclass(frozen=True)
class Arrival:
    """A restored successor pod of a moved lineage."""

    pod: core.Pod
    checkpoint: str
    step: int | None
    handover: float


def running(pod: core.Pod) -> bool:
    phase = pod.status.phase if pod.status else None
    return phase == "Running" and pod.metadata.deletion_timestamp is None


def ran(pod: core.Pod) -> bool:
    """Running now, or already finished on a node: a short job can end between two polls, or
    while the command still follows the moves (then the Job controller's pod-failure backoff,
    10 s, holds their successors back: docs/cli.md)."""
    phase = pod.status.phase if pod.status else None
    return running(pod) or (phase in ("Succeeded", "Failed") and bool(pod.spec.node_name))


def _phase(pod: core.Pod) -> str:
    return (pod.status.phase if pod.status else None) or "Unknown"


async def wait_arrivals(
    kube: kube_api.Api,
    *,
    lineage_key: tuple[str, str],
    old: set[str],
    count: int,
    evicted_at: float,
    deadline: float,
) -> list[Arrival]:
    """Poll the namespace until ``count`` restored, running successors of the lineage exist."""
    namespace, owner_uid = lineage_key
    seen: dict[str, float] = {}
    while True:
        listed = await gathering.list_all(kube, resources.PODS, namespace=namespace)
        now = time.monotonic()
        arrivals: list[core.Pod] = []
        for raw in listed:
            pod = base.parse(core.Pod, raw)
            lin = lineages.pod_lineage(pod)
            if lin is None or lin.owner_uid != owner_uid or pod.metadata.uid in old:
                continue
            if (running(pod) or _phase(pod) == "Succeeded") and pod.metadata.annotation(
                keys.RESTORE_FROM_ANNOTATION
            ):
                seen.setdefault(pod.name, now)
                arrivals.append(pod)
        if len(arrivals) >= count:
            checkpoints = await gathering.list_all(kube, resources.CHECKPOINTS, namespace=namespace)
            by_name = {c["metadata"]["name"]: c for c in checkpoints}
            result = []
            for pod in sorted(arrivals, key=lambda p: p.name):
                name = pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION) or ""
                step = _step(by_name.get(name))
                result.append(Arrival(pod, name, step, seen[pod.name] - evicted_at))
            return result
        if now > deadline:
            raise commands.Refused(
                f"timed out waiting for restored pods ({len(arrivals)}/{count} running); "
                "kubectl kontinue describe shows how far it got"
            )
        await asyncio.sleep(POLL_SECONDS)


def _step(raw: Obj | None) -> int | None:
    if raw is None:
        return None
    steps = {m.get("step") for m in (raw.get("status") or {}).get("members") or []}
    if len(steps) == 1:
        (step,) = steps
        return step if isinstance(step, int) else None
    return None


def arrival_line(old_node: str, arrival: Arrival) -> str:
    step = f", step {arrival.step}" if arrival.step is not None else ""
    where = (
        f"running on {arrival.pod.spec.node_name}"
        if running(arrival.pod)
        else f"ran on {arrival.pod.spec.node_name} ({_phase(arrival.pod)})"
    )
    return (
        f"  {arrival.pod.name} {where} (was {old_node}), "
        f"restored from {arrival.checkpoint}{step}; handover {printing.seconds(arrival.handover)}"
    )


async def run_moves(
    plans: Sequence[planning.MovePlan],
    kube: kube_api.Api,
    *,
    deadline: float,
    wait: bool,
    out: TextIO,
) -> list[Arrival]:
    """Mark and evict every pod of every plan, then (``wait``) follow each to its arrival."""
    started: list[tuple[planning.MovePlan, float]] = []
    for plan in plans:
        where = ", ".join(f"{p.name} on {p.spec.node_name}" for p in plan.pods)
        say(out, f"moving {plan.lineage.owner} ({where}) {plan.move.request}")
        for pod in plan.pods:
            await mark(kube, pod, plan.move)
        evicted_at = time.monotonic()
        for pod in plan.pods:
            await evict(kube, pod, deadline=deadline, out=out)
        started.append((plan, evicted_at))
    if not wait:
        say(out, "evicted; follow it with: kubectl kontinue describe " + plans[-1].lineage.owner)
        return []
    arrivals: list[Arrival] = []
    for plan, evicted_at in started:
        got = await wait_arrivals(
            kube,
            lineage_key=(plan.lineage.lineage.namespace, plan.lineage.lineage.owner_uid),
            old={p.metadata.uid or "" for p in plan.pods},
            count=len(plan.pods),
            evicted_at=evicted_at,
            deadline=deadline,
        )
        old_nodes = sorted({p.spec.node_name or "" for p in plan.pods})
        say(out, f"{plan.lineage.owner} moved:")
        for arrival in got:
            say(out, arrival_line(",".join(old_nodes), arrival))
        arrivals += got
    return arrivals


async def wait_gone(kube: kube_api.Api, pods: Sequence[core.Pod], *, deadline: float) -> None:
    waiting = {(p.namespace, p.name, p.metadata.uid) for p in pods}
    while waiting:
        for ns, name, uid in sorted(waiting, key=str):
            try:
                raw = await kube.get(resources.PODS, name, namespace=ns)
            except errors.NotFound:
                waiting.discard((ns, name, uid))
                continue
            if (raw.get("metadata") or {}).get("uid") != uid:
                waiting.discard((ns, name, uid))
        if not waiting:
            return
        if time.monotonic() > deadline:
            names = ", ".join(f"{ns}/{n}" for ns, n, _ in sorted(waiting, key=str))
            raise commands.Refused(f"timed out waiting for pods to go: {names}")
        await asyncio.sleep(POLL_SECONDS)


@dataclasses.dataclass(frozen=True)
class Start:
    """A pending pod seen on a node: Running, or already finished."""

    node: str
    phase: str
    seen: float
    """``time.monotonic()`` when it was first seen so."""


async def wait_started(kube: kube_api.Api, pod: core.Pod, *, deadline: float) -> Start:
    """Poll ``pod`` until it runs or has run (:func:`ran`)."""
    while True:
        try:
            raw = await kube.get(resources.PODS, pod.name, namespace=pod.namespace)
        except errors.NotFound as exc:
            raise commands.Refused(f"{pod.name} was deleted while waiting for it") from exc
        current = base.parse(core.Pod, raw)
        if ran(current):
            return Start(current.spec.node_name or "", _phase(current), time.monotonic())
        if time.monotonic() > deadline:
            raise commands.Refused(f"timed out waiting for {pod.name} to run")
        await asyncio.sleep(POLL_SECONDS)
