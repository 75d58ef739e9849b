"""The checkpoint catalog: what the AdmissionCheck restores, which checkpoints may go.

Pure decisions over ``Checkpoint`` objects (read from a cache by the caller), shared by the
queue bridge (retention, expiry, the AdmissionCheck's ``podSetUpdates``) and the webhook. Which
set and member a pod restores from is decided in one place, :mod:`kontinue.restore_plan`;
:func:`choose_restore` is that plan for rank 0, in the shape the AdmissionCheck reads, and
:func:`retention` never expires a set the plan of any identity still needs. Nothing here does
I/O, so every decision can be re-derived after a restart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

from kontinue import fingerprint, restore_plan
from kontinue.models import checkpoint, core
from kontinue.models import policy as policy_model

# The decision's field ``checkpoint`` shadows the module inside the class body.
_Checkpoint = checkpoint.Checkpoint

fingerprint_of = fingerprint.of
"""``fingerprint_of(pod, node=None, *, container=None) -> Fingerprint``: see :mod:`fingerprint`."""


@dataclasses.dataclass(frozen=True)
class RestoreDecision:
    """What a new incarnation of a lineage should restore from, and why.

    Exactly one of three shapes:
    - restore: ``checkpoint`` set, ``wait_for`` ``None``;
    - wait: ``wait_for`` set (restore from it once it is ``Succeeded``), ``checkpoint`` ``None``,
      ``fallback`` the older compatible good checkpoint if any;
    - cold start: both ``None``; ``reason`` says why (for the cold-start annotation and Event).
    """

    checkpoint: _Checkpoint | None
    reason: str
    wait_for: _Checkpoint | None = None
    required_node_labels: dict[str, str] = dataclasses.field(default_factory=dict)
    """Node labels the restoring pod must land on; empty when nothing is required."""
    fallback_from: list[str] = dataclasses.field(default_factory=list)
    """Names of newer checkpoints passed over (failed restores, incompatible), newest first."""
    fallback: _Checkpoint | None = None
    """Only with ``wait_for``: the checkpoint to use if the awaited one ends ``Failed``."""

    @property
    def cold_start(self) -> bool:
        return self.checkpoint is None and self.wait_for is None


newest_first = restore_plan.newest_first
of_lineage = restore_plan.of_lineage


def choose_restore(
    checkpoints: Iterable[checkpoint.Checkpoint],
    *,
    lineage: checkpoint.Lineage,
    policy: policy_model.CheckpointPolicy,
    pod_fingerprint: checkpoint.Fingerprint,
    nodes: Iterable[core.Node],
    identity: str | None = None,
) -> RestoreDecision:
    """:func:`kontinue.restore_plan.plan` (rank 0's unless ``identity`` is given), as a
    :class:`RestoreDecision` naming sets rather than members."""
    chosen = restore_plan.plan(
        checkpoints,
        owner=lineage,
        identity=identity,
        policy=policy,
        pod_fingerprint=pod_fingerprint,
        nodes=nodes,
    )
    source = chosen.source.checkpoint if chosen.source else None
    if chosen.wait_for is not None:
        return RestoreDecision(
            None,
            chosen.reason,
            wait_for=chosen.wait_for.checkpoint,
            required_node_labels=dict(chosen.node_labels),
            fallback_from=list(chosen.passed_over),
            fallback=source,
        )
    return RestoreDecision(
        source,
        chosen.reason,
        required_node_labels=dict(chosen.node_labels),
        fallback_from=list(chosen.passed_over),
    )


def retention(
    checkpoints: Iterable[checkpoint.Checkpoint],
    *,
    policy: policy_model.CheckpointPolicy,
    in_use: Collection[str] = (),
) -> list[checkpoint.Checkpoint]:
    """Checkpoints to expire (their data may be deleted), per lineage, newest first.

    - Never one some identity's restore plan needs (:func:`kontinue.restore_plan.needed`): its
      source or its awaited set, following carried-forward members to the set holding their
      state. A partial set, or the only good member of one identity, stays however many newer
      sets other identities have.
    - Otherwise keeps the ``spec.retention.keep`` newest ``Succeeded`` ones.
    - ``Failed`` ones older than the newest needed one go (a torn attempt is of no use once a
      newer good one exists); newer ``Failed`` ones stay, for diagnosis, until one does.
    - Never a non-terminal (still saving) or already ``Expired`` one, nor one named in
      ``in_use`` (a running pod's ``kontinue.dev/restore-from``).
    """
    keep = policy.spec.retention.keep
    by_lineage: dict[tuple[str, str], list[checkpoint.Checkpoint]] = {}
    for cp in checkpoints:
        # Keyed by the object's own namespace: a Checkpoint elsewhere claiming this lineage
        # forms its own group and never pushes this lineage's checkpoints out.
        key = (cp.metadata.namespace or "", cp.spec.lineage.owner_uid)
        by_lineage.setdefault(key, []).append(cp)

    doomed: list[checkpoint.Checkpoint] = []
    for group in by_lineage.values():
        ordered = newest_first(group)
        needed = restore_plan.needed(group, owner=ordered[0].spec.lineage, policy=policy)
        newest_needed = next((i for i, cp in enumerate(ordered) if cp.name in needed), None)
        succeeded = [cp for cp in ordered if cp.status.phase is checkpoint.Phase.SUCCEEDED]
        kept = {id(cp) for cp in succeeded[:keep]}
        for i, cp in enumerate(ordered):
            if cp.name in in_use or cp.name in needed:
                continue
            surplus = cp.status.phase is checkpoint.Phase.SUCCEEDED and id(cp) not in kept
            superseded = (
                cp.status.phase is checkpoint.Phase.FAILED
                and newest_needed is not None
                and i > newest_needed
            )
            if surplus or superseded:
                doomed.append(cp)
    return newest_first(doomed)


def expire_on_owner_gone(
    checkpoints: Iterable[checkpoint.Checkpoint],
    *,
    policy: policy_model.CheckpointPolicy,
    live_owner_uids: Collection[str],
    finished_owner_uids: Collection[str] = (),
) -> list[checkpoint.Checkpoint]:
    """Terminal, unexpired checkpoints whose owner is gone or finished, if the policy says so.

    ``live_owner_uids``: UIDs of owners that exist (from the caller's cache, which must be
    synced: an unsynced cache would expire everything). ``finished_owner_uids``: owners that
    completed or failed for good (Job ``Complete``/``Failed``). A checkpoint still saving is left
    for a later pass, once it is terminal, so its members' results are recorded first.
    """
    if not policy.spec.retention.expire_on_completion:
        return []
    live = set(live_owner_uids)
    finished = set(finished_owner_uids)
    return newest_first(
        cp
        for cp in checkpoints
        if cp.status.phase.terminal
        and cp.status.phase is not checkpoint.Phase.EXPIRED
        and (cp.spec.lineage.owner_uid not in live or cp.spec.lineage.owner_uid in finished)
    )
