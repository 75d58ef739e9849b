"""What Kontinue tells a workload through its environment (pure: a mapping in, a value out).

The webhook (webhook/plumbing.py) gives every main container of an opted-in pod:

- ``KONTINUE_CHECKPOINT_DIR``: a fresh directory for this pod incarnation; the SDK saves here;
- ``KONTINUE_RESTORE_FROM``: set when a restore was planned. In link mode it is a symlink the
  restore init-container (``kontinue-restore``) made to a verified directory; the
  link is *absent* when the awaited save never completed and nothing older exists, and the
  workload must then start cold (webhook/plumbing.py, module docstring);
- ``KONTINUE_MEMBER``: the pod's member identity (e.g. ``index=1``), recorded in the manifest so
  the restore program refuses another member's directory;
- ``KONTINUE_RESTORE_MEMBER``: with a restore, the identity whose state ``KONTINUE_RESTORE_FROM``
  holds: the pod's own, or rank 0's under the policy's consistency ``shared`` (docs/api.md,
  "Consistency"), where every pod restores rank 0's member. A restore is checked against it
  (else against ``KONTINUE_MEMBER``); a save always records ``KONTINUE_MEMBER``;
- ``KONTINUE_TERMINATION_LOG``: where the termination message goes when no runtime mounts
  ``/dev/termination-log`` (the emulated kubelet, local runs).

With none of them set (a laptop, a CI job) the SDK is a no-op: no signal handlers, no saves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from kontinue import keys

ENV_MEMBER = keys.ENV_MEMBER
DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")


@dataclasses.dataclass(frozen=True)
class Environment:
    checkpoint_dir: Path | None
    restore_from: Path | None
    termination_log: Path
    member: str | None
    restore_member: str | None = None
    """The identity a restore must have been saved by (``KONTINUE_RESTORE_MEMBER``, else
    ``KONTINUE_MEMBER``; ``None``: unknown, not checked)."""

    @property
    def in_kontinue(self) -> bool:
        """True when Kontinue plumbed this container (it has somewhere to save)."""
        return self.checkpoint_dir is not None


def _text(environ: Mapping[str, str], name: str) -> str | None:
    return environ.get(name, "").strip() or None


def _path(environ: Mapping[str, str], name: str) -> Path | None:
    value = environ.get(name, "").strip()
    return Path(value) if value else None


def read(environ: Mapping[str, str]) -> Environment:
    """The Kontinue variables of ``environ``; unset and empty mean the same."""
    member = _text(environ, keys.ENV_MEMBER)
    return Environment(
        checkpoint_dir=_path(environ, keys.ENV_CHECKPOINT_DIR),
        restore_from=_path(environ, keys.ENV_RESTORE_FROM),
        termination_log=_path(environ, keys.ENV_TERMINATION_LOG) or DEFAULT_TERMINATION_LOG,
        member=member,
        restore_member=_text(environ, keys.ENV_RESTORE_MEMBER) or member,
    )
