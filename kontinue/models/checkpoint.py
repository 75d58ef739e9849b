"""``Checkpoint`` (namespaced): one checkpoint *set* of one lineage, taken at one trigger.

All pods evicted by the same eviction are the set's members, each named by its *identity*, its
place in the workload (kontinue/identity.py). The set is good (``Succeeded``) only if every member
saved or is carried forward (its pod never started its main container, so its state is the one it
restored from); which sets a pod may restore from is the policy's ``restore.consistency``
(kontinue/restore_plan.py). The phase moves one way: ``Pending -> InProgress -> Succeeded |
Failed``, and any of them may later become ``Expired``.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from typing import Literal

import pydantic

from kontinue import keys
from kontinue.models import base


class Phase(enum.StrEnum):
    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    EXPIRED = "Expired"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.EXPIRED)


class TriggerSource(enum.StrEnum):
    KUEUE = "Kueue"
    VOLCANO = "Volcano"
    SCHEDULER = "Scheduler"
    EVICTION_API = "EvictionAPI"
    TAINT_MANAGER = "TaintManager"
    MANUAL = "Manual"


class Lineage(base.OwnModel):
    """A workload's identity across incarnations; the owner UID guards against name reuse."""

    namespace: str = pydantic.Field(min_length=1, max_length=63)
    owner_kind: str = pydantic.Field(min_length=1)
    owner_name: str = pydantic.Field(min_length=1, max_length=253)
    owner_uid: str = pydantic.Field(min_length=1)

    @property
    def key(self) -> str:
        """``<namespace>/<owner kind>/<owner name>`` as in docs/api.md."""
        return f"{self.namespace}/{self.owner_kind}/{self.owner_name}"

    @property
    def hash(self) -> str:
        """A label-safe digest of key and UID, for label selectors on Checkpoints."""
        return hashlib.sha256(f"{self.key}/{self.owner_uid}".encode()).hexdigest()[:16]


class Trigger(base.OwnModel):
    source: TriggerSource
    reason: str = pydantic.Field(min_length=1)
    message: str = ""
    time: base.Time


class Member(base.OwnModel):
    pod_name: str = pydantic.Field(min_length=1)
    pod_uid: str = pydantic.Field(min_length=1)
    node: str = ""
    index: int = pydantic.Field(default=0, ge=0)
    """The trailing index of ``identity`` (kept for readers of the first schema)."""
    identity: str = pydantic.Field(default="", max_length=253)
    """The pod's member identity (``index=1``, ``task=worker,index=0``, ...); only a pod of the
    same identity restores this member. Empty in sets recorded before identities: ``index``."""


class Fingerprint(base.OwnModel):
    """What a restoring node must match (the policy picks which keys are compared)."""

    image_digest: str | None = None
    gpu_product: str | None = None
    cuda_driver_major: str | None = None
    gpu_count: int | None = pydantic.Field(default=None, ge=0)


class CheckpointSpec(base.OwnModel):
    lineage: Lineage
    trigger: Trigger
    members: list[Member] = pydantic.Field(min_length=1)
    fingerprint: Fingerprint = pydantic.Field(default_factory=Fingerprint)
    policy_name: str = keys.DEFAULT_POLICY_NAME
    consistency: str = ""
    """The policy's ``restore.consistency`` when the set was recorded (for ``kubectl get ckpt``
    and Events; restores follow the policy in force)."""
    workload: str | None = None
    """The queue-system object evicted: a Kueue Workload or Volcano PodGroup name."""


class MemberState(enum.StrEnum):
    PENDING = "Pending"
    SAVING = "Saving"
    SAVED = "Saved"
    FAILED = "Failed"
    CARRIED_FORWARD = "CarriedForward"
    """The pod never started its main container: it saved nothing and changed nothing, so its
    identity's state is what it restored (or would have restored) from, in an older set."""
    UNREPORTED = "Unreported"
    """No final status ever came for the pod (its kubelet was lost, the node partitioned, the
    pod was removed before it reported): whether it saved is unknown. Not good for the set (it
    ends ``Failed`` so the cluster moves on), but the member's directory is still offered to
    the next pod of its identity, which uses it only if it verifies (kontinue/restore_plan.py);
    a late report re-judges it (queue_bridge/lifecycle.py ``late_status``)."""

    @property
    def terminal(self) -> bool:
        return self in (
            MemberState.SAVED,
            MemberState.FAILED,
            MemberState.CARRIED_FORWARD,
            MemberState.UNREPORTED,
        )

    @property
    def good(self) -> bool:
        """Counts toward a ``Succeeded`` set."""
        return self in (MemberState.SAVED, MemberState.CARRIED_FORWARD)


class MemberResult(base.OwnModel):
    pod_name: str
    pod_uid: str | None = None
    """The UID of the member's pod: a result belongs to the member with this ``podUid``. Pod
    names are not enough: a Volcano Job's pods are named ``<job>-<task>-<index>`` in every
    incarnation, so a recreated pod evicted while its set is still open joins it under the
    name of the member it replaced. Results recorded before this field are matched by name."""
    state: MemberState = MemberState.PENDING
    exit_code: int | None = None
    reason: str | None = None
    bytes: int | None = pydantic.Field(default=None, ge=0)
    step: int | None = pydantic.Field(default=None, ge=0)
    """The step the member saved, when its workload reports one (``"step"`` in its message)."""
    started_at: base.Time | None = None
    finished_at: base.Time | None = None
    path: str | None = None
    carried_from: str | None = None
    """Only ``CarriedForward``: the Checkpoint its pod was told to restore from (its
    ``kontinue.dev/restore-from``), if any; the restore plan resolves the state through the older
    sets, exactly as the pod itself would have."""

    def is_of(self, member: Member) -> bool:
        """Whether this is ``member``'s result: by pod UID, by pod name only for results
        recorded without one."""
        if self.pod_uid:
            return self.pod_uid == member.pod_uid
        return self.pod_name == member.pod_name


def result_of(results: Iterable[MemberResult], member: Member) -> MemberResult | None:
    """``member``'s result among ``results`` (see :meth:`MemberResult.is_of`)."""
    return next((r for r in results if r.is_of(member)), None)


class CheckpointStatus(base.OwnModel):
    phase: Phase = Phase.PENDING
    members: list[MemberResult] = pydantic.Field(default_factory=list)
    path: str | None = None
    failed_restores: int = pydantic.Field(default=0, ge=0)
    message: str | None = None
    conditions: list[base.Condition] = pydantic.Field(default_factory=list)


class Checkpoint(base.OwnModel):
    api_version: Literal["kontinue.dev/v1alpha1"] = keys.API_VERSION
    kind: Literal["Checkpoint"] = "Checkpoint"
    metadata: base.ObjectMeta = pydantic.Field(default_factory=base.ObjectMeta)
    spec: CheckpointSpec
    status: CheckpointStatus = pydantic.Field(default_factory=CheckpointStatus)

    @property
    def name(self) -> str:
        return self.metadata.name or ""


def load(data: object) -> Checkpoint:
    """Parse a ``Checkpoint``; :class:`~kontinue.models.errors.InvalidObject` names fields."""
    return base.parse(Checkpoint, data)
