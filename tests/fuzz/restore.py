"""The restore program under fuzzing (issue 11, "Fuzz": "the restore program's exit code is
always one of the documented ones").

An input is a checkpoint directory as the workload would have written it (1-3 files, a
``MANIFEST.json`` in the format of :func:`kontinue.checkpoint_format.write_manifest`, with or
without the writer's member identity), then bent: the manifest's JSON gets 0-3 of the admission
fuzzer's mutations (:mod:`tests.fuzz.inputs`) or its bytes are truncated or flipped, and/or the
files on disk are damaged (a listed file changed, truncated, grown, removed, or replaced by a
symlink out of the directory, to ``/dev/zero``, to another listed file, by a FIFO or a
directory; the manifest a symlink, a FIFO or gone; the directory itself a symlink, a file or
missing; an unlisted file added). It is restored in one of the three ways the webhook sets the
restore container up (kontinue/restore/program.py): *direct* (``KONTINUE_RESTORE_FROM``), *link*
(``KONTINUE_RESTORE_SOURCE`` + the link) or *await* (``KONTINUE_WAIT_FOR`` with no wait, a good
fallback as the source), sometimes with the member variable naming another member, and
sometimes with junk in the other variables and options.

:func:`check` runs :func:`kontinue.restore.program.main` in this process (the same function the
``kontinue-restore`` command runs) and returns what is wrong:

1. it raises, or returns a code that is not a documented :class:`kontinue.restore.ExitCode`, or
   ``INTERNAL`` (an exception the program did not expect: a bug, like a traceback);
2. it does not print exactly one line (on stdout for 0, on stderr otherwise) or the termination
   message is not that line;
3. with the manifest as written and the environment as the webhook sets it, the outcome is not
   what the format promises: an intact checkpoint of this member restores (0, the link points at
   it); a damaged one, or another member's, is never used (a non-zero code, or, awaited, the
   link points at the good fallback).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from kontinue import checkpoint_format, keys, restore
from kontinue.restore import program
from tests.fuzz import inputs

Obj = dict[str, Any]
MANIFEST = checkpoint_format.MANIFEST_NAME
DOCUMENTED = frozenset(int(code) for code in restore.ExitCode)
MEMBER = "index=0"

FILE_DAMAGES = (
    "flip",
    "truncate",
    "grow",
    "remove",
    "symlink-outside",
    "symlink-dev-zero",
    "symlink-inside",
    "fifo",
    "directory",
)
"""Damage to one listed file: each makes the checkpoint unusable."""
DIRECTORY_DAMAGES = (
    "manifest-removed",
    "manifest-symlink",
    "manifest-fifo",
    "directory-symlink",
    "directory-is-a-file",
    "directory-missing",
)
"""Damage to the directory or its manifest: each makes the checkpoint unusable."""
HARMLESS = ("none", "none", "none", "unlisted-file")
MODES = ("direct", "link", "await")
NAMES = ("state.bin", "shards/rank0.pt", "meta.json", "é.bin", "deep/er/x")

# Junk for the other variables and options. Never a wait longer than 0.01 s (a real wait only
# slows the fuzzer down; tests/integration/restore tests the waits): no empty value, which means
# the default of 600 s, and no "٣", which float() reads as 3.
WAIT_JUNK = ("0", "-1", "nan", "inf", "1e400", "abc", "0.01")
VERIFY_JUNK = (*WAIT_JUNK, "", " ", "٣")
ENV_JUNK_KEYS = (
    keys.ENV_WAIT_SECONDS,
    keys.ENV_VERIFY_SECONDS,
    keys.ENV_RESTORE_MEMBER,
    keys.ENV_MEMBER,
    keys.ENV_RESTORE_FROM,
    keys.ENV_RESTORE_SOURCE,
    keys.ENV_WAIT_FOR,
    keys.ENV_RESTORE_CHECKPOINT,
)
# "AREA" is the input's own directory. Paths the program only reads may lie anywhere; the link
# it writes (KONTINUE_RESTORE_FROM in link mode, --link) stays inside AREA (the program runs
# there, so relative paths do too): it replaces whatever the link path names.
READ_PATHS = ("", "relative/dir", "/", "/nonexistent/x", "/dev/null", "/proc/self", "AREA/ns")
LINK_PATHS = ("", "relative/link", "AREA", "AREA/ns", "AREA/restore/../x", "a\udcff")


@dataclasses.dataclass(frozen=True)
class Case:
    """One restore-program input: the files, the manifest's bytes, the damage, the set-up."""

    files: tuple[tuple[str, bytes], ...]
    manifest: bytes
    manifest_bent: bool
    """The manifest is not as the writer wrote it (JSON mutations or damaged bytes)."""
    damage: str
    target: int
    """Which listed file a file damage hits."""
    mode: str
    member_env: str | None
    member_written: str | None
    env_junk: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]

    @property
    def as_the_webhook_sets_it(self) -> bool:
        return not self.env_junk and not self.argv

    @property
    def usable(self) -> bool:
        """What the format promises for this directory and this member (manifest as written)."""
        other = (
            self.member_env is not None
            and self.member_written is not None
            and self.member_env != self.member_written
        )
        return self.damage in HARMLESS and not other

    def describe(self) -> str:
        text = self.manifest[:200].decode("utf-8", "replace")
        return (
            f"mode {self.mode}, damage {self.damage}[{self.target}], member env "
            f"{self.member_env!r} written {self.member_written!r}, env junk {self.env_junk!r}, "
            f"argv {self.argv!r}, files {[n for n, _ in self.files]}, manifest "
            f"{'bent' if self.manifest_bent else 'as written'} ({len(self.manifest)} bytes): {text}"
        )


