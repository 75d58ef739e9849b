"""``move``, ``drain``, ``defrag``: carry out a :mod:`~kubectl_kontinue.planning` plan.

A move of one pod is two writes (kontinue/moving.py explains the protocol): a merge patch that
puts the ``kontinue.dev/move`` annotation on the pod, then a POST to its ``eviction``
subresource — what ``kubectl drain`` sends, so PodDisruptionBudgets are respected: a 429 from
a budget is retried every few seconds until ``--timeout``, as kubectl drain does. The queue
system is not involved (its Workload stays admitted); the Job replaces the pod, Kontinue's
bridge records a ``Manual`` Checkpoint and its webhook restores the successor where the move
asked. The Job's ``podFailurePolicy`` (set by Kontinue's webhook) ignores pods with
``DisruptionTarget``, so a move never counts against ``backoffLimit``.

``--wait`` follows each moved lineage until as many restored pods as were moved run, and
prints where each went, from which set (and step, when recorded) and the handover time (from
the eviction to the successor Running).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
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

_WORLD = [
    gathering.PODS,
    gathering.JOBS,
    gathering.CHECKPOINTS,
    gathering.QUEUES,
    gathering.NODES,
]


def _say(out: TextIO, text: str) -> None:
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
                _say(out, f"  {pod.namespace}/{pod.name}: waiting: {exc}")
                said = True
            await asyncio.sleep(min(BUDGET_RETRY_SECONDS, max(0.5, exc.retry_after or 0)))


@dataclasses.dataclass(frozen=True)
class Arrival:
    """A restored successor pod of a moved lineage."""

    pod: core.Pod
    checkpoint: str
    step: int | None
    handover: float


def _running(pod: core.Pod) -> bool:
    phase = pod.status.phase if pod.status else None
    return phase == "Running" and pod.metadata.deletion_timestamp is None


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
            if _running(pod) and pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION):
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


def _arrival_line(old_node: str, arrival: Arrival) -> str:
    step = f", step {arrival.step}" if arrival.step is not None else ""
    return (
        f"  {arrival.pod.name} running on {arrival.pod.spec.node_name} (was {old_node}), "
        f"restored from {arrival.checkpoint}{step}; handover {printing.seconds(arrival.handover)}"
    )


# --- move --------------------------------------------------------------------------------------


def move_help() -> str:
    return """\
Checkpoint a running job and resume it on another node, without losing its work, without
counting against its backoffLimit, and without the queue system's preemption.

Each of its pods is marked with the move (kontinue.dev/move) and evicted through the Eviction
API, so PodDisruptionBudgets are respected (a refused eviction is retried until --timeout).
The pod saves in its grace period; Kontinue's bridge records the eviction as a Checkpoint with
trigger source Manual; the Job replaces the pod and Kontinue's webhook restores the new one
from that checkpoint, placed as asked:

  --to-node N        the new pods must run on node N
  --away-from NODE   the new pods must not run on NODE
  (neither)          away from the node it runs on now

Refused, with the reason, when: the job's queue has not opted in; its newest checkpoint set
Failed (it would resume from an older one); it is saving right now; it has no running pod;
the node does not exist or is cordoned.

--wait follows it until the restored pods run and prints where each went, from which set and
step, and the handover time.

Examples:
  kubectl kontinue move job/train --to-node gpu-b --wait
  kubectl kontinue move job/train -n team-a --away-from gpu-a
"""


async def move(args: argparse.Namespace, kube: kube_api.Api, namespace: str, out: TextIO) -> int:
    if args.to_node and args.away_from:
        raise commands.Refused("use --to-node or --away-from, not both")
    world = await gathering.gather(kube, namespace=namespace, what=_WORLD)
    try:
        plan = planning.plan_move(
            world,
            owner=args.owner,
            namespace=namespace,
            to_node=args.to_node,
            away_from=args.away_from,
        )
    except planning.Refusal as exc:
        raise commands.Refused(str(exc)) from exc
    deadline = time.monotonic() + args.timeout
    await run_moves([plan], kube, deadline=deadline, wait=args.wait, out=out)
    return 0


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
        _say(out, f"moving {plan.lineage.owner} ({where}) {plan.move.request}")
        for pod in plan.pods:
            await mark(kube, pod, plan.move)
        evicted_at = time.monotonic()
        for pod in plan.pods:
            await evict(kube, pod, deadline=deadline, out=out)
        started.append((plan, evicted_at))
    if not wait:
        _say(out, "evicted; follow it with: kubectl kontinue describe " + plans[-1].lineage.owner)
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
        _say(out, f"{plan.lineage.owner} moved:")
        for arrival in got:
            _say(out, _arrival_line(",".join(old_nodes), arrival))
        arrivals += got
    return arrivals


# --- drain -------------------------------------------------------------------------------------


def drain_help() -> str:
    return """\
