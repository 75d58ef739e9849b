"""The one restore plan: for a pod being created, which Checkpoint set and which member it
restores from, what it waits for, where it must run, or why it starts cold.

Pure: Checkpoints (from a cache), the pod's member identity (kontinue/identity.py), its policy,
its fingerprint and the nodes in; a :class:`Plan` out. The webhook renders the plan into JSON
Patch ops (webhook/plumbing.py renders, never decides), the AdmissionCheck steers placement by
it, and retention (kontinue/catalog.py) keeps every set some identity's plan still needs, so the
three can never disagree.

Rules, per identity (docs/api.md, "Restore"):

- Only the lineage's own checkpoints (same namespace and owner UID), never ``Expired`` ones,
  newest first by trigger time, then creation time (the bridge's ``kontinue.dev/created-at``, to
  the microsecond, else ``creationTimestamp``), then name.
- Only a set holding a member of the pod's identity is considered: a pod restores *its own*
  member, never another identity's directory (a partial set, from one pod preempted while its
  siblings ran on, is used only by the identity it covers). Under ``shared`` the identity looked
  for is rank 0 (the lowest identity of the lineage), for every pod.
- A member ``CarriedForward`` (its pod never started its main container) holds the state its
  pod restored from: the plan looks through to older sets for that identity.
- ``coupled`` (default): the member must be ``Saved`` *and* its set ``Succeeded``: all members of
  one eviction resume from one cut or none. ``independent`` and ``shared``: the member must be
  ``Saved``, whatever became of its siblings.
- The newest set holding the identity still being saved is *waited for*: the restore
  init-container waits for the member's directory and, if it fails, uses ``fallback`` (what the
  plan would pick without the awaited set). Under ``coupled`` a member saved in a set still
  saving is also waited for: the set's verdict is not known yet.
- *Unknown but verifiable*: a member ``Unreported`` (no final status ever came: a lost kubelet,
  a partitioned node, a pod removed before it reported) may have saved. Met before any usable
  set, it is offered like an awaited one with no wait (:attr:`Plan.verify_only`): the restore
  init-container uses its directory only if the directory is complete and verifies (it was
  written data first, manifest last: kontinue/checkpoint_format.py), else the fallback. Not
  under ``coupled`` when the set has other members: a pod can verify only its own directory,
  and its siblings would restore from the older set (half and half).
- A set whose ``status.failedRestores`` reached ``restore.attemptsBeforeFallback`` is passed
  over; so is one incompatible with the pod per ``spec.compatibility`` (GPU product and CUDA
  driver major are node properties: usable when a Ready, schedulable node carries both, and
  ``node_labels`` steers the pod there).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping

from kontinue import compatibility, keys, lineage
from kontinue import identity as identity_module
from kontinue.models import base, checkpoint, core
from kontinue.models import policy as policy_model

Consistency = policy_model.Consistency
# Fields named ``checkpoint`` shadow the module inside class bodies.
_Checkpoint = checkpoint.Checkpoint
_Member = checkpoint.Member
_EPOCH = datetime.datetime.min.replace(tzinfo=datetime.UTC)


@dataclasses.dataclass(frozen=True)
class Source:
    """One member of one set, and the absolute directory it saved into."""

    checkpoint: _Checkpoint
    member: _Member
    path: str

    @property
    def name(self) -> str:
        return self.checkpoint.name


@dataclasses.dataclass(frozen=True)
class Plan:
    """The restore plan of one pod. Exactly one of three shapes:

    - restore: ``source`` set, ``wait_for`` ``None``;
    - wait: ``wait_for`` set (restore from it once saved), ``source`` the fallback or ``None``;
    - cold start: both ``None``; ``reason`` says why.
    """

    identity: str
    """The identity whose member is restored (the pod's own; rank 0's under ``shared``)."""
    rule: policy_model.Consistency
    reason: str
    source: Source | None = None
    wait_for: Source | None = None
    node_labels: dict[str, str] = dataclasses.field(default_factory=dict)
    passed_over: list[str] = dataclasses.field(default_factory=list)
    """Names of newer sets passed over (failed restores, incompatible, failed), newest first."""
    verify_only: bool = False
    """``wait_for`` is an ``Unreported`` member: its directory is final (nothing is writing it
    any more), so the restore checks it once instead of waiting for it."""

    @property
    def cold_start(self) -> bool:
        return self.source is None and self.wait_for is None

    @property
    def await_verdict(self) -> bool:
        """Whether the pod must wait, gated, for the bridge's verdict on the awaited set.

        Under ``coupled`` a member's own directory proves nothing about its siblings: member 0
        may be complete while member 1 was SIGKILLed mid-save, and a restore that trusted its
        own directory would resume half the workload from a set the other half cannot use
        (issue 11, "half-and-half"). So when the awaited set has other members, the pod is
        created with the ``kontinue.dev/set-verdict`` scheduling gate and the bridge, once the
        set is terminal, names the directory to use (:func:`verdict`) before ungating it.
        """
        awaited = self.wait_for
        if awaited is None or self.rule is not Consistency.COUPLED:
            return False
        return _has_siblings(awaited.checkpoint, awaited.member)

    @property
    def checkpoint_name(self) -> str:
        """The set the pod's ``kontinue.dev/restore-from`` names: the awaited one, else the
        source; ``""`` for a cold start."""
        chosen = self.wait_for or self.source
        return chosen.name if chosen else ""


# --- ordering ---------------------------------------------------------------------------------


def _aware(value: datetime.datetime) -> datetime.datetime:
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)


def created_at(cp: checkpoint.Checkpoint) -> datetime.datetime:
    """When ``cp`` was created: the bridge's ``kontinue.dev/created-at`` (microseconds), else
    ``creationTimestamp`` (whole seconds), else the epoch."""
    text = cp.metadata.annotation(keys.CREATED_AT_ANNOTATION)
    if text:
        try:
            return _aware(base.parse_time(text))
        except ValueError:
            pass  # written by hand: fall back to the apiserver's time
    return _aware(cp.metadata.creation_timestamp or _EPOCH)


def newest_first(checkpoints: Iterable[checkpoint.Checkpoint]) -> list[checkpoint.Checkpoint]:
    """Sorted by trigger time, then creation time (:func:`created_at`), then name, newest first.

    Trigger times come from conditions, which Kubernetes keeps to the second, and so does
    ``creationTimestamp``: a pod evicted alone (a partial set) and its whole workload evicted
    within the same second would otherwise be ordered by their names, at random, and the
    replacement of the pod evicted alone could restore the older partial set instead of
    waiting for the newer one (tests/unit/kontinue/test_restore_plan.py).
    """

    def key(cp: checkpoint.Checkpoint) -> tuple[datetime.datetime, datetime.datetime, str]:
        return (_aware(cp.spec.trigger.time), created_at(cp), cp.name)

    return sorted(checkpoints, key=key, reverse=True)


def of_lineage(
    checkpoints: Iterable[checkpoint.Checkpoint], owner: checkpoint.Lineage
) -> list[checkpoint.Checkpoint]:
    """The lineage's own checkpoints (same owner UID, and in the lineage's namespace: the
    object's own, not only the one its spec claims — issue 11 item 2), newest first."""
    return newest_first(
        cp
        for cp in checkpoints
        if cp.spec.lineage.owner_uid == owner.owner_uid
        and cp.metadata.namespace == owner.namespace
        and cp.spec.lineage.namespace == owner.namespace
    )


