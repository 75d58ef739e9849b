"""Pure: what ``move``, ``drain`` and ``defrag`` will do, or why they refuse.

Every decision is made here from a :class:`~kubectl_kontinue.gathering.World`; the executing
module (:mod:`kubectl_kontinue.moves`) only writes what a plan says.

**Movable** lineage: its queue opted in (the webhook's and bridge's own rule,
:func:`kontinue.optin.decide`), it has running pods, none of them is already being deleted,
its newest Checkpoint did not fail (a move would then restore from an older set, or start cold)
and none is still being taken (the pods are saving right now).

**Defrag** (a pending pod that fits on no node although the cluster has enough free GPUs in
total): for every schedulable node, the smallest set of movable lineages *running only on that
node* whose GPUs, added to the node's free GPUs, fit the pending pod, and a destination for
each of them on the other nodes (first fit, largest first, into what is free there once the
earlier moves of the plan land). The plan moving the fewest lineages wins, then the fewest
GPUs, then the node name (nodes hold a handful of pods; the search is exhaustive).
Only GPUs (``nvidia.com/gpu``) are counted: they are what fragments; cpu and memory are left
to the scheduler.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence

from kontinue import keys, moving
from kontinue.models import checkpoint, core
from kubectl_kontinue import gathering, lineages

Phase = checkpoint.Phase


class Refusal(Exception):
    """Why a plan cannot be made; the message is printed after ``refused:``."""


# --- quantities --------------------------------------------------------------------------------


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def pod_gpus(pod: core.Pod) -> int:
    """GPUs a pod holds: per container the limit (extended resources: request == limit)."""
    total = 0
    for container in pod.spec.containers:
        res = container.resources or {}
        amount = (res.get("limits") or {}).get(keys.GPU_RESOURCE)
        if amount is None:
            amount = (res.get("requests") or {}).get(keys.GPU_RESOURCE)
        total += _int(amount or 0)
    return total


def node_gpus(node: core.Node) -> int:
    status = node.status
    allocatable = (status.allocatable if status else None) or {}
    return _int(allocatable.get(keys.GPU_RESOURCE, 0))


def schedulable(node: core.Node) -> bool:
    spec = node.spec or {}
    if spec.get("unschedulable"):
        return False
    conditions = node.status.conditions if node.status else None
    ready = next((c for c in conditions or [] if c.type == "Ready"), None)
    return ready is None or ready.status == "True"


def holds_node(pod: core.Pod) -> bool:
    """Bound and not terminal: its resources are taken on its node (terminating ones too)."""
    phase = pod.status.phase if pod.status else None
    return bool(pod.spec.node_name) and phase not in ("Succeeded", "Failed")


def free_gpus(world: gathering.World) -> dict[str, int]:
    """Per node: allocatable GPUs minus those held by pods bound there."""
    free = {n.name: node_gpus(n) for n in world.nodes}
    for pod in world.pods:
        if holds_node(pod) and pod.spec.node_name in free:
            free[pod.spec.node_name] -= pod_gpus(pod)
    return free


# --- move --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PodMove:
    pod: core.Pod
    lineage: checkpoint.Lineage
    move: moving.Move

    @property
    def node(self) -> str:
        return self.pod.spec.node_name or ""


@dataclasses.dataclass(frozen=True)
class MovePlan:
    lineage: lineages.Lineage
    move: moving.Move
    pods: tuple[core.Pod, ...]
    gpus: int


def find_lineage(world: gathering.World, owner: str, namespace: str) -> lineages.Lineage:
    found = lineages.select(lineages.collect(world), owner=owner, namespace=namespace)
    # A name reused by a new Job: the lineage with running pods is the one to move.
    found.sort(key=lambda i: (not i.live_pods, i.job is None))
    if not found:
        raise Refusal(
            f"{lineages.normalize_owner(owner)} in namespace {namespace} has no pod Kontinue "
            "plumbed: its queue has not opted in (kubectl kontinue status), or it is not running"
        )
    return found[0]


def movable_reason(item: lineages.Lineage) -> str | None:
    """Why ``item`` cannot be moved, ``None`` when it can (see the module doc)."""
    queue = item.queue
    if queue is None or not queue.opted_in:
        why = queue.reason if queue is not None else "it is in no Kueue or Volcano queue"
        return f"{item.owner} is not opted in ({why}): a move would lose its work"
    newest = item.newest
    if newest is not None and newest.status.phase is Phase.FAILED:
        why = f": {newest.status.message}" if newest.status.message else ""
        return (
            f"the newest checkpoint set of {item.owner}, {newest.name}, Failed{why}; a move "
            "would resume from an older set or from zero. Look at kubectl kontinue describe "
            f"{item.owner} before evicting it"
        )
    if newest is not None and not newest.status.phase.terminal:
        return f"{item.owner} is saving right now (Checkpoint {newest.name} {newest.status.phase})"
    live = [p for p in item.pods if lineages.is_live(p)]
    if not live:
        return f"{item.owner} has no running pod to move"
    pending = [p for p in live if not p.spec.node_name]
    if pending:
        return f"{item.owner} has pods not scheduled yet ({pending[0].name})"
    return None


def plan_move(
    world: gathering.World,
    *,
    owner: str,
    namespace: str,
    to_node: str | None,
    away_from: str | None,
    by: moving.Kind = "move",
) -> MovePlan:
    item = find_lineage(world, owner, namespace)
    if (why := movable_reason(item)) is not None:
        raise Refusal(why)
    live = tuple(item.live_pods)
    nodes_now = sorted({p.spec.node_name or "" for p in live})
    if to_node is not None:
        node = world.node(to_node)
        if node is None:
            raise Refusal(f"node {to_node} does not exist")
        if not schedulable(node):
            raise Refusal(f"node {to_node} is cordoned or not Ready")
        if nodes_now == [to_node]:
            raise Refusal(f"{item.owner} already runs on {to_node}")
    if away_from is not None:
        if world.node(away_from) is None:
            raise Refusal(f"node {away_from} does not exist")
        if away_from not in nodes_now:
            raise Refusal(f"{item.owner} does not run on {away_from} (it runs on {nodes_now})")
    if to_node is None and away_from is None and len(nodes_now) == 1:
        away_from = nodes_now[0]  # "elsewhere": anywhere but where it runs now
    move = moving.Move(by=by, to_node=to_node, away_from=away_from)
    return MovePlan(item, move, live, sum(pod_gpus(p) for p in live))


# --- drain -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DrainPlan:
    node: str
    moves: tuple[PodMove, ...]
    """Opted-in pods: checkpointed, evicted, restored elsewhere."""
    evictions: tuple[core.Pod, ...]
    """Every other pod: evicted as ``kubectl drain`` evicts it."""
    ignored: tuple[tuple[core.Pod, str], ...]
    """DaemonSet and mirror pods, left alone (with the reason)."""
    warnings: tuple[str, ...] = ()


def _controller_kind(pod: core.Pod) -> str | None:
    ref = pod.metadata.controller_ref()
    return ref.kind if ref is not None else None


def plan_drain(world: gathering.World, *, node: str, force: bool) -> DrainPlan:
    """``kubectl drain`` (k8s.io/kubectl ``pkg/drain/filters.go``) plus checkpoints.

    DaemonSet pods are ignored (``--ignore-daemonsets``), mirror pods skipped, finished pods
    need nothing; a pod without a controller is refused unless ``force`` (nothing recreates it).
    An opted-in pod whose lineage cannot move safely (see :func:`movable_reason`) is evicted
    anyway — a drain must empty the node — with a warning saying what it will lose.
    """
    if world.node(node) is None:
        raise Refusal(f"node {node} does not exist")
    by_lineage = {(i.lineage.namespace, i.lineage.owner_uid): i for i in lineages.collect(world)}
    moves: list[PodMove] = []
    evictions: list[core.Pod] = []
    ignored: list[tuple[core.Pod, str]] = []
    warnings: list[str] = []
    bare: list[str] = []
    for pod in sorted(world.pods, key=lambda p: (p.namespace, p.name)):
        if pod.spec.node_name != node or not holds_node(pod):
            continue
        if pod.metadata.deletion_timestamp is not None:
            continue
        if _controller_kind(pod) == "DaemonSet":
            ignored.append((pod, "DaemonSet-managed"))
            continue
        if pod.metadata.annotation("kubernetes.io/config.mirror") is not None:
            ignored.append((pod, "mirror pod"))
            continue
        if pod.metadata.controller_ref() is None and not force:
            bare.append(f"{pod.namespace}/{pod.name}")
            continue
        lin = lineages.pod_lineage(pod)
        item = by_lineage.get((lin.namespace, lin.owner_uid)) if lin else None
        if item is not None and lin is not None:
            why = movable_reason(item)
            if why is None:
                moves.append(PodMove(pod, lin, moving.Move(by="drain", away_from=node)))
                continue
            if item.queue is not None and item.queue.opted_in:
                warnings.append(f"{pod.namespace}/{pod.name}: evicted without a move: {why}")
        evictions.append(pod)
    if bare:
        raise Refusal(
            f"cannot drain {node}: pods without a controller would be lost (nothing recreates "
            f"them): {', '.join(bare)}; use --force to delete them anyway"
        )
    return DrainPlan(node, tuple(moves), tuple(evictions), tuple(ignored), tuple(warnings))


# --- defrag ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Relocation:
    lineage: lineages.Lineage
    from_node: str
    to_node: str
    gpus: int


@dataclasses.dataclass(frozen=True)
class DefragPlan:
    pending: tuple[core.Pod, ...]
    need: int
    node: str
    """The node the moves free for the pending pod."""
    relocations: tuple[Relocation, ...]
    free_before: dict[str, int]


def pending_targets(world: gathering.World, target: str, namespace: str) -> list[core.Pod]:
    """The pending, unscheduled pods ``target`` names: ``pod/NAME`` or ``job/NAME``."""
    kind, _, name = target.rpartition("/")
    kind = (kind or "pod").lower()
    pods = [p for p in world.pods if p.namespace == namespace]
    if kind in ("pod", "pods", "po"):
        chosen = [p for p in pods if p.name == name]
        if not chosen:
            raise Refusal(f"pod {name} not found in namespace {namespace}")
    elif kind in ("job", "jobs"):
        chosen = [p for p in pods if p.metadata.label(keys.JOB_NAME_LABEL) == name]
        if not chosen:
            raise Refusal(f"job {name} has no pods in namespace {namespace} (suspended?)")
    else:
        raise Refusal(f"--for takes pod/NAME or job/NAME, not {target}")
    waiting = [
        p
        for p in chosen
        if not p.spec.node_name
        and (p.status.phase if p.status else "Pending") == "Pending"
        and p.metadata.deletion_timestamp is None
    ]
    if not waiting:
        raise Refusal(f"{target} has no pending pod: every pod of it is scheduled")
    return waiting


def _subsets(items: Sequence[lineages.Lineage]) -> Iterable[tuple[lineages.Lineage, ...]]:
    for size in range(1, len(items) + 1):
        yield from itertools.combinations(items, size)


def _place(
    chosen: Sequence[tuple[lineages.Lineage, int]], free: dict[str, int], *, exclude: str
) -> list[str] | None:
    """Destinations for ``chosen`` (first fit, largest first) outside ``exclude``, or None."""
    room = {n: f for n, f in free.items() if n != exclude}
    placed: dict[int, str] = {}
    order = sorted(range(len(chosen)), key=lambda i: (-chosen[i][1], chosen[i][0].owner))
    for i in order:
        gpus = chosen[i][1]
        node = next((n for n in sorted(room, key=lambda n: (-room[n], n)) if room[n] >= gpus), None)
        if node is None:
            return None
        room[node] -= gpus
        placed[i] = node
    return [placed[i] for i in range(len(chosen))]


def plan_defrag(world: gathering.World, *, target: str, namespace: str) -> DefragPlan:
    pending = pending_targets(world, target, namespace)
    need = max(pod_gpus(p) for p in pending)
    if need == 0:
        raise Refusal(f"{target} asks for no GPUs: GPUs are not what keeps it pending")
    free = free_gpus(world)
    open_nodes = {n.name for n in world.nodes if schedulable(n)}
    free = {n: f for n, f in free.items() if n in open_nodes}
    fits = sorted(n for n, f in free.items() if f >= need)
    if fits:
        raise Refusal(
            f"{target} already fits on {', '.join(fits)} ({need} GPUs free there): nothing to "
            "move; it is pending for another reason (kubectl describe pod)"
        )
    total = sum(free.values())
    if total < need:
        raise Refusal(
            f"{target} needs {need} GPUs and the cluster has {total} free in total: this is a "
            "shortage, not fragmentation; moving pods cannot help"
        )
    movable = [
        i
        for i in lineages.collect(world)
        if movable_reason(i) is None
        and len({p.spec.node_name for p in i.live_pods}) == 1
        and sum(pod_gpus(p) for p in i.live_pods) > 0
    ]
    best: tuple[tuple[int, int, str], DefragPlan] | None = None
    for node in sorted(free):
        here = [i for i in movable if i.live_pods[0].spec.node_name == node]
        for chosen in _subsets(here):
            gpus = [sum(pod_gpus(p) for p in i.live_pods) for i in chosen]
            if free[node] + sum(gpus) < need:
                continue
            destinations = _place(list(zip(chosen, gpus, strict=True)), free, exclude=node)
            if destinations is None:
                continue
            key = (len(chosen), sum(gpus), node)
            if best is None or key < best[0]:
                relocations = tuple(
                    Relocation(i, node, dest, g)
                    for i, dest, g in zip(chosen, destinations, gpus, strict=True)
                )
                best = (key, DefragPlan(tuple(pending), need, node, relocations, dict(free)))
    if best is None:
        raise Refusal(
            f"no set of movable pods frees a node for {target} ({need} GPUs; free per node: "
            f"{', '.join(f'{n} {f}' for n, f in sorted(free.items()))}): the pods in the way are "
            "not opted in, not checkpointable right now, or have nowhere else to go"
        )
    return best[1]
