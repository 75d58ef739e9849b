"""The workload contract in one object: resume, save at a step boundary, report, exit 143.

:class:`Session` keeps docs/workload-contract.md for a training loop that calls
:meth:`Session.step` once per step (a *safe point*, where the state is consistent):

- :meth:`Session.resume` installs the signal handlers and, when ``KONTINUE_RESTORE_FROM`` holds a
  checkpoint, verifies it (the manifest of kontinue/checkpoint_format.py, every file's size and
  sha256, the member identity: ``KONTINUE_RESTORE_MEMBER``, else ``KONTINUE_MEMBER``) and hands
  it to the ``load`` callback; it returns the step to
  continue from (0 for a fresh start). A torn or foreign checkpoint is refused: exit 3, with the
  reason on stderr and in the termination message — never a silent start from garbage.
- ``SIGTERM`` sets a flag; the next :meth:`Session.step` saves through the ``save`` callback into
  ``KONTINUE_CHECKPOINT_DIR``, writes the manifest last (kontinue.checkpoint_format.write_manifest:
  fsync, rename, fsync), then one JSON line to the termination message file, then exits 143.
- ``SIGUSR1`` (and ``save_every`` seconds, if set) saves a *snapshot* at the next step boundary
  into ``KONTINUE_CHECKPOINT_DIR/snapshots/step-<n>`` and continues; only the newest complete
  snapshot is kept.
- Without ``KONTINUE_CHECKPOINT_DIR`` (outside Kubernetes) nothing is installed and nothing saved.

Saving at a step boundary, not inside the signal handler, is what makes a restored run equal an
uninterrupted one: the handler may run in the middle of ``optimizer.step()``. The cost is that a
save starts up to one step after the signal, so the grace period must cover one step plus the save.

Stdlib only (plus kontinue.checkpoint_format and kontinue.keys, both stdlib only): it runs inside
users' training images, which do not have the control plane's dependencies.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from kontinue import checkpoint_format, keys
from kontinue_sdk import environment

EXIT_RESTORE_REFUSED = 3
EXIT_PREEMPTED = 143  # 128 + SIGTERM: "as if SIGTERM had ended it"
FORMAT = "kontinue-sdk/v1"
SNAPSHOTS = "snapshots"

SaveFn = Callable[[Path], Mapping[str, Any] | None]
"""Write the state into the directory; may return extra manifest keys (JSON values)."""
LoadFn = Callable[[Path, checkpoint_format.Manifest], None]
"""Read the state back from a verified directory."""
AgreeFn = Callable[["Request"], "Request"]
"""Multi-process: every rank passes its own request and gets the strongest of all ranks."""


class Request(enum.IntEnum):
    """What the next safe point does; ranks agree on the maximum."""

    NONE = 0
    SNAPSHOT = 1
    STOP = 2


class RestoreRefused(Exception):
    """The checkpoint in ``KONTINUE_RESTORE_FROM`` must not be used; the message says why."""


def _say(line: str) -> None:
    print(f"kontinue: {line}", file=sys.stderr, flush=True)


def _exit(code: int) -> NoReturn:
    sys.exit(code)


class Session:
    """One training process's side of the contract. See the module docstring."""

    def __init__(
        self,
        save: SaveFn,
        load: LoadFn | None = None,
        *,
        save_every: float | None = None,
        agree: AgreeFn | None = None,
        format: str = FORMAT,
        environ: Mapping[str, str] | None = None,
        exit: Callable[[int], NoReturn] = _exit,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.env = environment.read(os.environ if environ is None else environ)
        self._save = save
        self._load = load
        self._agree = agree
        self._format = format
        self._exit = exit
        self._clock = clock
        self.save_every = save_every
        self.steps_done = 0
        """Completed steps: restored from the manifest, then counted by :meth:`step`."""
        self.restored_from: Path | None = None
        self._requested = Request.NONE
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._last_save = clock()
        self._handlers_installed = False

    # --- signals ---------------------------------------------------------------------------

    def request(self, what: Request) -> None:
        """Ask for a save at the next safe point (what the signal handlers call)."""
        with self._lock:
            self._requested = max(self._requested, what)
        self._wake.set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, ending early (``True``) once a save is requested.

        For loops that pace themselves: a plain ``time.sleep`` resumes after the signal handler
        and would delay the save by the rest of the sleep.
        """
        return self._wake.wait(max(0.0, seconds))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request(Request.STOP if signum == signal.SIGTERM else Request.SNAPSHOT)

    def _install(self) -> None:
        if self._handlers_installed or not self.env.in_kontinue:
            return
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("Session.resume() must run in the main thread (signal handlers)")
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGUSR1, self._on_signal)
        self._handlers_installed = True

    # --- start -----------------------------------------------------------------------------

    def find_restore(self) -> checkpoint_format.Manifest | None:
        """The verified manifest to restore from, ``None`` for a fresh start.

        :class:`RestoreRefused` when ``KONTINUE_RESTORE_FROM`` names something that is not this
        member's complete checkpoint. An absent path (not even a dangling link) is a cold start:
        the restore init-container removes the link when nothing good exists.
        """
        directory = self.env.restore_from
        if directory is None or not (directory.is_symlink() or directory.exists()):
            return None
        try:
            # the member whose state this pod restores: its own, rank 0's under ``shared``
            manifest = checkpoint_format.verify(directory, member=self.env.restore_member)
        except checkpoint_format.Problem as problem:
            raise RestoreRefused(str(problem)) from None
        step = manifest.extra.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise RestoreRefused(f"{directory}: manifest has no step (not a {FORMAT} checkpoint)")
        return manifest

    def resume(self) -> int:
        """Install the handlers, load a checkpoint if there is one; the step to continue from."""
        self._install()
        try:
            manifest = self.find_restore()
            if manifest is not None:
                assert self.env.restore_from is not None
                if self._load is not None:
                    self._load(self.env.restore_from, manifest)
        except (RestoreRefused, OSError, ValueError, KeyError) as error:
            reason = f"refusing to restore from {self.env.restore_from}: {error}"
            _say(reason)
            self._message({keys.SAVED_MARKER_KEY: "restore-refused", "reason": reason})
            self._exit(EXIT_RESTORE_REFUSED)
        if manifest is not None:
            self.steps_done = int(manifest.extra["step"])
            self.restored_from = self.env.restore_from
            _say(f"restored step {self.steps_done} from {self.restored_from}")
        self._last_save = self._clock()
        return self.steps_done

    # --- the safe point --------------------------------------------------------------------

    def step(self, steps_done: int | None = None) -> None:
        """Mark a step boundary: count it, then save (and maybe exit) if a save is due."""
        self.steps_done = self.steps_done + 1 if steps_done is None else steps_done
        with self._lock:
            wanted, self._requested = self._requested, Request.NONE
            self._wake.clear()
        if (
            wanted is Request.NONE
            and self.save_every is not None
            and self.env.in_kontinue
            and self._clock() - self._last_save >= self.save_every
        ):
            wanted = Request.SNAPSHOT
        if self._agree is not None:
            wanted = self._agree(wanted)
        if wanted is Request.STOP:
            self.stop()
        elif wanted is Request.SNAPSHOT:
            self.snapshot()

    def stop(self) -> NoReturn:
        """Save into ``KONTINUE_CHECKPOINT_DIR``, write the termination message, exit 143."""
        directory = self.env.checkpoint_dir
        if directory is None:
            _say(f"SIGTERM at step {self.steps_done}: no {keys.ENV_CHECKPOINT_DIR}, nothing saved")
            self._exit(EXIT_PREEMPTED)
        started = self._clock()
        try:
            manifest = self._write(directory, exclude=(SNAPSHOTS,))
        except Exception as error:  # any failure: report it, never claim a save
            _say(f"save failed at step {self.steps_done}: {error!r}")
            self._message(
                {keys.SAVED_MARKER_KEY: "failed", "step": self.steps_done, "error": repr(error)}
            )
            self._exit(EXIT_PREEMPTED)
        seconds = round(self._clock() - started, 3)
        _say(f"saved step {self.steps_done}: {manifest.total_bytes} bytes in {seconds}s")
        self._message(
            {
                keys.SAVED_MARKER_KEY: keys.SAVED_MARKER_VALUE,
                "step": self.steps_done,
                "bytes": manifest.total_bytes,
                "seconds": seconds,
                "path": str(directory),
            }
        )
        self._exit(EXIT_PREEMPTED)

    def snapshot(self) -> Path | None:
        """Save a complete snapshot and continue; the previous snapshot goes once it is durable."""
        directory = self.env.checkpoint_dir
        self._last_save = self._clock()
        if directory is None:
            return None
        target = directory / SNAPSHOTS / f"step-{self.steps_done}"
        if (target / checkpoint_format.MANIFEST_NAME).exists():
            return target  # already saved at this step
        shutil.rmtree(target, ignore_errors=True)  # a torn earlier attempt at this step
        try:
            manifest = self._write(target)
        except Exception as error:  # a failed snapshot must not end the run
            _say(f"snapshot failed at step {self.steps_done}: {error!r}")
            return None
        for old in (directory / SNAPSHOTS).iterdir():
            if old != target:
                shutil.rmtree(old, ignore_errors=True)
        _say(f"snapshot step {self.steps_done}: {manifest.total_bytes} bytes in {target}")
        self._last_save = self._clock()
        return target

    # --- I/O -------------------------------------------------------------------------------

    def _write(
        self, directory: Path, *, exclude: tuple[str, ...] = ()
    ) -> checkpoint_format.Manifest:
        directory.mkdir(parents=True, exist_ok=True)
        if (directory / checkpoint_format.MANIFEST_NAME).exists():
            raise FileExistsError(f"{directory} already holds a checkpoint (never rewritten)")
        extra = dict(self._save(directory) or {})
        extra.update(format=self._format, step=self.steps_done)
        if self.env.member:
            extra[keys.MANIFEST_MEMBER_KEY] = self.env.member
        return checkpoint_format.write_manifest(directory, extra=extra, exclude=exclude)

    def _message(self, message: Mapping[str, object]) -> None:
        """One JSON line, no newline: the kubelet copies the file verbatim (up to 4096 bytes)."""
        if not self.env.in_kontinue and self.env.restore_from is None:
            return
        try:
            self.env.termination_log.write_text(json.dumps(dict(message)))
        except OSError as error:
            _say(f"cannot write the termination message to {self.env.termination_log}: {error}")
