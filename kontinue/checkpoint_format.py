"""The completeness contract of a checkpoint directory: data first, ``MANIFEST.json`` last.

A directory is a complete checkpoint only if ``MANIFEST.json`` exists, is one JSON object with
the marker ``"kontinue": "checkpoint"`` (``"saved"`` is accepted too) and a ``files`` list of
``{"path", "bytes", "sha256"}``, and every listed file is there, readable, of that size and that
digest. The writer puts the manifest last (temporary name, fsync, rename, fsync the directory),
so a save cut short by SIGKILL leaves no manifest and is refused, never mistaken for a good one.

An optional ``"member"`` key names the member identity of the pod that saved (the
``KONTINUE_MEMBER`` value the webhook gives each container, e.g. ``index=1``,
``replicatedJob=workers,jobIndex=0,index=1`` or ``task=worker,index=1``); :func:`check_member`
refuses a directory that names another member. Other keys (``format``, ``step``, ...) belong to
the workload and are ignored here.

This is the one implementation of the format: Kontinue's restore init-container
(:mod:`kontinue.restore`, the ``kontinue-restore`` command) verifies with it, and a workload in
Python may call :func:`write_manifest` after writing its files (the workload SDK,
kontinue_sdk/session.py, and the reference trainer, reference_workload/trainer.py, both do). It
imports nothing outside the standard library and :mod:`kontinue.keys` (itself standard-library
only), so it can run inside any training image.

What a directory must not do, and what verification costs:

- with ``strict_path`` (the restore init-container's checks), the directory must be a real
  directory reached without a symlink on its path (a symlinked checkpoint directory could point
  at another lineage's tree); a workload reads through the init container's own link, so the
  default follows it. ``MANIFEST.json`` must be a regular
  file, not a symlink; every listed file must be a regular file inside the directory (symlinks are
  followed only while they stay inside it). FIFOs, devices and sockets are refused without being
  read (files are opened non-blocking, then checked with ``fstat``).
- reads are bounded: the manifest to :data:`MAX_MANIFEST_BYTES` and a JSON nesting the parser can
  take; a listed file to its recorded size (a file of another size is torn, unread); every file
  is re-read and hashed 1 MiB at a time, so verification costs one read of the checkpoint, and
  an optional ``deadline`` (``time.monotonic()``) is checked between chunks.
- files not listed are ignored.
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Collection
from pathlib import Path, PurePosixPath
from typing import Any

from kontinue import keys

MANIFEST_NAME = keys.CHECKPOINT_MANIFEST_FILE
MARKER_KEY = keys.SAVED_MARKER_KEY
MARKER_VALUE = "checkpoint"
MEMBER_KEY = keys.MANIFEST_MEMBER_KEY
ACCEPTED_MARKERS = frozenset({MARKER_VALUE, keys.SAVED_MARKER_VALUE})
MAX_MANIFEST_BYTES = 16 << 20
"""A manifest lists files, not data: 16 MiB is ~100,000 entries, far beyond any real checkpoint."""
_CHUNK = 1 << 20
_TMP_SUFFIX = ".tmp"
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Cause(enum.StrEnum):
    MISSING = "missing"
    TORN = "torn"
    UNREADABLE = "unreadable"
    INVALID = "invalid"
    REFUSED = "refused"
    """Not a regular file, a symlinked directory or manifest, or a symlink leaving the directory."""
    OTHER_MEMBER = "other-member"
    """The manifest names another member than the one restoring."""
    TIMED_OUT = "timed-out"
    """Verification did not finish before its deadline."""


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

    @property
    def member(self) -> str | None:
        """The member identity recorded by the writer, ``None`` in manifests that predate it."""
        value = self.extra.get(MEMBER_KEY)
        return value if isinstance(value, str) else None


def _text_ok(name: str) -> bool:
    """A name a path can carry: no NUL byte, and valid UTF-8 (no lone surrogate)."""
    if "\x00" in name:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _relative(name: object, *, directory: Path, index: int) -> str:
    if not isinstance(name, str) or not name:
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} files[{index}].path missing")
    pure = PurePosixPath(name)
    if (
        not _text_ok(name)
        or pure.is_absolute()
        or ".." in pure.parts
        or str(pure) in (".", MANIFEST_NAME)
    ):
        raise Problem(
            Cause.INVALID, directory, f"{MANIFEST_NAME} files[{index}].path {name!a} is illegal"
        )
    return str(pure)


def parse(raw: object, *, directory: Path) -> Manifest:
    """Validate a loaded manifest; :class:`Problem` (invalid) names the key."""
    if not isinstance(raw, dict):
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} is not a JSON object")
    marker = raw.get(MARKER_KEY)
    if not isinstance(marker, str) or marker not in ACCEPTED_MARKERS:
        raise Problem(
            Cause.INVALID,
            directory,
            f"{MANIFEST_NAME} lacks the marker {{{MARKER_KEY!r}: {MARKER_VALUE!r}}}",
        )
    member = raw.get(MEMBER_KEY)
    if member is not None and (not isinstance(member, str) or not _text_ok(member)):
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} {MEMBER_KEY} must be a string")
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
        if (
            not isinstance(digest, str)
            or len(digest) != 64
            or any(c not in "0123456789abcdefABCDEF" for c in digest)
        ):
            raise Problem(
                Cause.INVALID, directory, f"{MANIFEST_NAME} files[{index}].sha256 is not a digest"
            )
        entries.append(Entry(path, size, digest.lower()))
    extra = {k: v for k, v in raw.items() if k not in (MARKER_KEY, "files")}
    return Manifest(tuple(entries), extra)


def _strerror(error: OSError) -> str:
    return error.strerror or str(error)


def _real_directory(directory: Path, *, strict_path: bool) -> None:
    """Refuse a path that is not a directory; with ``strict_path`` also one that is, or is
    reached through, a symlink (see the module doc)."""
    if not _text_ok(str(directory)):
        raise Problem(Cause.INVALID, directory, "the path is not valid UTF-8 text")
    try:
        info = os.lstat(directory) if strict_path else os.stat(directory)
    except FileNotFoundError:
        raise Problem(Cause.MISSING, directory, "checkpoint directory does not exist") from None
    except NotADirectoryError:
        raise Problem(Cause.MISSING, directory, "a parent is not a directory") from None
    except OSError as error:
        raise Problem(Cause.UNREADABLE, directory, _strerror(error)) from None
    if stat.S_ISLNK(info.st_mode):
        raise Problem(Cause.REFUSED, directory, "checkpoint directory is a symlink")
    if not stat.S_ISDIR(info.st_mode):
        raise Problem(Cause.MISSING, directory, "not a directory")
    absolute = os.path.abspath(directory)
    if strict_path and os.path.realpath(absolute) != absolute:
        raise Problem(
            Cause.REFUSED,
            directory,
            f"the path passes through a symlink (it resolves to {os.path.realpath(absolute)!a})",
        )


def _open_regular(directory: Path, path: str, what: str) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading without following a final symlink or blocking on a FIFO; the
    descriptor is returned only for a regular file (the caller closes it)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise Problem(Cause.REFUSED, directory, f"{what} is a symlink") from None
        raise Problem(Cause.UNREADABLE, directory, f"{what}: {_strerror(error)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Problem(Cause.REFUSED, directory, f"{what} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read_manifest(directory: Path, *, strict_path: bool = False) -> Manifest:
    """The parsed manifest of ``directory`` without checking the files (see :func:`verify`)."""
    _real_directory(directory, strict_path=strict_path)
    try:
        os.listdir(directory)
    except OSError as error:
        raise Problem(Cause.UNREADABLE, directory, _strerror(error)) from None
    try:
        fd, info = _open_regular(directory, str(directory / MANIFEST_NAME), MANIFEST_NAME)
    except FileNotFoundError:
        raise Problem(
            Cause.TORN, directory, f"no {MANIFEST_NAME}: the save never finished"
        ) from None
    try:
        if info.st_size > MAX_MANIFEST_BYTES:
            raise Problem(
                Cause.INVALID,
                directory,
                f"{MANIFEST_NAME} is {info.st_size} bytes, over the {MAX_MANIFEST_BYTES} limit",
            )
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(MAX_MANIFEST_BYTES + 1)
    except OSError as error:
        detail = f"{MANIFEST_NAME}: {_strerror(error)}"
        raise Problem(Cause.UNREADABLE, directory, detail) from None
    finally:
        os.close(fd)
    if len(data) > MAX_MANIFEST_BYTES:
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} grew over the size limit")
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} is not UTF-8") from None
    except RecursionError:
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} is nested too deeply") from None
    except ValueError as error:
        raise Problem(Cause.INVALID, directory, f"{MANIFEST_NAME} is not JSON: {error}") from None
    return parse(raw, directory=directory)


def check_member(manifest: Manifest, *, directory: Path, member: str | None) -> None:
    """Refuse (``OTHER_MEMBER``) a manifest that names a member other than ``member``.

    Nothing to compare when either side is unknown: a manifest written before members were
    recorded, or a restoring pod that was given no ``KONTINUE_MEMBER``. The caller decides what
    an unknown side means (the restore program trusts the webhook's choice of directory).
    """
    recorded = manifest.member
    if member and recorded is not None and recorded != member:
        raise Problem(
            Cause.OTHER_MEMBER,
            directory,
            f"{MANIFEST_NAME} was saved by member {recorded!a}, not by this pod's {member!a}",
        )


def _inside(root: str, real: str) -> bool:
    return real != root and os.path.commonpath([root, real]) == root


def _check_file(
    directory: Path,
    entry: Entry,
    *,
    deadline: float | None,
    clock: Callable[[], float],
) -> None:
    root = os.path.realpath(directory)
    real = os.path.realpath(os.path.join(root, entry.path))
    if not _inside(root, real):
        raise Problem(Cause.REFUSED, directory, f"file {entry.path} points outside the directory")
    what = f"file {entry.path}"
    try:
        fd, info = _open_regular(directory, real, what)
    except FileNotFoundError:
        raise Problem(Cause.TORN, directory, f"{what} is missing") from None
    try:
        if info.st_size != entry.bytes:
            raise Problem(
                Cause.TORN,
                directory,
                f"{what} size mismatch: {info.st_size} bytes, manifest says {entry.bytes}",
            )
        digest = hashlib.sha256()
        size = 0
        while size <= entry.bytes:
            if deadline is not None and clock() > deadline:
                raise Problem(Cause.TIMED_OUT, directory, f"{what}: verification ran out of time")
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            size += len(chunk)
            digest.update(chunk)
    except OSError as error:
        raise Problem(Cause.UNREADABLE, directory, f"{what}: {_strerror(error)}") from None
    finally:
        os.close(fd)
    if size != entry.bytes:
        raise Problem(
            Cause.TORN,
            directory,
            f"{what} size mismatch: {size} bytes, manifest says {entry.bytes}",
        )
    if digest.hexdigest() != entry.sha256:
        raise Problem(Cause.TORN, directory, f"{what} sha256 mismatch")


def verify(
    directory: Path,
    *,
    member: str | None = None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    strict_path: bool = False,
) -> Manifest:
    """The manifest of the complete checkpoint in ``directory``, else :class:`Problem`.

    ``member``: the restoring pod's identity, checked by :func:`check_member` before any data is
    read. ``deadline``: a ``clock()`` value after which verification stops (``TIMED_OUT``).
    ``strict_path``: refuse a directory that is, or is reached through, a symlink — what the
    restore init-container asks of the directories it is told to verify; a workload reading
    through the link that container made (``KONTINUE_RESTORE_FROM``) leaves it off.
    """
    manifest = read_manifest(directory, strict_path=strict_path)
    check_member(manifest, directory=directory, member=member)
    for entry in manifest.files:
        _check_file(directory, entry, deadline=deadline, clock=clock)
    return manifest


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(
    directory: Path,
    *,
    extra: dict[str, Any] | None = None,
    exclude: Collection[str] = (),
    member: str | None = None,
) -> Manifest:
    """List every regular file under ``directory`` in a manifest written last and durably.

    Call it after the data files are written (it fsyncs each before listing it). Refuses a
    directory that already has a manifest: a checkpoint is never rewritten. ``exclude`` names
    top-level entries left out of the manifest (the workload SDK keeps its snapshots, each a
    checkpoint of its own, in ``snapshots/``: kontinue_sdk/session.py). ``member``: the writer's
    member identity (``KONTINUE_MEMBER``), recorded as ``"member"``. A file whose name is not
    valid UTF-8 is refused here, at save time, rather than making the checkpoint unusable.
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
        if not _text_ok(relative):
            raise Problem(Cause.INVALID, directory, f"file name {relative!a} is not UTF-8")
        digest = hashlib.sha256()
        with path.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
            os.fsync(stream.fileno())
        entries.append(Entry(relative, path.stat().st_size, digest.hexdigest()))
    recorded = dict(extra or {})
    if member is not None:
        recorded[MEMBER_KEY] = member
    manifest = Manifest(tuple(entries), recorded)
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