# --- members ----------------------------------------------------------------------------------


def result_of(
    cp: checkpoint.Checkpoint, member: checkpoint.Member
) -> checkpoint.MemberResult | None:
    """The member's result: by pod UID (a Volcano pod reuses its predecessor's name), by name
    only in results recorded without a UID (kontinue/models/checkpoint.py)."""
    return checkpoint.result_of(cp.status.members, member)


def state_of(cp: checkpoint.Checkpoint, member: checkpoint.Member) -> checkpoint.MemberState:
    """The member's recorded state; a ``Succeeded`` set without per-member results (written by
    hand, or before results were recorded) vouches for all of its members."""
    result = result_of(cp, member)
    if result is not None:
        return result.state
    if cp.status.phase is checkpoint.Phase.SUCCEEDED:
        return checkpoint.MemberState.SAVED
    return checkpoint.MemberState.PENDING


def member_of(cp: checkpoint.Checkpoint, wanted: str) -> checkpoint.Member | None:
    """The set's member of identity ``wanted``. Pods of a NonIndexed Job all share one identity;
    of several, a saved one is preferred, then the first by pod name (deterministic)."""
    found = [m for m in cp.spec.members if identity_module.of_member(m) == wanted]
    found.sort(
        key=lambda m: (state_of(cp, m) is not checkpoint.MemberState.SAVED, m.pod_name, m.pod_uid)
    )
    return found[0] if found else None