kubectl drain, with every opted-in pod checkpointed and restored elsewhere.

1. cordon NODE (spec.unschedulable: true), as kubectl drain does;
2. evict every pod on it through the Eviction API (PodDisruptionBudgets respected; refused
   evictions retried until --timeout). DaemonSet pods and mirror pods are ignored. A pod
   without a controller is refused unless --force (nothing would recreate it);
3. opted-in pods are marked as moved away from NODE first, so Kontinue records a Manual
   checkpoint and restores each on another node. Other pods are evicted as kubectl drain
   evicts them (an opted-in pod whose newest checkpoint Failed is evicted with a warning).

--wait waits until every evicted pod is gone and prints, per moved pod, where it went and
from which set and step. Plain "kubectl drain NODE" keeps working with Kontinue too: it goes
through the same Eviction API, and the bridge checkpoints opted-in pods (source EvictionAPI).

Undo the cordon with: kubectl uncordon NODE

Examples:
  kubectl kontinue drain gpu-a --wait
"""


async def drain(args: argparse.Namespace, kube: kube_api.Api, namespace: str, out: TextIO) -> int:
    del namespace  # a node holds pods of every namespace
    world = await gathering.gather(kube, namespace=None, what=_WORLD)
    try:
        plan = planning.plan_drain(world, node=args.node, force=args.force)
    except planning.Refusal as exc:
        raise commands.Refused(str(exc)) from exc
    await kube.merge_patch(resources.NODES, args.node, {"spec": {"unschedulable": True}})
    _say(out, f"node/{args.node} cordoned")
    for pod, why in plan.ignored:
        _say(out, f"ignoring {pod.namespace}/{pod.name} ({why})")
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + args.timeout
    for item in plan.moves:
        await mark(kube, item.pod, item.move)
    evicted_at = time.monotonic()
    for item in plan.moves:
        await evict(kube, item.pod, deadline=deadline, out=out)
        _say(out, f"evicting {item.pod.namespace}/{item.pod.name} (checkpoint and move)")
    for pod in plan.evictions:
        await evict(kube, pod, deadline=deadline, out=out)
        _say(out, f"evicting {pod.namespace}/{pod.name}")
    if not args.wait:
        _say(out, f"node/{args.node} drain started")
        return 0
    every = [i.pod for i in plan.moves] + list(plan.evictions)
    await _wait_gone(kube, every, deadline=deadline)
    groups: dict[tuple[str, str], list[planning.PodMove]] = {}
    for item in plan.moves:
        groups.setdefault((item.lineage.namespace, item.lineage.owner_uid), []).append(item)
    for key, items in groups.items():
        got = await wait_arrivals(
            kube,
            lineage_key=key,
            old={i.pod.metadata.uid or "" for i in items},
            count=len(items),
            evicted_at=evicted_at,
            deadline=deadline,
        )
        for item, arrival in zip(sorted(items, key=lambda i: i.pod.name), got, strict=False):
            _say(out, f"{item.pod.namespace}/{item.pod.name} moved:")
            _say(out, _arrival_line(args.node, arrival))
    _say(out, f"node/{args.node} drained")
    return 0


async def _wait_gone(kube: kube_api.Api, pods: Sequence[core.Pod], *, deadline: float) -> None:
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


# --- defrag ------------------------------------------------------------------------------------


def defrag_help() -> str:
    return """\
Make room for a pending pod by moving opted-in running pods, when no node has enough free
GPUs for it although the cluster has enough in total (fragmentation). Kueue and Volcano can
only preempt - kill - to make room; this moves, so no work is lost.

It computes the smallest set of movable jobs (opted in, running on one node, newest
checkpoint good) whose move frees one node for the pending pod, and a destination for each on
the other nodes; prints the plan; and, without --dry-run, carries it out with the same moves
as "kubectl kontinue move --to-node" (so the moved jobs cannot land back on the freed node).

Refused, with the reason, when the pod already fits somewhere, when the cluster lacks the
GPUs in total (a shortage, not fragmentation), or when no set of movable jobs frees a node.
Only GPUs (nvidia.com/gpu) are counted; cpu and memory are left to the scheduler.

--wait follows the moves and then the pending pod until it runs.

Examples:
  kubectl kontinue defrag --for job/urgent --dry-run
  kubectl kontinue defrag --for pod/urgent-x7k2p --wait
