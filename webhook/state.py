"""What admission decisions may read: an in-memory view of the cluster.

Admission never calls storage or anything slow (docs/webhook.md); every decision comes from
in-memory caches, but for one bounded live read of a plumbed pod's lineage's Checkpoints at its
CREATE (webhook/freshness.py, whose ``Fresh`` view is a :class:`State` too). :class:`State` is
the read-only interface the pure modules (:mod:`kontinue.optin`, :mod:`webhook.plumbing`,
:mod:`webhook.validation`) take, so they can be tested with a :class:`Snapshot` built from plain
objects, and served from the watch caches in :mod:`webhook.caches` in production. Both answer
the same questions the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Protocol

from kontinue import optin
from kontinue.models import checkpoint as checkpoint_model
from kontinue.models import core, kueue, volcano
from kontinue.models import policy as policy_model


class State(optin.Queues, Protocol):
    """Point lookups the admission path needs; every method is O(1) or O(items it returns).

    The opt-in lookups (queues, policies) are :class:`kontinue.optin.Queues`'.
    """

    def checkpoint(self, namespace: str, name: str) -> checkpoint_model.Checkpoint | None: ...

    def checkpoints_of(
        self, lineage: checkpoint_model.Lineage
    ) -> Sequence[checkpoint_model.Checkpoint]:
        """Every Checkpoint *in the lineage's namespace* whose ``spec.lineage`` is ``lineage``
        (same owner UID), any phase. A Checkpoint elsewhere that names this lineage is never
        returned: lookups are keyed by the object's own namespace (issue 11 item 2)."""
        ...

    def nodes(self) -> Sequence[core.Node]: ...

    def claim_exists(self, namespace: str, name: str) -> bool | None:
        """Whether PersistentVolumeClaim ``name`` exists in ``namespace``: ``None`` while that
        is not known (the claims are not synced), and admission then plumbs as if it did
        (webhook/claims.py)."""
        ...


def _key(namespace: str, name: str) -> tuple[str, str]:
    return (namespace, name)


@dataclasses.dataclass
class Snapshot:
    """A :class:`State` over plain objects: tests, the benchmark, and a frozen copy of caches."""

    cluster_queues: dict[str, kueue.ClusterQueue] = dataclasses.field(default_factory=dict)
    local_queues: dict[tuple[str, str], kueue.LocalQueue] = dataclasses.field(default_factory=dict)
    volcano_queues: dict[str, volcano.Queue] = dataclasses.field(default_factory=dict)
    pod_groups: dict[tuple[str, str], volcano.PodGroup] = dataclasses.field(default_factory=dict)
    policies: dict[str, policy_model.CheckpointPolicy] = dataclasses.field(default_factory=dict)
    all_checkpoints: dict[tuple[str, str], checkpoint_model.Checkpoint] = dataclasses.field(
        default_factory=dict
    )
    node_list: list[core.Node] = dataclasses.field(default_factory=list)
    claims: frozenset[tuple[str, str]] | None = None
    """``(namespace, name)`` of every PersistentVolumeClaim; ``None``: not known."""

    @classmethod
    def of(
        cls,
        *,
        cluster_queues: Iterable[kueue.ClusterQueue] = (),
        local_queues: Iterable[kueue.LocalQueue] = (),
        volcano_queues: Iterable[volcano.Queue] = (),
        pod_groups: Iterable[volcano.PodGroup] = (),
        policies: Iterable[policy_model.CheckpointPolicy] = (),
        checkpoints: Iterable[checkpoint_model.Checkpoint] = (),
        nodes: Iterable[core.Node] = (),
        claims: Iterable[tuple[str, str]] | None = None,
    ) -> Snapshot:
        return cls(
            cluster_queues={q.name: q for q in cluster_queues},
            local_queues={_key(q.namespace, q.name): q for q in local_queues},
            volcano_queues={q.name: q for q in volcano_queues},
            pod_groups={_key(g.namespace, g.name): g for g in pod_groups},
            policies={p.name: p for p in policies},
            all_checkpoints={_key(c.metadata.namespace or "", c.name): c for c in checkpoints},
            node_list=list(nodes),
            claims=frozenset(claims) if claims is not None else None,
        )

    def cluster_queue(self, name: str) -> kueue.ClusterQueue | None:
        return self.cluster_queues.get(name)

    def local_queue(self, namespace: str, name: str) -> kueue.LocalQueue | None:
        return self.local_queues.get(_key(namespace, name))

    def volcano_queue(self, name: str) -> volcano.Queue | None:
        return self.volcano_queues.get(name)

    def pod_group(self, namespace: str, name: str) -> volcano.PodGroup | None:
        return self.pod_groups.get(_key(namespace, name))

    def policy(self, name: str) -> policy_model.CheckpointPolicy | None:
        return self.policies.get(name)

    def checkpoint(self, namespace: str, name: str) -> checkpoint_model.Checkpoint | None:
        return self.all_checkpoints.get(_key(namespace, name))

    def checkpoints_of(
        self, lineage: checkpoint_model.Lineage
    ) -> Sequence[checkpoint_model.Checkpoint]:
        # Cheap string comparison first; the model comparison only for the lineage's own.
        uid, namespace = lineage.owner_uid, lineage.namespace
        return [
            c
            for c in self.all_checkpoints.values()
            if c.spec.lineage.owner_uid == uid
            and c.metadata.namespace == namespace
            and c.spec.lineage.namespace == namespace
            and c.spec.lineage == lineage
        ]

    def nodes(self) -> Sequence[core.Node]:
        return self.node_list

    def claim_exists(self, namespace: str, name: str) -> bool | None:
        return None if self.claims is None else (namespace, name) in self.claims
