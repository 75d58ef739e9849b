"""``python -m queue_bridge.restore`` as a real subprocess on real checkpoint directories.

Directories are written the way workloads write them: the reference trainer's own writer
(reference_workload.checkpoint_format, the format this entrypoint must accept) and Kontinue's
generic :func:`kontinue.checkpoint_format.write_manifest`; then damaged the way real failures
damage them (no manifest after a SIGKILL, a truncated file, a file that cannot be read).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kontinue import checkpoint_format, keys
from reference_workload import checkpoint_format as trainer_format

ROOT = Path(__file__).resolve().parents[2]
PR_CAPBSET_DROP = 24  # linux/prctl.h
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2  # linux/capability.h


def _without_file_override() -> None:
    """In the child, before exec: drop root's power to read any file (the bounding set caps
    what root gets back at exec), so mode bits apply to it as to any other user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")


@dataclasses.dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    message: str | None


@pytest.fixture
def area() -> Iterator[Path]:
    """A world-traversable scratch directory, so a run as ``nobody`` can reach it."""
    path = Path(tempfile.mkdtemp(prefix="kontinue-restore-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        _unlock(path)  # a test may have locked a directory; open it again for cleanup
        shutil.rmtree(path, ignore_errors=True)


def _unlock(directory: Path) -> None:
    directory.chmod(0o755)
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            _unlock(child)


def restore(
    area: Path, env: dict[str, str], *args: str, mode_bits_bind: bool = False, timeout: float = 60
) -> Result:
    logs = area / "logs"
    logs.mkdir(exist_ok=True)
    logs.chmod(0o777)
    log = logs / f"termination-{time.monotonic_ns()}"
    full_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        keys.ENV_TERMINATION_LOG: str(log),
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "queue_bridge.restore", *args],
        env=full_env,
        cwd=area,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=_without_file_override if mode_bits_bind and os.geteuid() == 0 else None,
    )
    return Result(
        proc.returncode, proc.stdout, proc.stderr, log.read_text() if log.exists() else None
    )


def trainer_checkpoint(directory: Path, *, step: int = 7) -> None:
    """A directory written by the reference trainer's writer (data files, then manifest)."""
    trainer_format.write(
        directory, step=step, files=[("state.bin", os.urandom(4096)), ("trainer.json", b"{}")]
    )


def generic_checkpoint(directory: Path) -> None:
    (directory / "shards").mkdir(parents=True)
    (directory / "shards" / "rank0.pt").write_bytes(b"x" * 1000)
    (directory / "meta.json").write_text('{"step": 3}')
    checkpoint_format.write_manifest(directory, extra={"format": "other/v1"})


def assert_one_line(result: Result, *, stream: str, contains: list[str]) -> None:
    text = result.stdout if stream == "stdout" else result.stderr
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    for part in contains:
        assert part in lines[0]
    assert result.message == lines[0]


def test_good_trainer_checkpoint_verifies(area: Path) -> None:
    good = area / "good"
    trainer_checkpoint(good)

    result = restore(area, {keys.ENV_RESTORE_FROM: str(good)})

    assert result.code == 0
    assert_one_line(result, stream="stdout", contains=[str(good), "verified 2 files"])
    assert result.stderr == ""


def test_good_generic_checkpoint_verifies(area: Path) -> None:
    good = area / "good"
    generic_checkpoint(good)

    result = restore(area, {keys.ENV_RESTORE_FROM: str(good)})

    assert result.code == 0
    assert_one_line(result, stream="stdout", contains=["verified 2 files, 1011 bytes"])


def _no_manifest(directory: Path) -> None:
    """What SIGKILL mid-save leaves: data, no manifest."""
    directory.mkdir()
    (directory / "state.bin").write_bytes(b"partial")


def _truncated(directory: Path) -> None:
    trainer_checkpoint(directory)
    with (directory / "state.bin").open("r+b") as stream:
        stream.truncate(100)


def _flipped(directory: Path) -> None:
    trainer_checkpoint(directory)
    data = bytearray((directory / "state.bin").read_bytes())
    data[0] ^= 0xFF
    (directory / "state.bin").write_bytes(bytes(data))


