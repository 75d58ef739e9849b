"""``CheckpointPolicy`` (cluster-scoped): how opted-in workloads of a queue are checkpointed.

A queue names its policy with the ``kontinue.dev/policy`` label; without one the built-in
:data:`DEFAULT` applies. Every field has a default a platform engineer can live with, so the
smallest valid policy is ``spec: {}``.
"""

from __future__ import annotations

import enum
from typing import Literal, Self

import pydantic

from kontinue import keys
from kontinue.models import base


class Engine(enum.StrEnum):
    SIGNAL = "signal"
    CEDANA = "cedana"
    """Reserved: not implemented, refused (:data:`UNIMPLEMENTED_ENGINE`)."""
    KUBELET = "kubelet"
    """Reserved: not implemented, refused (:data:`UNIMPLEMENTED_ENGINE`)."""


UNIMPLEMENTED_ENGINE = (
    "only engine 'signal' is implemented; 'cedana' and 'kubelet' are reserved names and refused "
    "until they exist"
)


class CompatibilityKey(enum.StrEnum):
    """What must match between the checkpoint's fingerprint and the node that restores it."""

    IMAGE_DIGEST = "imageDigest"
    GPU_PRODUCT = "gpuProduct"
    CUDA_DRIVER_MAJOR = "cudaDriverMajor"
    GPU_COUNT = "gpuCount"


K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class PersistentVolumeClaimStorage(base.OwnModel):
    """A ReadWriteMany claim of this name in each opted-in namespace (EFS, NFS, Filestore)."""

    claim_name: str = pydantic.Field(min_length=1, max_length=253, pattern=K8S_NAME_PATTERN)


class HostPathStorage(base.OwnModel):
    """A node directory shared by every node (kind workers share one mount): development only."""

    path: str = pydantic.Field(min_length=2, pattern=r"^/")


class Storage(base.OwnModel):
    """Where checkpoint directories live. Exactly one of ``pvc`` or ``hostPath``."""

    pvc: PersistentVolumeClaimStorage | None = None
    host_path: HostPathStorage | None = None
    mount_path: str = pydantic.Field(default="/kontinue/checkpoints", pattern=r"^/")

    @pydantic.model_validator(mode="after")
    def _exactly_one_source(self) -> Self:
        if (self.pvc is None) == (self.host_path is None):
            raise ValueError("exactly one of pvc or hostPath must be set")
        return self


class Retention(base.OwnModel):
    keep: int = pydantic.Field(default=3, ge=1, le=100)
    """Succeeded checkpoints kept per lineage; older ones and their data are deleted."""
    expire_on_completion: bool = True
    """Expire a lineage's checkpoints when its owner Job completes or is deleted."""


DEFAULT_KUEUE_REASONS = [
    "Preempted",
    "PodsReadyTimeout",
    "ClusterQueueStopped",
    "LocalQueueStopped",
    "NodeFailures",
]
DEFAULT_DISRUPTION_REASONS = [
    keys.DISRUPTION_PREEMPTION_BY_SCHEDULER,
    keys.DISRUPTION_EVICTION_BY_API,
    keys.DISRUPTION_DELETION_BY_TAINT_MANAGER,
]


class Triggers(base.OwnModel):
    """Which eviction reasons start a checkpoint; any other eviction is let through untouched."""

    kueue_eviction_reasons: list[str] = pydantic.Field(
        default_factory=lambda: list(DEFAULT_KUEUE_REASONS)
    )
    disruption_reasons: list[str] = pydantic.Field(
        default_factory=lambda: list(DEFAULT_DISRUPTION_REASONS)
    )


class Consistency(enum.StrEnum):
    """Which sets and members a multi-pod workload's pods restore from (docs/api.md)."""

    COUPLED = "coupled"
    """Ranks depend on each other (DDP/FSDP, pipeline stages): each pod restores its own member
    of the newest ``Succeeded`` set holding its identity, so one eviction's pods resume from one
    consistent cut or not at all. A set a member failed is used by nobody."""
    INDEPENDENT = "independent"
    """Shards with their own state (an Indexed Job over index-sharded data): each pod restores
    its own identity's newest saved member, even from a set another member failed."""
    SHARED = "shared"
    """Identical replicas where rank 0 writes the state: every pod restores rank 0's newest
    saved member. The only rule under which one identity's state reaches another."""


class Restore(base.OwnModel):
    consistency: Consistency = Consistency.COUPLED
    """How the pods of a multi-pod workload choose their restore source (see :class:`Consistency`);
    a single-pod workload restores the same under all three."""
    attempts_before_fallback: int = pydantic.Field(default=2, ge=1, le=20)
    """Failed restores of one checkpoint before falling back to the previous one, then cold."""
    wait_for_saving_seconds: int = pydantic.Field(default=600, ge=0, le=86400)
    """How long a restore init-container waits for the previous incarnation's save to end."""


class AdmissionCheck(base.OwnModel):
    enabled: bool = False
    """Run the Kueue AdmissionCheck controller ``kontinue.dev/restore`` for this policy."""


class CheckpointPolicySpec(base.OwnModel):
    engine: Engine = Engine.SIGNAL

    @pydantic.field_validator("engine")
    @classmethod
    def _implemented(cls, engine: Engine) -> Engine:
        # A policy that names an engine nothing runs would plumb pods that never checkpoint.
        if engine is not Engine.SIGNAL:
            raise ValueError(UNIMPLEMENTED_ENGINE)
        return engine

    storage: Storage = pydantic.Field(
        default_factory=lambda: Storage(pvc=PersistentVolumeClaimStorage(claim_name="kontinue"))
    )
    min_grace_period_seconds: int = pydantic.Field(default=120, ge=1, le=86400)
    """The webhook raises ``terminationGracePeriodSeconds`` to this; it never lowers it."""
    retention: Retention = pydantic.Field(default_factory=Retention)
    compatibility: list[CompatibilityKey] = pydantic.Field(
        default_factory=lambda: list(CompatibilityKey)
    )
    triggers: Triggers = pydantic.Field(default_factory=Triggers)
    restore: Restore = pydantic.Field(default_factory=Restore)
    admission_check: AdmissionCheck = pydantic.Field(default_factory=AdmissionCheck)


class CheckpointPolicy(base.OwnModel):
    api_version: Literal["kontinue.dev/v1alpha1"] = keys.API_VERSION
    kind: Literal["CheckpointPolicy"] = "CheckpointPolicy"
    metadata: base.ObjectMeta = pydantic.Field(default_factory=base.ObjectMeta)
    spec: CheckpointPolicySpec = pydantic.Field(default_factory=CheckpointPolicySpec)

    @property
    def name(self) -> str:
        return self.metadata.name or ""


DEFAULT = CheckpointPolicy(metadata=base.ObjectMeta(name=keys.DEFAULT_POLICY_NAME))
"""Used by a queue that opts in without naming a policy (and when ``default`` is not defined)."""


def load(data: object) -> CheckpointPolicy:
    """Parse a ``CheckpointPolicy``; :class:`~kontinue.models.errors.InvalidObject` names fields."""
    return base.parse(CheckpointPolicy, data)