def identities(checkpoints: Iterable[checkpoint.Checkpoint]) -> list[str]:
    """Every identity any of ``checkpoints`` records, in natural order (rank 0 first)."""
    seen = {identity_module.of_member(m) for cp in checkpoints for m in cp.spec.members}
    return sorted(seen, key=identity_module.sort_key)


def member_dir(
    cp: checkpoint.Checkpoint, member: checkpoint.Member, *, policy: policy_model.CheckpointPolicy
) -> str:
    """Absolute directory of one member: its recorded ``status.members[].path``, else the layout
    of :func:`kontinue.lineage.checkpoint_dir`; relative paths are under the policy's mount."""
    result = result_of(cp, member)
    path = (result.path if result else None) or lineage.checkpoint_dir(
        policy, cp.spec.lineage, member.pod_uid
    )
    if path.startswith("/"):
        return path
    return f"{policy.spec.storage.mount_path.rstrip('/')}/{path}"


# --- the plan ---------------------------------------------------------------------------------


def _unusable(
    cp: checkpoint.Checkpoint, state: checkpoint.MemberState, rule: Consistency, wanted: str
) -> str | None:
    """Why a terminal member (or set) cannot be restored under ``rule``, else ``None``."""
    if state is not checkpoint.MemberState.SAVED:
        return f"{wanted} {state.value}"
    if rule is Consistency.COUPLED and cp.status.phase is not checkpoint.Phase.SUCCEEDED:
        return f"set {cp.status.phase.value} (coupled: every member must save)"
    return None


def _outside(
    path: str, owner: checkpoint.Lineage, policy: policy_model.CheckpointPolicy
) -> tuple[str, dict[str, str]] | None:
    if lineage.contains(path, owner, mount_path=policy.spec.storage.mount_path):
        return None
    return f"records a directory outside lineage {owner.key}: {path}", {}


def _when(cp: checkpoint.Checkpoint) -> str:
    return _aware(cp.spec.trigger.time).astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _by(cp: checkpoint.Checkpoint) -> str:
    return f"{cp.spec.trigger.source.value}/{cp.spec.trigger.reason}"


def _rule(rule: Consistency, wanted: str) -> str:
    return f"{rule.value}: member {wanted}: "


def _has_siblings(cp: checkpoint.Checkpoint, member: checkpoint.Member) -> bool:
    return any(m.pod_uid != member.pod_uid for m in cp.spec.members)


def _awaiting(source: Source, verify_only: bool) -> str:
    if verify_only:
        return (
            f"restore from {source.name} (member Unreported: no final status came) if its "
            "directory is complete and verifies"
        )
    phase = source.checkpoint.status.phase.value
    return f"wait for {source.name} ({phase}) to finish saving, then restore from it"


def _passed_over(notes: list[str]) -> str:
    return "; passed over " + "; ".join(notes) if notes else ""