def _file_gone(directory: Path) -> None:
    trainer_checkpoint(directory)
    (directory / "trainer.json").unlink()


def _garbage_manifest(directory: Path) -> None:
    trainer_checkpoint(directory)
    (directory / checkpoint_format.MANIFEST_NAME).write_text('{"files": [')


def _foreign_manifest(directory: Path) -> None:
    trainer_checkpoint(directory)
    (directory / checkpoint_format.MANIFEST_NAME).write_text('{"files": []}')


def _escaping_manifest(directory: Path) -> None:
    directory.mkdir()
    (directory / checkpoint_format.MANIFEST_NAME).write_text(
        '{"kontinue": "checkpoint", "files": [{"path": "../x", "bytes": 0, "sha256": "'
        + "0" * 64
        + '"}]}'
    )


BAD = {
    "missing": (lambda d: None, 3, ["missing:", "does not exist"]),
    "torn-no-manifest": (_no_manifest, 4, ["torn:", "no MANIFEST.json"]),
    "torn-truncated": (_truncated, 4, ["torn:", "file state.bin size mismatch: 100 bytes"]),
    "torn-altered": (_flipped, 4, ["torn:", "file state.bin sha256 mismatch"]),
    "torn-file-gone": (_file_gone, 4, ["torn:", "file trainer.json is missing"]),
    "invalid-json": (_garbage_manifest, 4, ["invalid:", "is not JSON"]),
    "invalid-no-marker": (_foreign_manifest, 4, ["invalid:", "lacks the marker"]),
    "invalid-escaping-path": (_escaping_manifest, 4, ["invalid:", "'../x' is illegal"]),
}


@pytest.mark.parametrize(("damage", "code", "parts"), list(BAD.values()), ids=list(BAD))
def test_bad_directory_fails_with_one_clear_line(
    area: Path, damage: object, code: int, parts: list[str]
) -> None:
    bad = area / "ckpt"
    damage(bad)  # type: ignore[operator]

    result = restore(area, {keys.ENV_RESTORE_FROM: str(bad)})

    assert result.code == code
    assert_one_line(result, stream="stderr", contains=["restore failed:", str(bad), *parts])
    assert result.stdout == ""


