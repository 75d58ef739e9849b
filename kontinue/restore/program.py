"""The restore init-container program (``kontinue-restore``; ``python -m kontinue.restore``).

It runs before the workload's containers, with the checkpoint volume mounted read-only, and
decides from files alone (no API access, least privilege) which checkpoint directory the
workload restores from. Every outcome ends with ONE line, on stdout for success and on stderr for
failure, and the same line in the termination message file, so ``kubectl describe pod`` and the
bridge (which counts failed restores) both see why. Every outcome has its exit code
(:class:`kontinue.restore.ExitCode`, documented there and in docs/workload-contract.md); an
unexpected exception is ``INTERNAL`` with the exception named, never a traceback.

Environment (set by the webhook, webhook/plumbing.py):

- ``KONTINUE_WAIT_FOR``: the previous incarnation's directory, possibly still being written.
  Waited for (its ``MANIFEST.json``, polled) for at most ``--timeout`` seconds (default
  ``KONTINUE_WAIT_SECONDS``, else 600); used if it then verifies.
- ``KONTINUE_RESTORE_SOURCE``: the verified-good fallback directory (may be empty).
- ``KONTINUE_RESTORE_FROM``: with ``KONTINUE_RESTORE_SOURCE`` present (link mode), the path of
  the symlink to create, pointing at the directory chosen; the workload's containers get the same
  value and follow the link. Without ``KONTINUE_RESTORE_SOURCE`` (direct mode) it is itself the
  directory to verify, and ``KONTINUE_WAIT_FOR`` only delays the check.
- ``KONTINUE_RESTORE_MEMBER`` (else ``KONTINUE_MEMBER``): the member identity whose state
  this pod restores — its own (``index=1``, ...), or rank 0's under the policy's consistency
  ``shared``. A directory whose manifest names another member is refused (``OTHER_MEMBER``).
  A manifest without ``member`` (written before members were recorded) is accepted: the
  directory is the one the webhook's restore plan chose for that identity from the
  Checkpoint's own record (kontinue/restore_plan.py).
- ``KONTINUE_VERIFY_SECONDS``: the time budget of verification (default 1800 s; also
  ``--verify-timeout``). The whole run is bounded by the wait timeout plus this budget: a
  watchdog thread ends the process with ``TIMED_OUT`` and its message even when a read is stuck
  in the kernel (a hung NFS server).
- ``KONTINUE_RESTORE_CHECKPOINT`` / ``KONTINUE_WAIT_CHECKPOINT``: Checkpoint names, for messages.
- ``KONTINUE_TERMINATION_LOG``: the termination message file (default ``/dev/termination-log``).

A torn awaited directory is never linked: "a checkpoint that is not known-good is never used"
and "a torn attempt never replaces the last good one" hold here, at the last moment.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kontinue import checkpoint_format, keys, restore

ExitCode = restore.ExitCode
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
DEFAULT_WAIT_SECONDS = 600.0
DEFAULT_VERIFY_SECONDS = 1800.0
POLL_SECONDS = 0.5
MAX_MESSAGE_BYTES = 4000
"""Under the kubelet's 4096-byte termination message limit, so nothing of the line is lost."""


class ConfigError(Exception):
    """The init container was set up wrongly; the message names the variable or option."""


@dataclasses.dataclass(frozen=True)
class Config:
    source: Path | None
    """Directory to restore from when nothing is awaited (or the awaited one fails)."""
    wait_for: Path | None
    link: Path | None
    """Link mode: the symlink to point at the chosen directory. ``None``: direct mode."""
    timeout: float
    termination_log: Path
    source_name: str = ""
    wait_name: str = ""
    poll: float = POLL_SECONDS
    member: str | None = None
    verify_timeout: float = DEFAULT_VERIFY_SECONDS


@dataclasses.dataclass(frozen=True)
class Outcome:
    code: int
    line: str
    chosen: Path | None = None


def _path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    if not value.startswith("/"):
        raise ConfigError(f"{name}={value!a} must be an absolute path")
    return Path(value)


def _seconds(raw: str | None, *, name: str, default: float) -> float:
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!a} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name}={raw!a} must be a finite number >= 0")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