"""


def plan_lines(plan: planning.DefragPlan) -> list[str]:
    pods = ", ".join(p.name for p in plan.pending)
    free = ", ".join(f"{n} {f}" for n, f in sorted(plan.free_before.items()))
    lines = [
        f"{pods} needs {plan.need} GPUs; free per node: {free}",
        f"plan: free node {plan.node} by moving {len(plan.relocations)} job(s):",
    ]
    for r in plan.relocations:
        lines.append(f"  move {r.lineage.owner} ({r.gpus} GPU) {r.from_node} -> {r.to_node}")
    return lines


def plan_data(plan: planning.DefragPlan) -> Obj:
    return {
        "pending": [p.name for p in plan.pending],
        "needGPUs": plan.need,
        "node": plan.node,
        "freeBefore": dict(sorted(plan.free_before.items())),
        "moves": [
            {
                "owner": r.lineage.owner,
                "namespace": r.lineage.lineage.namespace,
                "gpus": r.gpus,
                "from": r.from_node,
                "to": r.to_node,
            }
            for r in plan.relocations
        ],
    }


async def defrag(args: argparse.Namespace, kube: kube_api.Api, namespace: str, out: TextIO) -> int:
    world = await gathering.gather(kube, namespace=None, what=_WORLD)
    try:
        plan = planning.plan_defrag(world, target=args.target, namespace=namespace)
    except planning.Refusal as exc:
        raise commands.Refused(str(exc)) from exc
    if args.output in ("json", "yaml"):
        print(printing.dump(plan_data(plan), args.output), file=out, flush=True)
    else:
        for line in plan_lines(plan):
            _say(out, line)
    if args.dry_run:
        # with -o json|yaml stdout stays one document
        _say(out if args.output is None else sys.stderr, "dry run: nothing moved")
        return 0
    moves = []
    for r in plan.relocations:
        live = tuple(r.lineage.live_pods)
        moves.append(
            planning.MovePlan(
                r.lineage,
                moving.Move(by="defrag", to_node=r.to_node),
                live,
                r.gpus,
            )
        )
    deadline = time.monotonic() + args.timeout
    started = time.monotonic()
    await run_moves(moves, kube, deadline=deadline, wait=args.wait, out=out)
    if args.wait:
        pending = plan.pending[0]
        node = await _wait_running(kube, pending, deadline=deadline)
        _say(
            out,
            f"{pending.name} running on {node} "
            f"({printing.seconds(time.monotonic() - started)} after the first eviction)",
        )
    return 0


async def _wait_running(kube: kube_api.Api, pod: core.Pod, *, deadline: float) -> str:
    while True:
        try:
            raw = await kube.get(resources.PODS, pod.name, namespace=pod.namespace)
        except errors.NotFound as exc:
            raise commands.Refused(f"{pod.name} was deleted while waiting for it") from exc
        current = base.parse(core.Pod, raw)
        if _running(current):
            return current.spec.node_name or ""
        if time.monotonic() > deadline:
            raise commands.Refused(f"timed out waiting for {pod.name} to run")
        await asyncio.sleep(POLL_SECONDS)


# --- the parsers -------------------------------------------------------------------------------


def add_parsers(sub: Any, common: Callable[..., Any]) -> None:
    timeout = {
        "type": float,
        "default": 300.0,
        "help": "give up after this many seconds (default 300)",
    }
    p = sub.add_parser(
        "move",
        parents=[common(output=())],
        help="checkpoint a running job and resume it on another node",
        description=move_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("owner", metavar="job/NAME", help="the workload to move")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--to-node", metavar="N", help="resume it on node N")
    where.add_argument("--away-from", metavar="NODE", help="resume it anywhere but NODE")
    p.add_argument("--wait", action="store_true", help="follow it until the restored pods run")
    p.add_argument("--timeout", **timeout)
    p.set_defaults(run=move)

    p = sub.add_parser(
        "drain",
        parents=[common(namespaced=False, output=())],
        help="kubectl drain, with opted-in pods checkpointed and restored elsewhere",
        description=drain_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("node", metavar="NODE", help="the node to drain")
    p.add_argument("--force", action="store_true", help="also evict pods without a controller")
    p.add_argument("--wait", action="store_true", help="wait until moved pods run elsewhere")
    p.add_argument("--timeout", **timeout)
    p.set_defaults(run=drain)

    p = sub.add_parser(
        "defrag",
        parents=[common(output=("json", "yaml"))],
        help="move opted-in pods so a pending pod that fits nowhere gets a node",
        description=defrag_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--for",
        dest="target",
        required=True,
        metavar="pod/NAME|job/NAME",
        help="the pending pod, or a Job whose pods are pending",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, move nothing")
    p.add_argument("--wait", action="store_true", help="follow the moves and the pending pod")
    p.add_argument("--timeout", **timeout)
    p.set_defaults(run=defrag)
