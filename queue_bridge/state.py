"""What the bridge's decisions may read: a read-only, in-memory view of the cluster.

:class:`State` is to the bridge what :class:`webhook.state.State` is to the webhook: the pure
functions of :mod:`queue_bridge.deciding` take it, :class:`queue_bridge.caches.Caches` answers
it from the watch caches in production, and a test can answer it from plain objects. Every
method is a point lookup or an index walk (O(items it returns)); none calls the API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kontinue import optin
from kontinue.models import checkpoint as checkpoint_model
from kontinue.models import core, kueue


class State(optin.Queues, Protocol):
    """The opt-in lookups (:class:`kontinue.optin.Queues`) and the objects the bridge reconciles."""

    def checkpoint(self, namespace: str, name: str) -> checkpoint_model.Checkpoint | None: ...

    def checkpoints_of_pod(self, uid: str) -> Sequence[checkpoint_model.Checkpoint]:
        """Every Checkpoint with a member of pod UID ``uid``, any phase."""
        ...

    def checkpoints_of_owner(self, uid: str) -> Sequence[checkpoint_model.Checkpoint]:
        """Every Checkpoint whose lineage's owner UID is ``uid``, any phase."""
        ...

    def workloads_of_owner(self, uid: str) -> Sequence[kueue.Workload]:
        """The Workloads whose controller owner reference has UID ``uid``."""
        ...

    def lineage_pods(self, owner: checkpoint_model.Lineage) -> Sequence[core.Pod]:
        """The pods whose ``kontinue.dev/lineage`` annotation names ``owner``."""
        ...

    def job(self, namespace: str, name: str) -> core.Job | None: ...

    @property
    def jobs_synced(self) -> bool:
        """Whether the Jobs are known (a Job missing from an unsynced cache may exist)."""
        ...