def test_unreadable_file_fails(area: Path) -> None:
    """A listed file the restoring process may not read (as root: without DAC override)."""
    ckpt = area / "ckpt"
    trainer_checkpoint(ckpt)
    for path in (ckpt, *ckpt.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    (ckpt / "state.bin").chmod(0o000)

    result = restore(area, {keys.ENV_RESTORE_FROM: str(ckpt)}, mode_bits_bind=True)

    assert result.code == 5
    assert_one_line(
        result, stream="stderr", contains=["unreadable:", "file state.bin", "Permission denied"]
    )


def test_unreadable_directory_fails(area: Path) -> None:
    ckpt = area / "ckpt"
    trainer_checkpoint(ckpt)
    ckpt.chmod(0o000)

    result = restore(area, {keys.ENV_RESTORE_FROM: str(ckpt)}, mode_bits_bind=True)

    assert result.code == 5
    assert_one_line(result, stream="stderr", contains=["unreadable:", "Permission denied"])


@pytest.mark.parametrize(
    ("env", "part"),
    [
        ({}, "nothing to restore"),
        ({keys.ENV_RESTORE_FROM: "relative/dir"}, "must be an absolute path"),
        ({keys.ENV_RESTORE_FROM: "/x", "KONTINUE_WAIT_SECONDS": "soon"}, "is not a number"),
    ],
    ids=["nothing", "relative", "bad-seconds"],
)
def test_misconfiguration_names_the_variable(area: Path, env: dict[str, str], part: str) -> None:
    result = restore(area, env)
    assert result.code == 2
    assert_one_line(result, stream="stderr", contains=["restore misconfigured:", part])


# --- link mode: the webhook's plumbing (webhook/plumbing.py) ----------------------------------


def link_env(
    area: Path, *, source: Path | None, wait_for: Path | None = None, seconds: float = 5
) -> dict[str, str]:
    env = {
        keys.ENV_RESTORE_FROM: str(area / "run" / "restore-from"),
        "KONTINUE_RESTORE_SOURCE": str(source) if source else "",
        "KONTINUE_RESTORE_CHECKPOINT": "train-old",
        "KONTINUE_WAIT_SECONDS": str(seconds),
    }
    # As webhook/plumbing.py sets them: every variable present, empty when not in use.
    env[keys.ENV_WAIT_FOR] = str(wait_for) if wait_for else ""
    env["KONTINUE_WAIT_CHECKPOINT"] = "train-new" if wait_for else ""
    return env


def test_link_mode_links_the_verified_source(area: Path) -> None:
    source = area / "old"
    trainer_checkpoint(source)

    result = restore(area, link_env(area, source=source))

    assert result.code == 0
    assert (area / "run" / "restore-from").resolve() == source.resolve()
    assert_one_line(result, stream="stdout", contains=["checkpoint train-old", "verified"])


def test_link_mode_prefers_the_awaited_checkpoint_once_saved(area: Path) -> None:
    """The previous incarnation finishes saving while the init container waits."""
    old, new = area / "old", area / "new"
    trainer_checkpoint(old, step=1)
    new.mkdir()
    (new / "partial").write_bytes(b"...")

    def finish_saving() -> None:
        time.sleep(0.7)
        shutil.rmtree(new)
        trainer_checkpoint(new, step=2)

    saver = threading.Thread(target=finish_saving)
    saver.start()
    started = time.monotonic()
    result = restore(area, link_env(area, source=old, wait_for=new, seconds=30), "--poll", "0.05")
    saver.join()

    assert result.code == 0
    assert (area / "run" / "restore-from").resolve() == new.resolve()
    assert_one_line(result, stream="stdout", contains=["checkpoint train-new"])
    assert time.monotonic() - started < 30  # returned when the manifest came, not at the timeout


def test_link_mode_torn_awaited_falls_back_to_source(area: Path) -> None:
    old, new = area / "old", area / "new"
    trainer_checkpoint(old)
    _truncated(new)

    result = restore(area, link_env(area, source=old, wait_for=new))

    assert result.code == 0
    assert (area / "run" / "restore-from").resolve() == old.resolve()
    assert_one_line(
        result,
        stream="stdout",
        contains=["checkpoint train-old", "instead of checkpoint train-new", "size mismatch"],
    )


def test_link_mode_unfinished_awaited_without_fallback_starts_cold(area: Path) -> None:
    new = area / "new"
    _no_manifest(new)
    link = area / "run" / "restore-from"
    link.parent.mkdir()
    link.symlink_to(area / "stale")  # left by an earlier run of this init container

    result = restore(area, link_env(area, source=None, wait_for=new, seconds=0.3))

    assert result.code == 0
    assert not link.is_symlink()
    assert not link.exists()
    assert_one_line(
        result, stream="stdout", contains=["cold start:", "no MANIFEST.json after 0.3s"]
    )


def test_link_mode_bad_fallback_is_a_failed_restore(area: Path) -> None:
    old, new = area / "old", area / "new"
    _flipped(old)
    _no_manifest(new)

    result = restore(area, link_env(area, source=old, wait_for=new, seconds=0.2))

    assert result.code == 4
    assert not (area / "run" / "restore-from").exists()
    assert_one_line(result, stream="stderr", contains=["checkpoint train-old", "sha256 mismatch"])


def test_direct_mode_wait_timeout_fails(area: Path) -> None:
    ckpt = area / "ckpt"
    _no_manifest(ckpt)

    result = restore(
        area,
        {keys.ENV_RESTORE_FROM: str(ckpt), keys.ENV_WAIT_FOR: str(ckpt)},
        "--timeout",
        "0.2",
    )

    assert result.code == 6
    assert_one_line(result, stream="stderr", contains=["no MANIFEST.json after 0.2s"])
