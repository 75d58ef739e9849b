"""The restore init-container: its command, its exit codes, and what counts as a failed restore.

The program itself is :mod:`kontinue.restore.program` (installed as the console script
``kontinue-restore``; ``python -m kontinue.restore`` runs the same). This module holds only what
the webhook (which injects the container, webhook/plumbing.py) and the queue bridge (which counts
failed restores, queue_bridge/reconciling.py) need to name it, so importing it costs nothing.

Exit codes (one line on stdout/stderr and the same line as the container's termination message
says why; docs/workload-contract.md has the table for users):

====  ==============  =====================================================================
code  name            meaning
====  ==============  =====================================================================
0     OK              restored (the directory verified), or a cold start because the awaited
                      save never completed and nothing older exists (link mode)
2     CONFIG          the container was set up wrongly (an option or variable is named)
3     MISSING         the checkpoint directory does not exist
4     TORN            torn or invalid: no/unparsable manifest, a file of the wrong size/digest
5     UNREADABLE      an I/O error reading the checkpoint or making the restore link
6     WAIT_TIMEOUT    direct mode: the awaited save did not complete in time
7     OTHER_MEMBER    the manifest names another member than this pod's ``KONTINUE_MEMBER``
8     REFUSED         a symlinked directory or manifest, a non-regular file (FIFO, device), a
                      symlink leaving the directory
9     TIMED_OUT       verification did not end within its time budget
10    INTERNAL        an unexpected error in the program (a bug; the exception is named)
====  ==============  =====================================================================

Any other non-zero end — 1 (the interpreter could not even start the program), 128 (the runtime
could not start the command), 137 (killed: out of memory) — is a failed restore too: the bridge
counts *every* non-zero end of this container (:func:`failed`), except a kill while the pod was
being deleted, which says nothing about the checkpoint.
"""

from __future__ import annotations

import copy
import enum
from typing import Any, Final

from kontinue import checkpoint_format, keys

SCRIPT: Final = "kontinue-restore"
"""The console script pyproject.toml installs (``[project.scripts]``)."""
COMMAND: Final = (SCRIPT,)
"""The init container's ``command``: an entry point the package installs, never ``python``."""
UNPLUMBED_FLAG: Final = "--unplumbed"
"""The Job template's stand-in runs with it: exit 0 at once (see :func:`stand_in`)."""
RESOURCES: Final = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
"""The restore container's resources, in the pod and in the Job template's stand-in alike, so a
queue system that sizes the Job from its template (Kueue) accounts what the pod requests."""

POD_FAILURE_RULE: Final = {
    "action": "Ignore",
    "onExitCodes": {
        "containerName": keys.RESTORE_INIT_CONTAINER,
        "operator": "NotIn",
        "values": [0],
    },
}
"""The podFailurePolicy rule that keeps a failed restore from counting against ``backoffLimit``.

The job controller matches ``onExitCodes`` against ``status.containerStatuses`` and then
``status.initContainerStatuses`` by name, and only terminated containers with a non-zero exit
code (kubernetes/kubernetes pkg/controller/job/pod_failure_policy.go ``matchOnExitCodes``,
``getMatchingContainerFromList``): ``NotIn [0]`` on the restore container matches *every* failed
end of it — its own codes, a crash, an OOM kill — and never a user container. The apiserver
requires ``containerName`` to name a container or init container of the Job's pod template
(pkg/apis/batch/validation/validation.go ``validatePodFailurePolicyRuleOnExitCodes``: "must be
one of the container or initContainer names in the pod template"), and the restore container is
only added to pods: so the template gets a :func:`stand_in` of that name.
"""


def stand_in(image: str, *, security_context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Job template's ``kontinue-restore`` init container, there so the rule above is valid.

    The webhook replaces it in every pod it plumbs with a restore (webhook/plumbing.py) and
    removes it from every other pod it plumbs. A pod created while the webhook was unreachable
    keeps it: it exits 0 at once (``--unplumbed``) and the workload starts cold, as it would
    without Kontinue. It copies the workload container's ``securityContext`` so a ``restricted``
    Pod Security namespace admits the pod.
    """
    container: dict[str, Any] = {
        "name": keys.RESTORE_INIT_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [*COMMAND, UNPLUMBED_FLAG],
        "resources": copy.deepcopy(RESOURCES),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if security_context:
        container["securityContext"] = copy.deepcopy(security_context)
    return container


def is_stand_in(container: dict[str, Any]) -> bool:
    """Whether an init container is the Job template's :func:`stand_in`."""
    command = container.get("command") or []
    return container.get("name") == keys.RESTORE_INIT_CONTAINER and UNPLUMBED_FLAG in command


class ExitCode(enum.IntEnum):
    OK = 0
    CONFIG = 2
    MISSING = 3
    TORN = 4
    UNREADABLE = 5
    WAIT_TIMEOUT = 6
    OTHER_MEMBER = 7
    REFUSED = 8
    TIMED_OUT = 9
    INTERNAL = 10


_BY_CAUSE: Final = {
    checkpoint_format.Cause.MISSING: ExitCode.MISSING,
    checkpoint_format.Cause.TORN: ExitCode.TORN,
    checkpoint_format.Cause.INVALID: ExitCode.TORN,
    checkpoint_format.Cause.UNREADABLE: ExitCode.UNREADABLE,
    checkpoint_format.Cause.REFUSED: ExitCode.REFUSED,
    checkpoint_format.Cause.OTHER_MEMBER: ExitCode.OTHER_MEMBER,
    checkpoint_format.Cause.TIMED_OUT: ExitCode.TIMED_OUT,
}


def for_cause(cause: checkpoint_format.Cause) -> ExitCode:
    """The exit code of a checkpoint :class:`~kontinue.checkpoint_format.Problem`."""
    return _BY_CAUSE[cause]


SIGNAL_EXITS: Final = frozenset({137, 143})
"""128 + SIGKILL / SIGTERM: how the runtime reports a container stopped by a signal."""


def failed(exit_code: int, *, pod_deleting: bool) -> bool:
    """Whether an end of the restore container is a failed restore (module doc)."""
    if exit_code == ExitCode.OK:
        return False
    return not (pod_deleting and exit_code in SIGNAL_EXITS)