def plan(
    checkpoints: Iterable[checkpoint.Checkpoint],
    *,
    owner: checkpoint.Lineage,
    identity: str | None,
    policy: policy_model.CheckpointPolicy,
    pod_fingerprint: checkpoint.Fingerprint,
    nodes: Iterable[core.Node] | None,
    pinned: Mapping[str, str] | None = None,
) -> Plan:
    """The restore plan of a pod of ``owner`` with member ``identity`` (rules: module doc).

    ``pinned``: the pod's ``nodeSelector``; a set needing another value of a label it pins is
    passed over, as is a set recording a member directory outside the lineage's own directory
    (the validating webhook would deny a pod naming it).

    ``identity`` ``None``: rank 0's plan (a pod template with no place yet: the AdmissionCheck).
    ``nodes`` ``None``: skip the node check (retention plans for no particular pod).
    """
    own = [
        cp
        for cp in of_lineage(checkpoints, owner)
        if cp.status.phase is not checkpoint.Phase.EXPIRED
    ]
    rule = policy.spec.restore.consistency
    node_list = list(nodes) if nodes is not None else None
    attempts = policy.spec.restore.attempts_before_fallback
    everyone = identities(own)
    wanted = identity if identity is not None else (everyone[0] if everyone else "")
    if rule is Consistency.SHARED and everyone:
        wanted = everyone[0]
    wanted = wanted or identity_module.SINGLE
    if not own:
        return Plan(wanted, rule, f"no checkpoint of {owner.key} yet")

    skipped: list[str] = []
    notes: list[str] = []
    wait_for: Source | None = None
    wait_labels: dict[str, str] = {}
    verify_only = False
    covering_seen = False

    def why_not(
        cp: checkpoint.Checkpoint, path: str, *, retried: bool, also: dict[str, str] | None = None
    ) -> tuple[str | None, dict[str, str]]:
        """Why ``cp`` is passed over (``retried``: count its failed restores too), else
        ``(None, node labels to require)``."""
        if retried and cp.status.failed_restores >= attempts:
            return f"{cp.status.failed_restores} failed restores", {}
        return _outside(path, owner, policy) or compatibility.mismatch(
            cp,
            policy=policy,
            pod_fingerprint=pod_fingerprint,
            nodes=node_list,
            also=also,
            pinned=pinned,
        )

    for cp in own:
        member = member_of(cp, wanted)
        if member is None:
            continue  # a partial set of other identities
        state = state_of(cp, member)
        first = not covering_seen
        covering_seen = True
        if state is checkpoint.MemberState.CARRIED_FORWARD:
            notes.append(f"{cp.name}: {wanted} carried forward (never ran)")
            continue
        awaiting = not state.terminal or (
            rule is Consistency.COUPLED
            and state is checkpoint.MemberState.SAVED
            and not cp.status.phase.terminal
        )
        if awaiting and not cp.status.phase.terminal:
            if not first:
                continue  # an older set still saving while a newer one is known: not awaited
            path = member_dir(cp, member, policy=policy)
            why, labels = why_not(cp, path, retried=False)
            if why is None:
                wait_for, wait_labels = Source(cp, member, path), labels
            else:
                skipped.append(cp.name)
                notes.append(f"{cp.name}: {why}")
            continue
        if state is checkpoint.MemberState.UNREPORTED and wait_for is None:
            if rule is Consistency.COUPLED and _has_siblings(cp, member):
                notes.append(f"{cp.name}: {wanted} unreported (coupled: siblings cannot verify)")
                continue
            path = member_dir(cp, member, policy=policy)
            why, labels = why_not(cp, path, retried=True)
            if why is None:
                wait_for, wait_labels, verify_only = Source(cp, member, path), labels, True
            else:
                skipped.append(cp.name)
                notes.append(f"{cp.name}: {why}")
            continue
        if _unusable(cp, state, rule, wanted) is not None:
            continue  # a failed member, or a failed set under coupled: never restored from
        path = member_dir(cp, member, policy=policy)
        why, labels = why_not(cp, path, retried=True, also=wait_labels)
        if why is not None:
            skipped.append(cp.name)
            notes.append(f"{cp.name}: {why}")
            continue
        source = Source(cp, member, path)
        if wait_for is not None:
            return Plan(
                wanted,
                rule,
                f"{_rule(rule, wanted)}{_awaiting(wait_for, verify_only)}; if it fails, from "
                f"{cp.name}" + _passed_over(notes),
                source=source,
                wait_for=wait_for,
                node_labels=labels,
                passed_over=skipped,
                verify_only=verify_only,
            )
        reason = f"{_rule(rule, wanted)}restore from {cp.name} (triggered {_when(cp)} by {_by(cp)})"
        return Plan(
            wanted,
            rule,
            reason + _passed_over(notes),
            source=source,
            node_labels=labels,
            passed_over=skipped,
        )

    if wait_for is not None:
        return Plan(
            wanted,
            rule,
            f"{_rule(rule, wanted)}{_awaiting(wait_for, verify_only)}; no older checkpoint to "
            "fall back to" + _passed_over(notes),
            wait_for=wait_for,
            node_labels=wait_labels,
            passed_over=skipped,
            verify_only=verify_only,
        )
    if not covering_seen:
        return Plan(wanted, rule, f"no checkpoint of {owner.key} holds member {wanted}")
    if not notes:
        return Plan(wanted, rule, f"no Succeeded checkpoint of {owner.key}")
    return Plan(wanted, rule, "no usable checkpoint: " + "; ".join(notes), passed_over=skipped)


