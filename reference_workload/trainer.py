"""An emulated GPU training job that follows the Kontinue workload contract (engine ``signal``).

Run as ``python -m reference_workload.trainer [--rate STEPS_PER_S] [--steps N] [--state-bytes B]
[--save-seconds S] [--progress-every K]``; every option can also come from the environment
(``TRAINER_RATE``, ``TRAINER_STEPS``, ``TRAINER_STATE_BYTES``, ``TRAINER_SAVE_SECONDS``,
``TRAINER_PROGRESS_EVERY``) so a pod template can set them; a command-line option wins.

The contract (docs/workload-contract.md, engine ``signal``):

1. at start, if ``KONTINUE_RESTORE_FROM`` is set, verify and load it; a torn or foreign directory
   is refused with a clear message and exit code 3 -- never a silent cold start from garbage;
2. on SIGTERM, save into ``KONTINUE_CHECKPOINT_DIR`` (taking ``--save-seconds``), and only once the
   save is durable write one JSON line ``{"kontinue": "saved", "step": n, "bytes": b, ...}`` to the
   termination message file (``/dev/termination-log``, or ``KONTINUE_TERMINATION_LOG``), then exit
   143. A preempted trainer never exits 0 (a Succeeded preempted pod can complete its Job).

Exit codes: 0 all steps done; 143 after SIGTERM (saved or not -- only the termination message
says whether it saved); 3 restore refused; 2 bad options. Output lines (flushed): ``RESTORED``,
``PROGRESS step=<n> ...``, ``SAVING``, ``SAVED``, ``SAVE-FAILED``, ``DONE``.

No torch: the "model" is a byte array of ``--state-bytes`` that every step changes, so a restored
run provably continues from the saved state.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

from kontinue import checkpoint_format, keys
from kontinue_sdk import environment

EXIT_DONE = 0
EXIT_BAD_OPTIONS = 2
EXIT_RESTORE_REFUSED = 3
EXIT_PREEMPTED = 143  # 128 + SIGTERM: "as if SIGTERM had ended it"

STATE_FILE = "state.bin"
TRAINER_FILE = "trainer.json"
FORMAT = "reference-trainer/v1"
"""The manifest's ``format``: the workload's own key (kontinue/checkpoint_format.py keeps it)."""

_ENV_OPTIONS = {
    "rate": "TRAINER_RATE",
    "steps": "TRAINER_STEPS",
    "state_bytes": "TRAINER_STATE_BYTES",
    "save_seconds": "TRAINER_SAVE_SECONDS",
    "progress_every": "TRAINER_PROGRESS_EVERY",
}


class ConfigError(Exception):
    """An option or environment variable with a bad value; the message names it."""


@dataclasses.dataclass(frozen=True)
class Config:
    rate: float = 10.0
    steps: int | None = None  # None: run until stopped
    state_bytes: int = 1 << 20
    save_seconds: float = 1.0
    progress_every: int = 1
    checkpoint_dir: Path | None = None
    restore_from: Path | None = None
    termination_log: Path = environment.DEFAULT_TERMINATION_LOG
    member: str | None = None
    """``KONTINUE_MEMBER``: recorded in every save."""
    restore_member: str | None = None
    """``KONTINUE_RESTORE_MEMBER`` (else ``KONTINUE_MEMBER``): a restore saved by another member
    is refused (kontinue_sdk/environment.py)."""


def _number(raw: str, *, name: str, kind: type[int] | type[float], minimum: float) -> float:
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}: {raw!r} is not a valid {kind.__name__}") from None
    if not math.isfinite(value) or value < minimum:
        raise ConfigError(f"{name}: must be >= {minimum}, got {raw!r}")
    return value


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """Options from ``argv`` over ``environ`` over defaults; a bad one raises ConfigError."""
    parser = argparse.ArgumentParser(prog="reference_workload.trainer", exit_on_error=False)
    parser.add_argument("--rate", help="steps per second (> 0)")
    parser.add_argument("--steps", help="total steps; 0 or unset: run until SIGTERM")
    parser.add_argument("--state-bytes", dest="state_bytes", help="size of the emulated state")
    parser.add_argument("--save-seconds", dest="save_seconds", help="how long a save takes")
    parser.add_argument("--progress-every", dest="progress_every", help="print every K steps")
    try:
        args = parser.parse_args(list(argv))
    except argparse.ArgumentError as error:
        raise ConfigError(str(error)) from None
    raw: dict[str, tuple[str, str]] = {}
    for field, env in _ENV_OPTIONS.items():
        given = getattr(args, field)
        if given is not None:
            raw[field] = ("--" + field.replace("_", "-"), given)
        elif environ.get(env, "") != "":
            raw[field] = (env, environ[env])
    defaults = Config()
    rate = defaults.rate
    if "rate" in raw:
        rate = _number(raw["rate"][1], name=raw["rate"][0], kind=float, minimum=0.0)
        if rate == 0:
            raise ConfigError(f"{raw['rate'][0]}: must be > 0")
    steps = defaults.steps
    if "steps" in raw:
        steps = int(_number(raw["steps"][1], name=raw["steps"][0], kind=int, minimum=0)) or None
    state_bytes = defaults.state_bytes
    if "state_bytes" in raw:
        state_bytes = int(
            _number(raw["state_bytes"][1], name=raw["state_bytes"][0], kind=int, minimum=1)
        )
    save_seconds = defaults.save_seconds
    if "save_seconds" in raw:
        name, value = raw["save_seconds"]
        save_seconds = _number(value, name=name, kind=float, minimum=0.0)
    progress_every = defaults.progress_every
    if "progress_every" in raw:
        name, value = raw["progress_every"]
        progress_every = int(_number(value, name=name, kind=int, minimum=1))

    contract = environment.read(environ)
    return Config(
        rate=rate,
        steps=steps,
        state_bytes=state_bytes,
        save_seconds=save_seconds,
        progress_every=progress_every,
        checkpoint_dir=contract.checkpoint_dir,
        restore_from=contract.restore_from,
        termination_log=contract.termination_log,
        member=contract.member,
        restore_member=contract.restore_member,
    )


def _say(line: str) -> None:
    print(line, flush=True)


def _warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _advance(state: bytearray, step: int) -> None:
    """One training step: deterministic, so a restored run can be checked against a fresh one."""
    state[step % len(state)] = (state[step % len(state)] + step * 31 + 7) & 0xFF


class CheckpointError(Exception):
    """A directory this trainer must not restore from; the message names it and the cause."""


def saved_step(manifest: checkpoint_format.Manifest) -> int:
    """The step a reference-trainer checkpoint was saved at (the manifest's ``step`` key)."""
    step = manifest.extra.get("step")
    if manifest.extra.get("format") != FORMAT or type(step) is not int or step < 0:
        raise CheckpointError(f"not a {FORMAT} checkpoint: {manifest.extra!r}")
    return step


def save_checkpoint(
    directory: Path,
    *,
    step: int,
    state: bytes,
    seconds: float = 0.0,
    member: str | None = None,
    chunks: int = 20,
    sleep: Callable[[float], None] = time.sleep,
) -> checkpoint_format.Manifest:
    """Write the state files, then the manifest last (kontinue.checkpoint_format.write_manifest).

    ``seconds`` spreads the data writes over that long (``chunks`` fsynced pieces with sleeps in
    between) to emulate a slow save of GPU state, so a SIGKILL at the end of the grace period
    leaves data without a manifest: a torn directory the format refuses.
    """
    meta = json.dumps(
        {"step": step, "stateBytes": len(state), "stateSha256": hashlib.sha256(state).hexdigest()}
    ).encode()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / checkpoint_format.MANIFEST_NAME).exists():
        raise CheckpointError(f"{directory}: already holds a checkpoint (never rewritten)")
    pieces = max(1, chunks)
    pause = seconds / pieces if seconds > 0 else 0.0
    piece = max(1, -(-(len(state) + len(meta)) // pieces))
    slept = 0.0
    for name, data in ((STATE_FILE, state), (TRAINER_FILE, meta)):
        with (directory / name).open("wb") as out:
            for offset in range(0, len(data), piece):
                out.write(data[offset : offset + piece])
                out.flush()
                os.fsync(out.fileno())
                if pause:
                    sleep(pause)
                    slept += pause
    if seconds > slept:  # tiny state still takes the configured save time
        sleep(seconds - slept)
    return checkpoint_format.write_manifest(
        directory, extra={"format": FORMAT, "step": step}, member=member
    )


def _restore(
    directory: Path, *, state_bytes: int, member: str | None = None
) -> tuple[int, bytearray, str | None]:
    """Verify (files, sizes, digests, member: kontinue.checkpoint_format.verify) and load;
    returns the step, the state and the member identity the manifest says saved it."""
    manifest = checkpoint_format.verify(directory, member=member)
    step = saved_step(manifest)
    names = {entry.path for entry in manifest.files}
    if names != {STATE_FILE, TRAINER_FILE}:
        raise CheckpointError(f"{directory}: holds {sorted(names)}, not a {FORMAT} checkpoint")
    meta = json.loads((directory / TRAINER_FILE).read_text())
    if meta.get("step") != step:
        raise CheckpointError(
            f"{directory}: {TRAINER_FILE} says step {meta.get('step')}, manifest {step}"
        )
    state = bytearray((directory / STATE_FILE).read_bytes())
    if len(state) != state_bytes:
        raise CheckpointError(
            f"{directory}: state is {len(state)} bytes but this run keeps {state_bytes} "
            "(--state-bytes differs from the saved run)"
        )
    return step, state, manifest.member


def _write_termination_message(path: Path, message: Mapping[str, object]) -> None:
    """One JSON line, no trailing newline (the kubelet copies the file verbatim, up to 4096 B)."""
    try:
        path.write_text(json.dumps(dict(message)))
    except OSError as error:
        _warn(f"cannot write termination message to {path}: {error}")


def _save(config: Config, *, step: int, state: bytearray) -> int:
    """Save and report; returns the exit code (always 143: a preempted run never exits 0)."""
    directory = config.checkpoint_dir
    if directory is None:
        _warn(f"SIGTERM at step {step}: {keys.ENV_CHECKPOINT_DIR} is not set, nothing saved")
        return EXIT_PREEMPTED
    _say(f"SAVING step={step} into={directory} bytes={len(state)}")
    started = time.monotonic()
    try:
        manifest = save_checkpoint(
            directory,
            step=step,
            state=bytes(state),
            seconds=config.save_seconds,
            member=config.member,
        )
    except (OSError, CheckpointError, checkpoint_format.Problem) as error:
        _warn(f"SAVE-FAILED step={step}: {error}")
        _write_termination_message(
            config.termination_log,
            {keys.SAVED_MARKER_KEY: "failed", "step": step, "error": str(error)},
        )
        return EXIT_PREEMPTED
    seconds = round(time.monotonic() - started, 3)
    _say(f"SAVED step={step} bytes={manifest.total_bytes} seconds={seconds}")
    _write_termination_message(
        config.termination_log,
        {
            keys.SAVED_MARKER_KEY: keys.SAVED_MARKER_VALUE,
            "step": step,
            "bytes": manifest.total_bytes,
            "seconds": seconds,
            "path": str(directory),
        },
    )
    return EXIT_PREEMPTED


def run(config: Config) -> int:
    """The training loop; returns the process exit code. Installs the SIGTERM handler."""
    stop = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    step = 0
    state = bytearray(config.state_bytes)
    restored: int | None = None
    if config.restore_from is not None:
        try:
            step, state, saved_by = _restore(
                config.restore_from, state_bytes=config.state_bytes, member=config.restore_member
            )
        except (OSError, ValueError, CheckpointError, checkpoint_format.Problem) as error:
            reason = f"refusing to restore from {config.restore_from}: {error}"
            _warn(reason)
            _write_termination_message(
                config.termination_log, {keys.SAVED_MARKER_KEY: "restore-refused", "reason": reason}
            )
            return EXIT_RESTORE_REFUSED
        restored = step
        # who saved it (the manifest's member) and who restores (KONTINUE_MEMBER), "-" unknown:
        # the demo counts restores of another identity's state from this line
        _say(
            f"RESTORED step={step} from={config.restore_from} "
            f"member={saved_by or '-'} as={config.member or '-'}"
        )
    total = "inf" if config.steps is None else str(config.steps)
    period = 1.0 / config.rate
    deadline = time.monotonic()
    while config.steps is None or step < config.steps:
        deadline += period
        if stop.wait(timeout=max(0.0, deadline - time.monotonic())):
            return _save(config, step=step, state=state)
        _advance(state, step)
        step += 1
        if step % config.progress_every == 0 or step == config.steps:
            origin = "-" if restored is None else str(restored)
            _say(f"PROGRESS step={step} steps={total} restored_from={origin}")
    if stop.is_set():
        return _save(config, step=step, state=state)
    _say(f"DONE step={step}")
    return EXIT_DONE


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv, os.environ)
    except ConfigError as error:
        _warn(f"reference_workload.trainer: {error}")
        return EXIT_BAD_OPTIONS
    return run(config)


if __name__ == "__main__":
    sys.exit(main())
