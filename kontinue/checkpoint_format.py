"""The completeness contract of a checkpoint directory: data first, ``MANIFEST.json`` last.

A directory is a complete checkpoint only if ``MANIFEST.json`` exists, is one JSON object with
the marker ``"kontinue": "checkpoint"`` (``"saved"`` is accepted too) and a ``files`` list of
``{"path", "bytes", "sha256"}``, and every listed file is there, readable, of that size and that
digest. The writer puts the manifest last (temporary name, fsync, rename, fsync the directory),
so a save cut short by SIGKILL leaves no manifest and is refused, never mistaken for a good one.

This is the generic check Kontinue's restore init-container runs (``python -m
queue_bridge.restore``); the reference trainer's own format (reference_workload/
checkpoint_format.py, ``"format": "reference-trainer/v1"``) is one instance of it. Other keys in
the manifest (``format``, ``step``, ...) belong to the workload and are ignored here. A workload
in Python may call :func:`write_manifest` after writing its files.

Limits: every file is re-read and hashed (streamed, 1 MiB at a time), so verification costs one
read of the checkpoint; files not listed are ignored; symlinks are followed only inside the
directory.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
from collections.abc import Collection
from pathlib import Path, PurePosixPath
from typing import Any

from kontinue import keys

MANIFEST_NAME = keys.CHECKPOINT_MANIFEST_FILE
MARKER_KEY = keys.SAVED_MARKER_KEY
MARKER_VALUE = "checkpoint"
ACCEPTED_MARKERS = frozenset({MARKER_VALUE, keys.SAVED_MARKER_VALUE})
_CHUNK = 1 << 20
_TMP_SUFFIX = ".tmp"


class Cause(enum.StrEnum):
    MISSING = "missing"
    TORN = "torn"
    UNREADABLE = "unreadable"
    INVALID = "invalid"


class Problem(Exception):
    """Why a directory is not a usable checkpoint; ``str()`` is one line naming it."""

    def __init__(self, cause: Cause, directory: Path, detail: str) -> None:
        self.cause = cause
        self.directory = directory
        self.detail = detail
        super().__init__(f"{cause.value}: {directory}: {detail}")


@dataclasses.dataclass(frozen=True)
class Entry:
    path: str
    bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Manifest:
    files: tuple[Entry, ...]
    extra: dict[str, Any]
    """Every other key of the manifest (the workload's own: ``format``, ``step``, ...)."""

    @property
    def total_bytes(self) -> int:
        return sum(entry.bytes for entry in self.files)


def _relative(name: object, *, directory: Path, index: int) -> str:
    if not isinstance(name, str) or not name:
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} files[{index}].path missing")
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or name == MANIFEST_NAME:
        raise Problem(
            Cause.INVALID, directory, f"{MANIFEST_NAME} files[{index}].path {name!r} is illegal"
        )
    return str(pure)


def parse(raw: object, *, directory: Path) -> Manifest:
    """Validate a loaded manifest; :class:`Problem` (invalid) names the key."""
    if not isinstance(raw, dict):
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} is not a JSON object")
    if raw.get(MARKER_KEY) not in ACCEPTED_MARKERS:
        raise Problem(
            Cause.INVALID,
            directory,
            f"{MANIFEST_NAME} lacks the marker {{{MARKER_KEY!r}: {MARKER_VALUE!r}}}",
        )
    files = raw.get("files")
    if not isinstance(files, list):
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} files must be a list")
    entries = []
    for index, item in enumerate(files):
        if not isinstance(item, dict):
            raise Problem(
                Cause.INVALID, directory, f"{MANIFEST_NAME} files[{index}] is not an object"
            )
        path = _relative(item.get("path"), directory=directory, index=index)
        size, digest = item.get("bytes"), item.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise Problem(
                Cause.INVALID, directory, f"{MANIFEST_NAME} files[{index}].bytes must be >= 0"
            )
        if not isinstance(digest, str) or len(digest) != 64:
            raise Problem(
                Cause.INVALID, directory, f"{MANIFEST_NAME} files[{index}].sha256 is not a digest"
            )
        entries.append(Entry(path, size, digest.lower()))
    extra = {k: v for k, v in raw.items() if k not in (MARKER_KEY, "files")}
    return Manifest(tuple(entries), extra)