def config_from(argv: Sequence[str], env: Mapping[str, str]) -> Config:
    """Parse options over the environment; :class:`ConfigError` names what is wrong."""
    parser = _Parser(prog=restore.SCRIPT, description="Verify and link the checkpoint to restore.")
    parser.add_argument("--timeout", default=None, help="seconds to wait at most")
    parser.add_argument("--verify-timeout", default=None, help="seconds to verify at most")
    parser.add_argument("--link", default=None, help="symlink to create (link mode)")
    parser.add_argument("--termination-log", default=None)
    parser.add_argument("--poll", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(list(argv))

    timeout = _seconds(
        args.timeout if args.timeout is not None else env.get(keys.ENV_WAIT_SECONDS),
        name="--timeout" if args.timeout is not None else keys.ENV_WAIT_SECONDS,
        default=DEFAULT_WAIT_SECONDS,
    )
    verify_timeout = _seconds(
        args.verify_timeout
        if args.verify_timeout is not None
        else env.get(keys.ENV_VERIFY_SECONDS),
        name="--verify-timeout" if args.verify_timeout is not None else keys.ENV_VERIFY_SECONDS,
        default=DEFAULT_VERIFY_SECONDS,
    )
    poll = _seconds(args.poll, name="--poll", default=POLL_SECONDS)

    wait_for = _path(env, keys.ENV_WAIT_FOR)
    restore_from = _path(env, keys.ENV_RESTORE_FROM)
    if args.link is not None or keys.ENV_RESTORE_SOURCE in env:
        # --link is absolute like the variables: a relative link would land in the working directory
        link = _path({"--link": args.link}, "--link") if args.link is not None else restore_from
        if link is None:
            raise ConfigError(f"link mode needs --link or {keys.ENV_RESTORE_FROM}")
        if not link.name:  # "/": no name to put a link at
            raise ConfigError(f"the link path {str(link)!a} names no file")
        source = _path(env, keys.ENV_RESTORE_SOURCE)
    else:
        link, source = None, restore_from
    if source is None and wait_for is None:
        raise ConfigError(
            f"nothing to restore: set {keys.ENV_RESTORE_FROM}, {keys.ENV_RESTORE_SOURCE} "
            f"or {keys.ENV_WAIT_FOR}"
        )
    if link is None and source is None:
        raise ConfigError(f"direct mode needs {keys.ENV_RESTORE_FROM} (the directory to verify)")
    log = args.termination_log or env.get(keys.ENV_TERMINATION_LOG) or DEFAULT_TERMINATION_LOG
    return Config(
        source=source,
        wait_for=wait_for,
        link=link,
        timeout=timeout,
        termination_log=Path(log),
        source_name=env.get(keys.ENV_RESTORE_CHECKPOINT, ""),
        wait_name=env.get(keys.ENV_WAIT_CHECKPOINT, ""),
        poll=max(0.01, poll),
        member=(
            env.get(keys.ENV_RESTORE_MEMBER, "").strip()
            or env.get(keys.ENV_MEMBER, "").strip()
            or None
        ),
        verify_timeout=verify_timeout,
    )


def _label(path: Path, name: str) -> str:
    return f"checkpoint {name} ({path})" if name else str(path)


def wait_for_manifest(
    directory: Path,
    *,
    timeout: float,
    poll: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Poll until ``directory``'s manifest exists; ``False`` once ``timeout`` has passed.

    Polling, not inotify: shared storage (NFS, EFS) delivers no events for another node's
    writes. The manifest is renamed into place, so its existence means it is complete. Any
    directory entry counts (``lexists``: a symlink or FIFO named ``MANIFEST.json`` too), so
    verification, not the wait, is what refuses it.
    """
    marker = os.path.join(directory, checkpoint_format.MANIFEST_NAME)
    deadline = clock() + timeout
    while True:
        if os.path.lexists(marker):
            return True
        remaining = deadline - clock()
        if remaining <= 0:
            return False
        sleep(min(poll, remaining))


def _verified(config: Config, directory: Path, name: str) -> str:
    manifest = checkpoint_format.verify(
        directory,
        member=config.member,
        deadline=time.monotonic() + config.verify_timeout,
        strict_path=True,
    )
    return (
        f"restore from {_label(directory, name)}: verified {len(manifest.files)} files, "
        f"{manifest.total_bytes} bytes"
    )


def run(config: Config) -> Outcome:
    """Decide and prepare the restore; the only side effect is the link (link mode)."""
    awaited: str | None = None  # why the awaited directory is not used, once known
    if config.wait_for is not None:
        arrived = wait_for_manifest(config.wait_for, timeout=config.timeout, poll=config.poll)
        label = _label(config.wait_for, config.wait_name)
        if not arrived:
            awaited = (
                f"{label}: no {checkpoint_format.MANIFEST_NAME} after {config.timeout:g}s "
                "(the previous incarnation's save did not complete)"
            )
            if config.link is None:
                return Outcome(ExitCode.WAIT_TIMEOUT, f"restore failed: {awaited}")
        elif config.link is not None:
            try:
                line = _verified(config, config.wait_for, config.wait_name)
            except checkpoint_format.Problem as problem:
                awaited = f"{label} unusable: {problem}"
            else:
                return _linked(config, config.wait_for, line)

    if config.source is not None:
        try:
            line = _verified(config, config.source, config.source_name)
        except checkpoint_format.Problem as problem:
            what = _label(config.source, config.source_name)
            return Outcome(restore.for_cause(problem.cause), f"restore failed: {what}: {problem}")
        if awaited:
            line += f" (instead of {awaited})"
        if config.link is None:
            return Outcome(ExitCode.OK, line, config.source)
        return _linked(config, config.source, line)

    assert config.link is not None  # config_from: direct mode always has a source
    _remove_link(config.link)
    return Outcome(ExitCode.OK, f"cold start: {awaited}; no older checkpoint to fall back to")


def _remove_link(link: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()


def _linked(config: Config, target: Path, line: str) -> Outcome:
    """Point ``config.link`` at ``target`` atomically (a restarted init container re-links)."""
    assert config.link is not None
    config.link.parent.mkdir(parents=True, exist_ok=True)
    tmp = config.link.with_name(config.link.name + ".tmp")
    _remove_link(tmp)
    tmp.symlink_to(target, target_is_directory=True)
    os.replace(tmp, config.link)
    return Outcome(ExitCode.OK, line, target)


def printable(line: str) -> str:
    """One line of valid UTF-8 under :data:`MAX_MESSAGE_BYTES` (lone surrogates escaped; every
    line break ``str.splitlines`` knows, ``\r`` too, made a space: a name from the environment
    may carry one)."""
    safe = " ".join(line.splitlines()).encode("utf-8", "backslashreplace")
    if len(safe) > MAX_MESSAGE_BYTES:
        safe = safe[: MAX_MESSAGE_BYTES - 3] + b"..."
    return safe.decode("utf-8", "ignore")


def report(outcome: Outcome, termination_log: Path | None) -> None:
    """Print the outcome's line and write it as the termination message (never raises)."""
    line = printable(outcome.line)
    stream = sys.stdout if outcome.code == ExitCode.OK else sys.stderr
    with contextlib.suppress(OSError, ValueError):  # no stdout: the message still says it
        print(line, file=stream, flush=True)
    if termination_log is None:
        return
    try:
        termination_log.write_text(line, encoding="utf-8")
    except (OSError, ValueError) as error:
        with contextlib.suppress(OSError, ValueError):
            print(f"cannot write termination message {termination_log}: {error}", file=sys.stderr)


def arm_watchdog(seconds: float, termination_log: Path | None) -> threading.Timer:
    """End the process with ``TIMED_OUT`` after ``seconds``, whatever the main thread is stuck
    in (a read blocked in the kernel cannot be interrupted from Python, but the process can
    still report and exit from another thread)."""

    def expire() -> None:
        report(
            Outcome(
                ExitCode.TIMED_OUT,
                f"restore failed: no outcome within {seconds:g}s (the checkpoint storage stopped "
                "answering?)",
            ),
            termination_log,
        )
        os._exit(ExitCode.TIMED_OUT)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


def _termination_log(env: Mapping[str, str]) -> Path:
    return Path(env.get(keys.ENV_TERMINATION_LOG) or DEFAULT_TERMINATION_LOG)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    environment = os.environ if env is None else env
    args = sys.argv[1:] if argv is None else list(argv)
    if restore.UNPLUMBED_FLAG in args:  # the Job template's stand-in (kontinue.restore.stand_in)
        report(
            Outcome(
                ExitCode.OK,
                "no restore: this pod was created without Kontinue's plumbing (was the webhook "
                "unreachable?); the workload starts cold",
            ),
            _termination_log(environment),
        )
        return ExitCode.OK
    try:
        config = config_from(args, environment)
    except ConfigError as error:
        report(
            Outcome(ExitCode.CONFIG, f"restore misconfigured: {error}"),
            _termination_log(environment),
        )
        return ExitCode.CONFIG
    watchdog = arm_watchdog(config.timeout + config.verify_timeout + 5, config.termination_log)
    try:
        outcome = run(config)
    except OSError as error:  # the link could not be made: the workload would not see it
        outcome = Outcome(ExitCode.UNREADABLE, f"restore failed: {error}")
    except Exception as error:  # every end must carry a code and a message
        outcome = Outcome(
            ExitCode.INTERNAL,
            f"restore failed: internal error {type(error).__name__}: {error}",
        )
    finally:
        watchdog.cancel()
    report(outcome, config.termination_log)
    return int(outcome.code)
