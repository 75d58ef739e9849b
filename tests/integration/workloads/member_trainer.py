"""A multi-pod test workload that knows its member identity (docs/api.md, "Member identity").

Run as ``python -m tests.integration.workloads.member_trainer`` in the emulated cluster's pods.
It counts steps; on SIGTERM it saves ``state.json`` (its identity and step) and a
``MANIFEST.json`` naming ``"member"`` (kontinue/checkpoint_format.py ``write_manifest``), writes
the ``{"kontinue": "saved"}`` termination message and exits 143. On start it follows
``KONTINUE_RESTORE_FROM`` when the restore init-container linked it, refuses (exit 7) a directory
saved by another identity than the one ``KONTINUE_RESTORE_MEMBER`` names (its own, or rank 0's
under the ``shared`` consistency; its own when unset), and prints one ``RESTORED member=<m>
step=<n> dir=<saver pod uid>`` line. If ``<MEMBER_CONTROL_DIR>/torn-<index>`` exists at SIGTERM
it ignores the signal (a save the grace period cuts short: SIGKILL, no manifest). If
``<MEMBER_CONTROL_DIR>/full-<index>`` exists at SIGTERM its save fails as on a full checkpoint
volume: the data file is cut short, no manifest, the termination message ``{"kontinue":
"failed", ...}`` and exit 143, as docs/workload-contract.md says of a save that raises. Once
``<MEMBER_CONTROL_DIR>/finish`` exists it prints ``FINISHED member=<m> step=<n>`` and exits 0
(the work is done: the Job completes).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from kontinue import checkpoint_format, identity, keys

WRONG_MEMBER_EXIT = 7


def main() -> int:
    member = os.environ[keys.ENV_MEMBER]
    target = Path(os.environ[keys.ENV_CHECKPOINT_DIR])
    control = Path(os.environ.get("MEMBER_CONTROL_DIR", "/nonexistent"))
    log = Path(os.environ.get(keys.ENV_TERMINATION_LOG) or "/dev/termination-log")
    step = 0
    link = os.environ.get(keys.ENV_RESTORE_FROM, "")
    if link and os.path.lexists(link):
        source = Path(os.path.realpath(link))
        manifest = json.loads((source / checkpoint_format.MANIFEST_NAME).read_text())
        state = json.loads((source / "state.json").read_text())
        # whose member it restores: its own, or rank 0's under ``shared`` (the webhook names it)
        whose = os.environ.get(keys.ENV_RESTORE_MEMBER) or member
        if manifest.get(keys.MANIFEST_MEMBER_KEY) != whose or state["member"] != whose:
            print(f"WRONG-MEMBER mine={member} saved-by={manifest.get('member')}", flush=True)
            return WRONG_MEMBER_EXIT
        step = int(state["step"])
        print(f"RESTORED member={member} step={step} dir={source.name}", flush=True)
    else:
        print(f"COLD member={member}", flush=True)
    stopping = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    finish = control / "finish"
    while not stopping:
        step += 1
        print(f"PROGRESS step={step} member={member}", flush=True)
        if finish.exists():
            print(f"FINISHED member={member} step={step}", flush=True)
            return 0
        time.sleep(0.05)
    if (control / f"torn-{identity.index_of(member)}").exists():
        while True:  # never saves: the grace period ends in SIGKILL
            time.sleep(1)
    target.mkdir(parents=True, exist_ok=True)
    if (control / f"full-{identity.index_of(member)}").exists():
        (target / "state.json").write_text('{"member": ')  # the volume filled up mid-write
        error = "[Errno 28] No space left on device"
        log.write_text(json.dumps({keys.SAVED_MARKER_KEY: "failed", "error": error}))
        print(f"SAVE-FAILED member={member} step={step} {error}", flush=True)
        return 143
    (target / "state.json").write_text(json.dumps({"member": member, "step": step}))
    checkpoint_format.write_manifest(target, extra={keys.MANIFEST_MEMBER_KEY: member, "step": step})
    log.write_text(json.dumps({keys.SAVED_MARKER_KEY: keys.SAVED_MARKER_VALUE, "step": step}))
    print(f"SAVED member={member} step={step}", flush=True)
    return 143


def job(
    name: str,
    *,
    namespace: str,
    priority: str,
    members: int,
    control: Path,
    grace: int,
    backoff_limit: int,
    short: bool = False,
) -> dict[str, Any]:
    """An Indexed batch/v1 Job of ``members`` pods running this trainer in the Kueue LocalQueue
    ``team``; ``short``: a higher-priority Job whose pods sleep two seconds and complete."""
    command = ["python", "-m", "tests.integration.workloads.member_trainer"]
    if short:
        command = ["python", "-c", "import time; time.sleep(2)"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "team"},
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": members,
            "parallelism": members,
            "backoffLimit": backoff_limit,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": priority,
                    "terminationGracePeriodSeconds": grace,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "kontinue/reference-workload:dev",
                            "command": command,
                            "env": [{"name": "MEMBER_CONTROL_DIR", "value": str(control)}],
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {keys.GPU_RESOURCE: "1"},
                            },
                        }
                    ],
                }
            },
        },
    }


if __name__ == "__main__":
    sys.exit(main())