def needed(
    checkpoints: Iterable[checkpoint.Checkpoint],
    *,
    owner: checkpoint.Lineage,
    policy: policy_model.CheckpointPolicy,
) -> dict[str, list[str]]:
    """Checkpoint name -> identities whose plan restores from (or waits for) it now.

    What retention must never expire: for every identity the lineage's sets record, its source
    and its awaited set, following carried-forward members to the older set that holds the
    identity's state. Compatibility with a particular pod is not judged (no pod is being placed).
    """
    cps = list(checkpoints)
    live = [cp for cp in cps if cp.status.phase is not checkpoint.Phase.EXPIRED]
    found: dict[str, list[str]] = {}
    for wanted in identities(live):
        chosen = plan(
            cps,
            owner=owner,
            identity=wanted,
            policy=policy,
            pod_fingerprint=checkpoint.Fingerprint(),
            nodes=None,
        )
        for source in (chosen.source, chosen.wait_for):
            if source is not None:
                names = found.setdefault(source.name, [])
                if wanted not in names:
                    names.append(wanted)
    return found


NOT_RESTORABLE = "not-restorable"
"""The directory name the bridge hands a gated pod when the awaited set is not usable for it:
no member is ever saved under it (members save under their pod UID), so the restore program
falls back at once to ``KONTINUE_RESTORE_SOURCE`` (or starts cold when there is none)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The bridge's answer for a pod gated on an awaited set (see :attr:`Plan.await_verdict`).

    ``ready`` ``False``: the set is still saving; keep the gate. Otherwise ``member`` is the
    directory name to wait for (the awaited member's, or :data:`NOT_RESTORABLE`) and
    ``wait_seconds`` how long the restore may wait for it.
    """

    ready: bool
    reason: str
    member: str = NOT_RESTORABLE
    wait_seconds: int = 0


def verdict(
    awaited: checkpoint.Checkpoint | None,
    *,
    identity: str,
    policy: policy_model.CheckpointPolicy,
) -> Verdict:
    """Whether a gated pod of ``identity`` restores from the set it awaited, by the plan's rules:
    the set is terminal, holds the identity, and (``coupled``) ``Succeeded`` with that member
    saved. A set that is gone or ``Expired`` is not restorable."""
    if awaited is None or awaited.status.phase is checkpoint.Phase.EXPIRED:
        return Verdict(True, "the awaited set is gone: use the fallback")
    if not awaited.status.phase.terminal:
        return Verdict(False, f"{awaited.name} is still {awaited.status.phase.value}")
    rule = policy.spec.restore.consistency
    wanted = identity
    if rule is Consistency.SHARED:
        wanted = (identities([awaited]) or [identity])[0]
    member = member_of(awaited, wanted)
    if member is None:
        return Verdict(True, f"{awaited.name} holds no member {wanted}: use the fallback")
    why = _unusable(awaited, state_of(awaited, member), rule, wanted)
    if why is not None:
        return Verdict(True, f"{awaited.name}: {why}: use the fallback")
    return Verdict(
        True,
        f"{awaited.name} {awaited.status.phase.value}: restore member {wanted}",
        member=member_dir(awaited, member, policy=policy).rstrip("/").rsplit("/", 1)[-1],
        wait_seconds=policy.spec.restore.wait_for_saving_seconds,
    )
