"""The reference trainer's on-disk checkpoint format: data files, then ``MANIFEST.json`` last.

A checkpoint directory is complete only when ``MANIFEST.json`` exists, carries the
``{"kontinue": "checkpoint"}`` marker and lists every data file with its size and sha256, and every
listed file matches. The manifest is written last (to a temporary name, fsynced, renamed, then the
directory fsynced), so a process killed mid-save (SIGKILL at the end of the grace period) leaves a
directory without a manifest: :func:`verify` rejects it and it is never mistaken for a good one.

Limits: this is the *trainer's* format, kept deliberately simple. The generic completeness check
used by Kontinue's restore init-container lives in Kontinue itself; this module is what the
reference workload uses to refuse a torn ``KONTINUE_RESTORE_FROM``. Files are read whole into
memory, which is fine for the emulated state sizes (megabytes) this workload keeps.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

MANIFEST_NAME = "MANIFEST.json"
MARKER_KEY = "kontinue"
MARKER_VALUE = "checkpoint"
MEMBER_KEY = "member"  # kontinue/keys.py MANIFEST_MEMBER_KEY: the saver's member identity
FORMAT = "reference-trainer/v1"
_TMP_SUFFIX = ".tmp"


class CheckpointError(Exception):
    """A checkpoint directory that must not be used; the message names the directory and cause."""


@dataclasses.dataclass(frozen=True)
class FileEntry:
    path: str
    bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Manifest:
    step: int
    files: tuple[FileEntry, ...]
    created_at: float
    member: str | None = None
    """The member identity that saved it (``KONTINUE_MEMBER``; kontinue/identity.py)."""

    @property
    def total_bytes(self) -> int:
        return sum(entry.bytes for entry in self.files)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            MARKER_KEY: MARKER_VALUE,
            "format": FORMAT,
            "step": self.step,
            "createdAt": self.created_at,
            "files": [dataclasses.asdict(entry) for entry in self.files],
        }
        if self.member is not None:
            body[MEMBER_KEY] = self.member
        return body


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _safe_relative(name: str, *, directory: Path) -> str:
    pure = PurePosixPath(name)
    if not name or pure.is_absolute() or ".." in pure.parts or name == MANIFEST_NAME:
        raise CheckpointError(f"{directory}: illegal file name {name!r} in checkpoint")
    return str(pure)


def write(
    directory: Path,
    *,
    step: int,
    files: Sequence[tuple[str, bytes]],
    seconds: float = 0.0,
    chunks: int = 20,
    sleep: Callable[[float], None] = time.sleep,
    member: str | None = None,
) -> Manifest:
    """Write ``files`` into ``directory`` and then the manifest; return the durable manifest.

    ``seconds`` spreads the data writes over that long (``chunks`` fsynced pieces with sleeps in
    between) to emulate a slow save of GPU state; the manifest comes only after every piece is
    durable. Refuses a directory that already holds a manifest: a checkpoint is never rewritten.
    """
    if step < 0:
        raise CheckpointError(f"{directory}: step must be >= 0, got {step}")
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / MANIFEST_NAME).exists():
        raise CheckpointError(
            f"{directory}: already holds a complete checkpoint; a checkpoint is never overwritten"
        )
    total = sum(len(data) for _, data in files)
    pieces = max(1, chunks)
    pause = seconds / pieces if seconds > 0 else 0.0
    piece_size = max(1, -(-total // pieces))
    entries: list[FileEntry] = []
    slept = 0.0
    for name, data in files:
        relative = _safe_relative(name, directory=directory)
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("wb") as out:
            for offset in range(0, len(data), piece_size):
                out.write(data[offset : offset + piece_size])
                out.flush()
                os.fsync(out.fileno())
                if pause:
                    sleep(pause)
                    slept += pause
        entries.append(FileEntry(relative, len(data), hashlib.sha256(data).hexdigest()))
    # Tiny or empty state still takes the configured save time.
    if seconds > slept:
        sleep(seconds - slept)
    _fsync_dir(directory)
    manifest = Manifest(step=step, files=tuple(entries), created_at=time.time(), member=member)
    tmp = directory / (MANIFEST_NAME + _TMP_SUFFIX)
    with tmp.open("w") as out:
        json.dump(manifest.to_json(), out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, directory / MANIFEST_NAME)
    _fsync_dir(directory)
    return manifest


def _parse(raw: Any, *, directory: Path) -> Manifest:
    where = f"{directory / MANIFEST_NAME}"
    if not isinstance(raw, dict) or raw.get(MARKER_KEY) != MARKER_VALUE:
        raise CheckpointError(f"{where}: not a checkpoint manifest (no kontinue marker)")
    if raw.get("format") != FORMAT:
        raise CheckpointError(f"{where}: format {raw.get('format')!r}, expected {FORMAT!r}")
    step = raw.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"{where}: step must be a non-negative integer, got {step!r}")
    files = raw.get("files")
    if not isinstance(files, list):
        raise CheckpointError(f"{where}: files must be a list")
    entries = []
    for index, item in enumerate(files):
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("path"), str)
            or not isinstance(item.get("bytes"), int)
            or not isinstance(item.get("sha256"), str)
        ):
            raise CheckpointError(f"{where}: files[{index}] needs path, bytes and sha256")
        relative = _safe_relative(item["path"], directory=directory)
        entries.append(FileEntry(relative, item["bytes"], item["sha256"]))
    created = raw.get("createdAt", 0.0)
    member = raw.get(MEMBER_KEY)
    if member is not None and not isinstance(member, str):
        raise CheckpointError(f"{where}: member must be a string, got {member!r}")
    return Manifest(step=step, files=tuple(entries), created_at=float(created), member=member)


def verify(directory: Path) -> Manifest:
    """The manifest of a complete checkpoint in ``directory``; :class:`CheckpointError` otherwise.

    Every listed file is re-read and hashed, so a truncated or altered file is caught, not only a
    missing manifest.
    """
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: checkpoint directory does not exist")
    manifest_path = directory / MANIFEST_NAME
    if not manifest_path.is_file():
        raise CheckpointError(
            f"{directory}: torn or incomplete checkpoint: no {MANIFEST_NAME} "
            "(the save never finished)"
        )
    try:
        raw = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{manifest_path}: unreadable manifest: {error}") from error
    manifest = _parse(raw, directory=directory)
    for entry in manifest.files:
        path = directory / entry.path
        try:
            data = path.read_bytes()
        except OSError as error:
            raise CheckpointError(
                f"{path}: listed in the manifest but unreadable: {error}"
            ) from None
        if len(data) != entry.bytes:
            raise CheckpointError(f"{path}: {len(data)} bytes, manifest says {entry.bytes}")
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise CheckpointError(f"{path}: sha256 does not match the manifest")
    return manifest