def read_manifest(directory: Path) -> Manifest:
    """The parsed manifest of ``directory`` without checking the files (see :func:`verify`)."""
    if not directory.exists():
        raise Problem(Cause.MISSING, directory, "checkpoint directory does not exist")
    if not directory.is_dir():
        raise Problem(Cause.MISSING, directory, "not a directory")
    try:
        os.listdir(directory)
    except OSError as error:
        raise Problem(Cause.UNREADABLE, directory, error.strerror or str(error)) from None
    path = directory / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Problem(
            Cause.TORN, directory, f"no {MANIFEST_NAME}: the save never finished"
        ) from None
    except OSError as error:
        detail = f"{MANIFEST_NAME}: {error.strerror or error}"
        raise Problem(Cause.UNREADABLE, directory, detail) from None
    except UnicodeDecodeError:
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} is not UTF-8") from None
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} is not JSON: {error}") from None
    return parse(raw, directory=directory)


def _check_file(directory: Path, entry: Entry) -> None:
    path = directory / entry.path
    root = directory.resolve()
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        raise Problem(Cause.TORN, directory, f"file {entry.path} is missing") from None
    except OSError as error:
        detail = f"file {entry.path}: {error.strerror or error}"
        raise Problem(Cause.UNREADABLE, directory, detail) from None
    if root not in real.parents:
        raise Problem(Cause.INVALID, directory, f"file {entry.path} points outside the directory")
    digest = hashlib.sha256()
    size = 0
    try:
        with real.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                size += len(chunk)
                digest.update(chunk)
    except OSError as error:
        detail = f"file {entry.path}: {error.strerror or error}"
        raise Problem(Cause.UNREADABLE, directory, detail) from None
    if size != entry.bytes:
        raise Problem(
            Cause.TORN,
            directory,
            f"file {entry.path} size mismatch: {size} bytes, manifest says {entry.bytes}",
        )
    if digest.hexdigest() != entry.sha256:
        raise Problem(Cause.TORN, directory, f"file {entry.path} sha256 mismatch")


def verify(directory: Path) -> Manifest:
    """The manifest of the complete checkpoint in ``directory``, else :class:`Problem`."""
    manifest = read_manifest(directory)
    for entry in manifest.files:
        _check_file(directory, entry)
    return manifest


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(
    directory: Path, *, extra: dict[str, Any] | None = None, exclude: Collection[str] = ()
) -> Manifest:
    """List every regular file under ``directory`` in a manifest written last and durably.

    Call it after the data files are written (it fsyncs each before listing it). Refuses a
    directory that already has a manifest: a checkpoint is never rewritten. ``exclude`` names
    top-level entries left out of the manifest (the workload SDK keeps its snapshots, each a
    checkpoint of its own, in ``snapshots/``: kontinue_sdk/session.py).
    """
    target = directory / MANIFEST_NAME
    if target.exists():
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} exists: never rewritten")
    entries = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = path.relative_to(directory).as_posix()
        if relative in (MANIFEST_NAME, MANIFEST_NAME + _TMP_SUFFIX):
            continue
        if PurePosixPath(relative).parts[0] in exclude:
            continue
        digest = hashlib.sha256()
        with path.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
            os.fsync(stream.fileno())
        entries.append(Entry(relative, path.stat().st_size, digest.hexdigest()))
    manifest = Manifest(tuple(entries), dict(extra or {}))
    body = {
        **manifest.extra,
        MARKER_KEY: MARKER_VALUE,
        "files": [dataclasses.asdict(e) for e in entries],
    }
    _fsync_dir(directory)
    tmp = directory / (MANIFEST_NAME + _TMP_SUFFIX)
    with tmp.open("w", encoding="utf-8") as out:
        json.dump(body, out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)
    _fsync_dir(directory)
    return manifest
