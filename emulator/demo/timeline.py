"""What one run observed, one record per pod incarnation, in seconds since the run started."""

from __future__ import annotations

import dataclasses
import enum

from kontinue import identity as identities
from kontinue import restore

SINGLE_IDENTITY = identities.SINGLE
"""A single-pod workload's (and index 0's) member identity."""


class Role(enum.StrEnum):
    PRIORITY = "priority"
    SCAVENGER = "scavenger"


@dataclasses.dataclass(frozen=True)
class PodRecord:
    job: str
    pod: str
    role: Role
    gpus: int
    node: str | None
    created: float
    started: float | None = None
    """First container (the restore init-container, if any) started: the GPUs are held."""
    running: float | None = None
    """The main container started: useful work begins."""
    terminating: float | None = None
    """Deletion began (SIGTERM): useful work ends, saving begins."""
    ended: float | None = None
    """The last container exited: the GPUs are free."""
    exit_code: int | None = None
    first_step: int | None = None
    """The first PROGRESS step this incarnation printed (the restored step + 1, or 1)."""
    last_step: int | None = None
    saved_step: int | None = None
    """The step its termination message says it saved, if it saved."""
    restored_from: str | None = None
    """The Checkpoint this incarnation restored from (the ``kontinue.dev/restore-from`` value)."""
    restore_exit: int | None = None
    """The restore init container's exit code, once it exited (0: restored)."""
    cold_start: bool = False
    """The webhook plumbed it to start without a checkpoint (``kontinue.dev/cold-start-reason``)."""
    restored_from_newest: bool | None = None
    newest_checkpoint: str | None = None
    """The newest Succeeded checkpoint of its job when it was created: what it should restore."""
    newest_existed: bool | None = None
    """Whether ``newest_checkpoint`` had been created (seen by the run's watch) before this pod
    was: a pod created earlier (a Job's replacement made as soon as the victim failed, before the
    bridge recorded its eviction) cannot restore it; docs/demo.md."""
    checkpoint_node: str | None = None
    """The node the checkpoint it restored from was written on."""
    done: str | None = None
    """The last ``DONE`` line of a finished trainer (the torch trainer's parameters' sha256)."""
    identity: str = SINGLE_IDENTITY
    """Its member identity (kontinue/identity.py): ``index=1`` for index 1 of an Indexed Job."""
    restored_member: str | None = None
    """The identity that saved the directory it restored, as the directory's own manifest says
    (the trainer's ``RESTORED ... member=`` line); ``None``: no restore, or not recorded."""

    @property
    def wrong_identity(self) -> bool:
        """It was handed another identity's state: it restored a directory another identity
        saved, or its restore init-container refused one for that reason (exit 7,
        ``OTHER_MEMBER``, kontinue/restore/__init__.py). The demo's policy is ``coupled``, under
        which this never happens (docs/api.md, "Member identity")."""
        restored_other = self.restored_member is not None and self.restored_member != self.identity
        return restored_other or self.restore_exit == restore.ExitCode.OTHER_MEMBER

    @property
    def preempted(self) -> bool:
        return self.terminating is not None and self.exit_code != 0

    @property
    def completed(self) -> bool:
        return self.exit_code == 0


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    duration: float
    gpus_total: int
    steps_per_second: float
    pods: tuple[PodRecord, ...]
    workload: str = "counter"
    bridge_restores: dict[str, int] = dataclasses.field(default_factory=dict)
    """``kontinue_restores_total`` by result, scraped from the bridge at the end (with Kontinue)."""
    queue_system: str = "kueue"
    checkpoint_sources: dict[str, int] = dataclasses.field(default_factory=dict)
    """The run's Checkpoints by ``spec.trigger.source`` (who evicted: ``Kueue``, ``Volcano``,
    ``Scheduler``); empty without Kontinue."""
