"""``move``, ``drain``, ``defrag``: carry out a :mod:`~kubectl_kontinue.planning` plan.

Each command gathers the cluster, asks :mod:`~kubectl_kontinue.planning` for a plan (or a
refusal), prints it, and carries it out with the writes and waits of
:mod:`~kubectl_kontinue.evicting`: mark each pod with the move, evict it through the Eviction API
(PodDisruptionBudgets respected). The queue system is not involved (its Workload stays
admitted); the Job replaces the pod, Kontinue's bridge records a ``Manual`` Checkpoint and its
webhook restores the successor where the move asked. The Job's ``podFailurePolicy`` (set by
Kontinue's webhook) ignores pods with ``DisruptionTarget``, so a move never counts against
``backoffLimit``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from kontinue import moving
from kontinue.kube import api as kube_api
from kontinue.kube import resources
from kubectl_kontinue import commands, evicting, gathering, planning, printing

Obj = dict[str, Any]

_WORLD = [
    gathering.PODS,
    gathering.JOBS,
    gathering.CHECKPOINTS,
    gathering.QUEUES,
    gathering.NODES,
]


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
step, and the handover time. On a real cluster the handover includes the Job controller's
pod-failure backoff: 10 s before it replaces an evicted pod, doubling with each further move
of a job that has not completed a pod since (docs/cli.md).

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
    await evicting.run_moves([plan], kube, deadline=deadline, wait=args.wait, out=out)
    return 0


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
    evicting.say(out, f"node/{args.node} cordoned")
    for pod, why in plan.ignored:
        evicting.say(out, f"ignoring {pod.namespace}/{pod.name} ({why})")
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + args.timeout
    for item in plan.moves:
        await evicting.mark(kube, item.pod, item.move)
    evicted_at = time.monotonic()
    for item in plan.moves:
        await evicting.evict(kube, item.pod, deadline=deadline, out=out)
        evicting.say(out, f"evicting {item.pod.namespace}/{item.pod.name} (checkpoint and move)")
    for pod in plan.evictions:
        await evicting.evict(kube, pod, deadline=deadline, out=out)
        evicting.say(out, f"evicting {pod.namespace}/{pod.name}")
    if not args.wait:
        evicting.say(out, f"node/{args.node} drain started")
        return 0
    every = [i.pod for i in plan.moves] + list(plan.evictions)
    await evicting.wait_gone(kube, every, deadline=deadline)
    groups: dict[tuple[str, str], list[planning.PodMove]] = {}
    for item in plan.moves:
        groups.setdefault((item.lineage.namespace, item.lineage.owner_uid), []).append(item)
    for key, items in groups.items():
        got = await evicting.wait_arrivals(
            kube,
            lineage_key=key,
            old={i.pod.metadata.uid or "" for i in items},
            count=len(items),
            evicted_at=evicted_at,
            deadline=deadline,
        )
        for item, arrival in zip(sorted(items, key=lambda i: i.pod.name), got, strict=False):
            evicting.say(out, f"{item.pod.namespace}/{item.pod.name} moved:")
            evicting.say(out, evicting.arrival_line(args.node, arrival))
    evicting.say(out, f"node/{args.node} drained")
    return 0


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

--wait follows the moves, and the pending pod from the first eviction on, until the moved
jobs' restored pods run and the pending pod runs (or, if short, has already run).

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
            evicting.say(out, line)
    if args.dry_run:
        # with -o json|yaml stdout stays one document
        evicting.say(out if args.output is None else sys.stderr, "dry run: nothing moved")
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
    pending = plan.pending[0]
    # followed from the first eviction on, beside the moves: it may start (and, if short,
    # finish) long before the moved jobs' successors run
    follow = (
        asyncio.create_task(evicting.wait_started(kube, pending, deadline=deadline))
        if args.wait
        else None
    )
    try:
        await evicting.run_moves(moves, kube, deadline=deadline, wait=args.wait, out=out)
        if follow is not None:
            start = await follow
            after = printing.seconds(start.seen - started)
            where = (
                f"running on {start.node}"
                if start.phase == "Running"
                else f"ran on {start.node} ({start.phase})"
            )
            evicting.say(out, f"{pending.name} {where} ({after} after the first eviction)")
    finally:
        if follow is not None and not follow.done():
            follow.cancel()
        elif follow is not None and not follow.cancelled():
            follow.exception()  # retrieved, when a move failed first: no "never retrieved"
    return 0


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