def _manifest(files: tuple[tuple[str, bytes], ...], member: str | None) -> Obj:
    """The manifest :func:`kontinue.checkpoint_format.write_manifest` writes for ``files``."""
    body: Obj = {
        checkpoint_format.MARKER_KEY: checkpoint_format.MARKER_VALUE,
        "files": [
            {"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for name, data in sorted(files)
        ],
    }
    if member is not None:
        body[checkpoint_format.MEMBER_KEY] = member
    return body


@st.composite
def cases(draw: st.DrawFn) -> Case:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    # distinct contents: a symlink to another listed file never verifies by accident
    files = tuple(
        (name, name.encode() + b":" + draw(st.binary(max_size=48))) for name in sorted(names)
    )
    member_written = draw(st.sampled_from([MEMBER, None]))
    doc = _manifest(files, member_written)
    bent = False
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):
        if not doc:  # every key deleted: nothing left to bend
            break
        draw(inputs._mutate(doc))
        bent = True
    try:
        body = json.dumps(doc, sort_keys=True, ensure_ascii=draw(st.booleans()))
        manifest = body.encode("utf-8", "surrogatepass")
    except (TypeError, ValueError):  # a mutation put a key json cannot sort with the others
        manifest = json.dumps(doc).encode("utf-8", "surrogatepass")
    raw = draw(st.sampled_from(["none"] * 8 + ["truncate", "flip"]))
    if raw == "truncate" and manifest:
        manifest = manifest[: draw(st.integers(0, len(manifest) - 1))]
        bent = True
    elif raw == "flip" and manifest:
        at = draw(st.integers(0, len(manifest) - 1))
        manifest = (
            manifest[:at] + bytes([manifest[at] ^ draw(st.integers(1, 255))]) + manifest[at + 1 :]
        )
        bent = True
    damage = draw(st.sampled_from(HARMLESS + FILE_DAMAGES + DIRECTORY_DAMAGES))
    junk: list[tuple[str, str]] = []
    argv: list[str] = []
    if draw(st.integers(0, 5)) == 0:
        for key in draw(st.lists(st.sampled_from(ENV_JUNK_KEYS), min_size=1, max_size=3)):
            if key == keys.ENV_WAIT_SECONDS:
                value = draw(st.sampled_from(WAIT_JUNK))
            elif key == keys.ENV_VERIFY_SECONDS:
                value = draw(st.sampled_from(VERIFY_JUNK))
            elif key == keys.ENV_RESTORE_FROM:
                value = draw(st.sampled_from(LINK_PATHS))
            elif key in (keys.ENV_RESTORE_SOURCE, keys.ENV_WAIT_FOR):
                value = draw(st.sampled_from(READ_PATHS))
            else:
                value = draw(st.text(st.characters(exclude_characters="\x00"), max_size=12))
            junk.append((key, value))
        if draw(st.booleans()):
            option = draw(st.sampled_from(["--timeout", "--verify-timeout", "--link", "--bogus"]))
            values = {"--timeout": WAIT_JUNK, "--verify-timeout": VERIFY_JUNK}
            argv = [option] if option == "--bogus" else [option]
            if option != "--bogus":
                argv.append(draw(st.sampled_from(values.get(option, LINK_PATHS))))
    return Case(
        files=files,
        manifest=manifest,
        manifest_bent=bent,
        damage=damage,
        target=draw(st.integers(0, len(files) - 1)),
        mode=draw(st.sampled_from(MODES)),
        member_env=draw(st.sampled_from([MEMBER, "index=1", None])),
        member_written=member_written,
        env_junk=tuple(junk),
        argv=tuple(argv),
    )


