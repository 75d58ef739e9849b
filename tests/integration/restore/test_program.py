"""The restore program (``python -m kontinue.restore``) as a real subprocess on real directories.

Directories are written the way workloads write them: the reference trainer's own writer
(reference_workload.trainer.save_checkpoint, the format this entrypoint must accept) and Kontinue's
generic :func:`kontinue.checkpoint_format.write_manifest`; then damaged the way real failures
damage them (no manifest after a SIGKILL, a truncated file, a file that cannot be read).
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from kontinue import checkpoint_format, keys
from tests.integration.restore import support


def test_good_trainer_checkpoint_verifies(area: Path) -> None:
    good = area / "good"
    support.trainer_checkpoint(good)

    result = support.run(area, {keys.ENV_RESTORE_FROM: str(good)})

    assert result.code == 0
    support.assert_one_line(result, stream="stdout", contains=[str(good), "verified 2 files"])
    assert result.stderr == ""


def test_good_generic_checkpoint_verifies(area: Path) -> None:
    good = area / "good"
    support.generic_checkpoint(good)

    result = support.run(area, {keys.ENV_RESTORE_FROM: str(good)})

    assert result.code == 0
    support.assert_one_line(result, stream="stdout", contains=["verified 2 files, 1011 bytes"])


def _no_manifest(directory: Path) -> None:
    """What SIGKILL mid-save leaves: data, no manifest."""
    directory.mkdir()
    (directory / "state.bin").write_bytes(b"partial")


def _truncated(directory: Path) -> None:
    support.trainer_checkpoint(directory)
    with (directory / "state.bin").open("r+b") as stream:
        stream.truncate(100)


def _flipped(directory: Path) -> None:
    support.trainer_checkpoint(directory)
    data = bytearray((directory / "state.bin").read_bytes())
    data[0] ^= 0xFF
    (directory / "state.bin").write_bytes(bytes(data))


def _file_gone(directory: Path) -> None:
    support.trainer_checkpoint(directory)
    (directory / "trainer.json").unlink()


def _garbage_manifest(directory: Path) -> None:
    support.trainer_checkpoint(directory)
    (directory / checkpoint_format.MANIFEST_NAME).write_text('{"files": [')


def _foreign_manifest(directory: Path) -> None:
    support.trainer_checkpoint(directory)
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

    result = support.run(area, {keys.ENV_RESTORE_FROM: str(bad)})

    assert result.code == code
    support.assert_one_line(result, stream="stderr", contains=["restore failed:", str(bad), *parts])
    assert result.stdout == ""


def test_unreadable_file_fails(area: Path) -> None:
    """A listed file the restoring process may not read (as root: without DAC override)."""
    ckpt = area / "ckpt"
    support.trainer_checkpoint(ckpt)
    for path in (ckpt, *ckpt.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    (ckpt / "state.bin").chmod(0o000)

    result = support.run(area, {keys.ENV_RESTORE_FROM: str(ckpt)}, mode_bits_bind=True)

    assert result.code == 5
    support.assert_one_line(
        result, stream="stderr", contains=["unreadable:", "file state.bin", "Permission denied"]
    )


def test_unreadable_directory_fails(area: Path) -> None:
    ckpt = area / "ckpt"
    support.trainer_checkpoint(ckpt)
    ckpt.chmod(0o000)

    result = support.run(area, {keys.ENV_RESTORE_FROM: str(ckpt)}, mode_bits_bind=True)

    assert result.code == 5
    support.assert_one_line(result, stream="stderr", contains=["unreadable:", "Permission denied"])


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
    result = support.run(area, env)
    assert result.code == 2
    support.assert_one_line(result, stream="stderr", contains=["restore misconfigured:", part])


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
    support.trainer_checkpoint(source)

    result = support.run(area, link_env(area, source=source))

    assert result.code == 0
    assert (area / "run" / "restore-from").resolve() == source.resolve()
    support.assert_one_line(result, stream="stdout", contains=["checkpoint train-old", "verified"])


def test_link_mode_prefers_the_awaited_checkpoint_once_saved(area: Path) -> None:
    """The previous incarnation finishes saving while the init container waits."""
    old, new = area / "old", area / "new"
    support.trainer_checkpoint(old, step=1)
    new.mkdir()
    (new / "partial").write_bytes(b"...")

    def finish_saving() -> None:
        time.sleep(0.7)
        shutil.rmtree(new)
        support.trainer_checkpoint(new, step=2)

    saver = threading.Thread(target=finish_saving)
    saver.start()
    started = time.monotonic()
    result = support.run(
        area, link_env(area, source=old, wait_for=new, seconds=30), "--poll", "0.05"
    )
    saver.join()

    assert result.code == 0
    assert (area / "run" / "restore-from").resolve() == new.resolve()
    support.assert_one_line(result, stream="stdout", contains=["checkpoint train-new"])
    assert time.monotonic() - started < 30  # returned when the manifest came, not at the timeout


def test_link_mode_torn_awaited_falls_back_to_source(area: Path) -> None:
    old, new = area / "old", area / "new"
    support.trainer_checkpoint(old)
    _truncated(new)

    result = support.run(area, link_env(area, source=old, wait_for=new))

    assert result.code == 0
    assert (area / "run" / "restore-from").resolve() == old.resolve()
    support.assert_one_line(
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

    result = support.run(area, link_env(area, source=None, wait_for=new, seconds=0.3))

    assert result.code == 0
    assert not link.is_symlink()
    assert not link.exists()
    support.assert_one_line(
        result, stream="stdout", contains=["cold start:", "no MANIFEST.json after 0.3s"]
    )


def test_link_mode_bad_fallback_is_a_failed_restore(area: Path) -> None:
    old, new = area / "old", area / "new"
    _flipped(old)
    _no_manifest(new)

    result = support.run(area, link_env(area, source=old, wait_for=new, seconds=0.2))

    assert result.code == 4
    assert not (area / "run" / "restore-from").exists()
    support.assert_one_line(
        result, stream="stderr", contains=["checkpoint train-old", "sha256 mismatch"]
    )


def test_direct_mode_wait_timeout_fails(area: Path) -> None:
    ckpt = area / "ckpt"
    _no_manifest(ckpt)

    result = support.run(
        area,
        {keys.ENV_RESTORE_FROM: str(ckpt), keys.ENV_WAIT_FOR: str(ckpt)},
        "--timeout",
        "0.2",
    )

    assert result.code == 6
    support.assert_one_line(result, stream="stderr", contains=["no MANIFEST.json after 0.2s"])


def test_the_job_templates_stand_in_exits_0_at_once(area: Path) -> None:
    """An opted-in Job's template carries the restore container's stand-in; in a pod the webhook
    never saw it runs with ``--unplumbed`` and no environment, and the workload starts cold."""
    result = support.run(area, {}, "--unplumbed")

    assert result.code == 0
    support.assert_one_line(result, stream="stdout", contains=["no restore:", "starts cold"])
