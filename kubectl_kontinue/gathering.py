"""Read the cluster once into a :class:`World`: the I/O half of every read-only command.

One list per resource (the namespace, or every namespace for ``-A``), validated into the shared
models at this edge; the pure modules (:mod:`~kubectl_kontinue.lineages`,
:mod:`~kubectl_kontinue.story`, :mod:`~kubectl_kontinue.health`, the move planners) decide from
it. A queue system that is not installed (its CRD answers 404) is simply empty; so is a resource
the user may not list, which is recorded in :attr:`World.unreadable` so a command can say what
it could not see rather than print a wrong "nothing".

``World`` answers the point lookups :class:`kontinue.optin.Queues` asks for, so opt-in is decided
exactly as the webhook and the bridge decide it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from kontinue.kube import api as kube_api
from kontinue.kube import errors, resources
from kontinue.models import base, checkpoint, core, kueue, volcano
from kontinue.models import errors as model_errors
from kontinue.models import policy as policy_model

logger = logging.getLogger("kontinue.cli")

Obj = dict[str, Any]
M = TypeVar("M")

PAGE = 500


@dataclasses.dataclass
class World:
    """What the commands read, as of one moment. Lists are empty when not gathered."""

    namespace: str | None
    """The namespace read, ``None`` for all namespaces."""
    pods: list[core.Pod] = dataclasses.field(default_factory=list)
    jobs: list[core.Job] = dataclasses.field(default_factory=list)
    checkpoints: list[checkpoint.Checkpoint] = dataclasses.field(default_factory=list)
    events: list[Obj] = dataclasses.field(default_factory=list)
    nodes: list[core.Node] = dataclasses.field(default_factory=list)
    cluster_queues: list[kueue.ClusterQueue] = dataclasses.field(default_factory=list)
    local_queues: list[kueue.LocalQueue] = dataclasses.field(default_factory=list)
    volcano_queues: list[volcano.Queue] = dataclasses.field(default_factory=list)
    pod_groups: list[volcano.PodGroup] = dataclasses.field(default_factory=list)
    policies: list[policy_model.CheckpointPolicy] = dataclasses.field(default_factory=list)
    unreadable: dict[str, str] = dataclasses.field(default_factory=dict)
    """Resource -> why it could not be listed (403, ...)."""

    # --- kontinue.optin.Queues ------------------------------------------------------------------
    def cluster_queue(self, name: str) -> kueue.ClusterQueue | None:
        return next((q for q in self.cluster_queues if q.name == name), None)

    def local_queue(self, namespace: str, name: str) -> kueue.LocalQueue | None:
        return next(
            (q for q in self.local_queues if q.name == name and q.namespace == namespace), None
        )

    def volcano_queue(self, name: str) -> volcano.Queue | None:
        return next((q for q in self.volcano_queues if q.name == name), None)

    def pod_group(self, namespace: str, name: str) -> volcano.PodGroup | None:
        return next(
            (g for g in self.pod_groups if g.name == name and g.namespace == namespace), None
        )

    def policy(self, name: str) -> policy_model.CheckpointPolicy | None:
        return next((p for p in self.policies if p.name == name), None)

    # --- lookups the commands share -------------------------------------------------------------
    def job(self, namespace: str, name: str) -> core.Job | None:
        return next((j for j in self.jobs if j.name == name and j.namespace == namespace), None)

    def node(self, name: str) -> core.Node | None:
        return next((n for n in self.nodes if n.name == name), None)


# What each command needs; ``gather`` lists only these.
PODS = "pods"
JOBS = "jobs"
CHECKPOINTS = "checkpoints"
EVENTS = "events"
NODES = "nodes"
QUEUES = "queues"  # ClusterQueues, LocalQueues, Volcano Queues and PodGroups, policies

_MODELS: dict[str, tuple[resources.Resource, Callable[[Any], Any], str]] = {
    "pods": (resources.PODS, lambda d: base.parse(core.Pod, d), "pods"),
    "jobs": (resources.JOBS, lambda d: base.parse(core.Job, d), "jobs"),
    "checkpoints": (resources.CHECKPOINTS, checkpoint.load, "checkpoints"),
    "nodes": (resources.NODES, lambda d: base.parse(core.Node, d), "nodes"),
    "cluster_queues": (
        resources.CLUSTER_QUEUES,
        lambda d: base.parse(kueue.ClusterQueue, d),
        "cluster_queues",
    ),
    "local_queues": (
        resources.LOCAL_QUEUES,
        lambda d: base.parse(kueue.LocalQueue, d),
        "local_queues",
    ),
    "volcano_queues": (
        resources.VOLCANO_QUEUES,
        lambda d: base.parse(volcano.Queue, d),
        "volcano_queues",
    ),
    "pod_groups": (
        resources.PODGROUPS,
        lambda d: base.parse(volcano.PodGroup, d),
        "pod_groups",
    ),
    "policies": (resources.CHECKPOINT_POLICIES, policy_model.load, "policies"),
}


async def list_all(
    kube: kube_api.Api,
    resource: resources.Resource,
    *,
    namespace: str | None = None,
    field_selector: str | None = None,
) -> list[Obj]:
    """Every item of a (possibly paged) list."""
    items: list[Obj] = []
    token: str | None = None
    while True:
        page = await kube.list(
            resource,
            namespace=namespace,
            field_selector=field_selector,
            limit=PAGE,
            continue_=token,
        )
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


async def _fill(world: World, kube: kube_api.Api, attr: str, *, namespace: str | None) -> None:
    resource, load, _ = _MODELS[attr]
    scoped = namespace if resource.namespaced else None
    try:
        raw = await list_all(kube, resource, namespace=scoped)
    except errors.NotFound:
        return  # the CRD is not installed: that queue system is absent
    except errors.Forbidden as exc:
        world.unreadable[str(resource)] = str(exc)
        return
    parsed = []
    for item in raw:
        try:
            parsed.append(load(item))
        except model_errors.InvalidObject as exc:
            name = (item.get("metadata") or {}).get("name")
            logger.warning("skipping %s %s: %s", resource.kind, name, exc)
    setattr(world, attr, parsed)


async def gather(kube: kube_api.Api, *, namespace: str | None, what: Collection[str]) -> World:
    """List what ``what`` names (see the constants above) in ``namespace`` (``None``: all)."""
    world = World(namespace=namespace)
    attrs: list[str] = []
    for need in what:
        if need == QUEUES:
            attrs += ["cluster_queues", "local_queues", "volcano_queues", "pod_groups", "policies"]
        elif need == EVENTS:
            continue
        else:
            attrs.append(need)
    for attr in attrs:
        # LocalQueues and PodGroups decide opt-in of any namespace we show: read them where
        # the pods are; cluster-scoped ones are always read whole.
        await _fill(world, kube, attr, namespace=namespace)
    if EVENTS in what:
        try:
            world.events = await list_all(kube, resources.EVENTS, namespace=namespace)
        except errors.Forbidden as exc:
            world.unreadable[str(resources.EVENTS)] = str(exc)
    return world