def _write(directory: Path, case: Case, area: Path) -> None:
    """Lay ``case`` out at ``directory`` as a save would, then damage it."""
    directory.mkdir(parents=True)
    for name, data in case.files:
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    (directory / MANIFEST).write_bytes(case.manifest)
    name, data = case.files[case.target]
    victim = directory / name
    damage = case.damage
    if damage == "flip":
        victim.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    elif damage == "truncate":
        victim.write_bytes(data[:-1])
    elif damage == "grow":
        victim.write_bytes(data + b"x")
    elif damage in ("remove", "symlink-outside", "symlink-dev-zero", "symlink-inside", "fifo"):
        victim.unlink()
        if damage == "symlink-outside":
            secret = area / "secret"
            secret.write_bytes(data)  # same bytes: only where it lies is wrong
            victim.symlink_to(secret)
        elif damage == "symlink-dev-zero":
            victim.symlink_to("/dev/zero")
        elif damage == "symlink-inside":
            victim.symlink_to(directory / MANIFEST)
        elif damage == "fifo":
            os.mkfifo(victim)
    elif damage == "directory":
        victim.unlink()
        victim.mkdir()
    elif damage == "unlisted-file":
        (directory / "unlisted.tmp").write_bytes(b"not in the manifest")
    elif damage in ("manifest-removed", "manifest-symlink", "manifest-fifo"):
        (directory / MANIFEST).unlink()
        if damage == "manifest-symlink":
            elsewhere = area / "elsewhere.json"
            elsewhere.write_bytes(case.manifest)
            (directory / MANIFEST).symlink_to(elsewhere)
        elif damage == "manifest-fifo":
            os.mkfifo(directory / MANIFEST)
    elif damage == "directory-symlink":
        real = area / "real-checkpoint"
        directory.rename(real)
        directory.symlink_to(real, target_is_directory=True)
    elif damage == "directory-is-a-file":
        shutil.rmtree(directory)
        directory.write_bytes(b"not a directory")
    elif damage == "directory-missing":
        shutil.rmtree(directory)


def _good(directory: Path, member: str | None) -> None:
    """The awaited mode's fallback: this member's checkpoint, by the format's own writer."""
    directory.mkdir(parents=True)
    (directory / "state.bin").write_bytes(b"good")
    checkpoint_format.write_manifest(directory, member=member)


