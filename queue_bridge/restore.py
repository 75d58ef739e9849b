"""The restore init-container: ``python -m queue_bridge.restore``.

It runs before the workload's containers, with the checkpoint volume mounted read-only, and
decides from files alone (no API access, least privilege) which checkpoint directory the
workload restores from. Every outcome ends with ONE line, on stdout for success and on stderr for
failure, and the same line in the termination message file, so ``kubectl describe pod`` and the
bridge (which counts failed restores) both see why.

Environment (set by the webhook, webhook/plumbing.py):

- ``KONTINUE_WAIT_FOR``: the previous incarnation's directory, possibly still being written.
  Waited for (its ``MANIFEST.json``, polled) for at most ``--timeout`` seconds (default
  ``KONTINUE_WAIT_SECONDS``, else 600); used if it then verifies.
- ``KONTINUE_RESTORE_SOURCE``: the verified-good fallback directory (may be empty).
- ``KONTINUE_RESTORE_FROM``: with ``KONTINUE_RESTORE_SOURCE`` present (link mode), the path of
  the symlink to create, pointing at the directory chosen; the workload's containers get the same
  value and follow the link. Without ``KONTINUE_RESTORE_SOURCE`` (direct mode) it is itself the
  directory to verify, and ``KONTINUE_WAIT_FOR`` only delays the check.
- ``KONTINUE_RESTORE_CHECKPOINT`` / ``KONTINUE_WAIT_CHECKPOINT``: Checkpoint names, for messages.
- ``KONTINUE_TERMINATION_LOG``: the termination message file (default ``/dev/termination-log``).

Outcomes and exit codes:

- 0: restored (the link points at a verified directory), or — link mode only — a cold start
  because the awaited save never completed and there is no fallback (the link is absent, the
  workload starts from scratch: nothing good existed to restore);
- 2: bad configuration; 3: the directory is missing; 4: torn or invalid (no manifest, a file of
  the wrong size or digest); 5: unreadable; 6: direct mode timed out waiting.

A torn awaited directory is never linked: the rules "a checkpoint that is not known-good is never
used" and "a torn attempt never replaces the last good one" hold here, at the last moment.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kontinue import checkpoint_format, keys

ENV_RESTORE_SOURCE = keys.ENV_RESTORE_SOURCE
ENV_RESTORE_CHECKPOINT = keys.ENV_RESTORE_CHECKPOINT
ENV_WAIT_CHECKPOINT = keys.ENV_WAIT_CHECKPOINT
ENV_WAIT_SECONDS = keys.ENV_WAIT_SECONDS
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
DEFAULT_WAIT_SECONDS = 600.0
POLL_SECONDS = 0.5

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_CODES = {
    checkpoint_format.Cause.MISSING: 3,
    checkpoint_format.Cause.TORN: 4,
    checkpoint_format.Cause.INVALID: 4,
    checkpoint_format.Cause.UNREADABLE: 5,
}
EXIT_WAIT_TIMEOUT = 6


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
        raise ConfigError(f"{name}={value!r} must be an absolute path")
    return Path(value)


def config_from(argv: Sequence[str], env: Mapping[str, str]) -> Config:
    """Parse options over the environment; :class:`ConfigError` names what is wrong."""
    parser = argparse.ArgumentParser(prog="python -m queue_bridge.restore", add_help=True)
    parser.add_argument("--timeout", type=float, default=None, help="seconds to wait at most")
    parser.add_argument("--link", default=None, help="symlink to create (link mode)")
    parser.add_argument("--termination-log", default=None)
    parser.add_argument("--poll", type=float, default=POLL_SECONDS, help=argparse.SUPPRESS)
    args = parser.parse_args(list(argv))

    timeout = args.timeout
    if timeout is None:
        raw = env.get(ENV_WAIT_SECONDS, "").strip()
        try:
            timeout = float(raw) if raw else DEFAULT_WAIT_SECONDS
        except ValueError:
            raise ConfigError(f"{ENV_WAIT_SECONDS}={raw!r} is not a number") from None
    if timeout < 0:
        raise ConfigError(f"timeout {timeout} must be >= 0")

    wait_for = _path(env, keys.ENV_WAIT_FOR)
    restore_from = _path(env, keys.ENV_RESTORE_FROM)
    if args.link is not None or ENV_RESTORE_SOURCE in env:
        link = Path(args.link) if args.link is not None else restore_from
        if link is None:
            raise ConfigError(f"link mode needs --link or {keys.ENV_RESTORE_FROM}")
        source = _path(env, ENV_RESTORE_SOURCE)
    else:
        link, source = None, restore_from
    if source is None and wait_for is None:
        raise ConfigError(
            f"nothing to restore: set {keys.ENV_RESTORE_FROM}, {ENV_RESTORE_SOURCE} "
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
        source_name=env.get(ENV_RESTORE_CHECKPOINT, ""),
        wait_name=env.get(ENV_WAIT_CHECKPOINT, ""),
        poll=max(0.01, args.poll),
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
    writes. The manifest is renamed into place, so its existence means it is complete.
    """
    marker = directory / checkpoint_format.MANIFEST_NAME
    deadline = clock() + timeout
    while True:
        if marker.exists():
            return True
        remaining = deadline - clock()
        if remaining <= 0:
            return False
        sleep(min(poll, remaining))


def _verified(directory: Path, name: str) -> str:
    manifest = checkpoint_format.verify(directory)
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
                return Outcome(EXIT_WAIT_TIMEOUT, f"restore failed: {awaited}")
        elif config.link is not None:
            try:
                line = _verified(config.wait_for, config.wait_name)
            except checkpoint_format.Problem as problem:
                awaited = f"{label} unusable: {problem}"
            else:
                return _linked(config, config.wait_for, line)

    if config.source is not None:
        try:
            line = _verified(config.source, config.source_name)
        except checkpoint_format.Problem as problem:
            what = _label(config.source, config.source_name)
            return Outcome(EXIT_CODES[problem.cause], f"restore failed: {what}: {problem}")
        if awaited:
            line += f" (instead of {awaited})"
        if config.link is None:
            return Outcome(EXIT_OK, line, config.source)
        return _linked(config, config.source, line)

    assert config.link is not None  # config_from: direct mode always has a source
    _remove_link(config.link)
    return Outcome(EXIT_OK, f"cold start: {awaited}; no older checkpoint to fall back to")


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
    return Outcome(EXIT_OK, line, target)


def _report(outcome: Outcome, termination_log: Path | None) -> None:
    stream = sys.stdout if outcome.code == EXIT_OK else sys.stderr
    print(outcome.line, file=stream, flush=True)
    if termination_log is None:
        return
    try:
        termination_log.write_text(outcome.line)
    except OSError as error:
        print(f"cannot write termination message {termination_log}: {error}", file=sys.stderr)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    environment = os.environ if env is None else env
    try:
        config = config_from(sys.argv[1:] if argv is None else argv, environment)
    except ConfigError as error:
        log = environment.get(keys.ENV_TERMINATION_LOG) or DEFAULT_TERMINATION_LOG
        _report(Outcome(EXIT_CONFIG, f"restore misconfigured: {error}"), Path(log))
        return EXIT_CONFIG
    try:
        outcome = run(config)
    except OSError as error:  # the link could not be made: the workload would not see it
        outcome = Outcome(
            EXIT_CODES[checkpoint_format.Cause.UNREADABLE], f"restore failed: {error}"
        )
    _report(outcome, config.termination_log)
    return outcome.code


if __name__ == "__main__":
    sys.exit(main())