def _env(case: Case, area: Path, directory: Path, good: Path, log: Path) -> dict[str, str]:
    env = {keys.ENV_TERMINATION_LOG: str(log), keys.ENV_WAIT_SECONDS: "0"}
    link = area / "restore" / "current"
    if case.mode == "direct":
        env[keys.ENV_RESTORE_FROM] = str(directory)
    elif case.mode == "link":
        env |= {keys.ENV_RESTORE_SOURCE: str(directory), keys.ENV_RESTORE_FROM: str(link)}
    else:
        env |= {
            keys.ENV_WAIT_FOR: str(directory),
            keys.ENV_WAIT_SECONDS: "0",
            keys.ENV_RESTORE_SOURCE: str(good),
            keys.ENV_RESTORE_FROM: str(link),
        }
    if case.member_env is not None:
        env[keys.ENV_RESTORE_MEMBER] = case.member_env
    env |= {key: value.replace("AREA", str(area)) for key, value in case.env_junk}
    return env


def _promised(case: Case, code: int, area: Path, directory: Path, good: Path) -> list[str]:
    """Property 3: what the format promises, checked when it applies."""
    if case.manifest_bent or not case.as_the_webhook_sets_it:
        return []
    link = area / "restore" / "current"
    target = os.readlink(link) if link.is_symlink() else None
    if case.mode == "await":
        expected = directory if case.usable else good
        if code != restore.ExitCode.OK or target != str(expected):
            return [f"awaited: exit {code}, link -> {target!r}, expected 0 and -> {expected}"]
        return []
    if case.usable and code != restore.ExitCode.OK:
        return [f"an intact checkpoint of this member was refused (exit {code})"]
    if not case.usable and code == restore.ExitCode.OK:
        return [f"a checkpoint that is not usable ({case.damage}) was restored"]
    if case.mode == "link" and code == restore.ExitCode.OK and target != str(directory):
        return [f"link -> {target!r}, expected {directory}"]
    return []


def check(case: Case, scratch: Path) -> list[str]:
    """What is wrong with the restore program's end for ``case`` (empty: nothing).

    ``scratch`` is a directory reached through no symlink (the program refuses such paths);
    everything is written in a fresh directory under it and removed afterwards.
    """
    area = Path(tempfile.mkdtemp(dir=scratch))
    try:
        directory = area / "ns" / "lineage" / "pod-uid"
        good = area / "ns" / "lineage" / "older"
        directory.parent.mkdir(parents=True)
        _write(directory, case, area)
        if case.mode == "await":
            _good(good, case.member_env)
        log = area / "termination-log"
        out, err = io.StringIO(), io.StringIO()
        argv = [arg.replace("AREA", str(area)) for arg in case.argv]
        env = _env(case, area, directory, good, log)
        try:
            with (
                contextlib.chdir(area),
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
            ):
                code = program.main(argv, env)
        except BaseException as exc:  # SystemExit too: every end must be a returned code
            return [f"raised {type(exc).__name__}: {exc}"]
        problems: list[str] = []
        if code not in DOCUMENTED:
            problems.append(f"exit {code} is not a documented exit code")
        elif code == restore.ExitCode.INTERNAL:
            problems.append(f"an unexpected error (INTERNAL): {err.getvalue().strip()[:300]}")
        shown, other = (out, err) if code == restore.ExitCode.OK else (err, out)
        lines = shown.getvalue().splitlines()
        if len(lines) != 1 or other.getvalue():
            problems.append(f"not one line: stdout {out.getvalue()!r} stderr {err.getvalue()!r}")
        message = log.read_bytes().decode("utf-8") if log.exists() else None  # no newline mapping
        if lines and message != lines[0]:
            problems.append(f"termination message {message!r} is not the line {lines[0]!r}")
        if message is not None and len(message.encode()) > program.MAX_MESSAGE_BYTES:
            problems.append("termination message not bounded")
        return problems + _promised(case, code, area, directory, good)
    finally:
        shutil.rmtree(area, ignore_errors=True)


def scratch_directory() -> Path:
    """A fresh directory whose path passes through no symlink (``/tmp`` may be one)."""
    return Path(os.path.realpath(tempfile.mkdtemp(prefix="kontinue-restore-fuzz-")))
