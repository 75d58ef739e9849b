"""Hostile and careless checkpoint directories: every one ends with a documented exit code and
one line (stderr and termination message), quickly, without a traceback (issue 11, item 4).

Each case was reproduced against the restore program before this suite existed: a marker that is
a list crashed it (exit 1, traceback, no message); a FIFO hung it; ``MANIFEST.json -> /dev/zero``
read until MemoryError; a symlinked checkpoint directory or manifest was followed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kontinue import checkpoint_format, keys, restore
from tests.integration.restore import support

MANIFEST = checkpoint_format.MANIFEST_NAME
QUICK = 10.0  # seconds: every hostile case must end well inside this (a hang would not)


def _entry(path: str, data: bytes) -> dict[str, object]:
    return {"path": path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _manifest(directory: Path, text: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / MANIFEST).write_text(text, encoding="utf-8")


def marker_list(d: Path) -> None:
    _manifest(d, json.dumps({"kontinue": ["checkpoint"], "files": []}))


def marker_object(d: Path) -> None:
    _manifest(d, json.dumps({"kontinue": {"checkpoint": True}, "files": []}))


def nested_100k(d: Path) -> None:
    _manifest(d, '{"kontinue": "checkpoint", "files": [], "x": ' + "[" * 100_000 + "]" * 100_000)


def nul_in_path(d: Path) -> None:
    _manifest(d, json.dumps({"kontinue": "checkpoint", "files": [_entry("a\x00b", b"")]}))


def lone_surrogate_path(d: Path) -> None:
    # JSON may carry an escaped lone surrogate; no file system path can.
    body = '{"kontinue": "checkpoint", "files": [{"path": "a\\ud800", "bytes": 0, "sha256": "'
    _manifest(d, body + "0" * 64 + '"}]}')


def surrogate_member(d: Path) -> None:
    body = '{"kontinue": "checkpoint", "member": "index=\\udfff", "files": []}'
    _manifest(d, body)


def manifest_fifo(d: Path) -> None:
    d.mkdir()
    os.mkfifo(d / MANIFEST)


def listed_fifo(d: Path) -> None:
    d.mkdir()
    os.mkfifo(d / "state.bin")
    _manifest(d, json.dumps({"kontinue": "checkpoint", "files": [_entry("state.bin", b"x")]}))


def manifest_dev_zero(d: Path) -> None:
    d.mkdir()
    (d / MANIFEST).symlink_to("/dev/zero")


def listed_dev_zero(d: Path) -> None:
    d.mkdir()
    (d / "state.bin").symlink_to("/dev/zero")
    _manifest(d, json.dumps({"kontinue": "checkpoint", "files": [_entry("state.bin", b"")]}))


def manifest_symlink_to_good(d: Path) -> None:
    """A manifest that is a symlink to a valid one in another (good) checkpoint."""
    other = d.parent / "other-good"
    support.trainer_checkpoint(other)
    d.mkdir()
    for child in other.iterdir():
        if child.name != MANIFEST:
            (d / child.name).write_bytes(child.read_bytes())
    (d / MANIFEST).symlink_to(other / MANIFEST)


def manifest_directory(d: Path) -> None:
    (d / MANIFEST).mkdir(parents=True)


def manifest_huge_sparse(d: Path) -> None:
    d.mkdir()
    with (d / MANIFEST).open("wb") as out:
        out.truncate(checkpoint_format.MAX_MANIFEST_BYTES + 1)


def directory_symlink(d: Path) -> None:
    """The checkpoint directory is itself a symlink to another (valid) tree."""
    elsewhere = d.parent / "another-lineage" / "pod"
    support.trainer_checkpoint(elsewhere)
    d.symlink_to(elsewhere, target_is_directory=True)


def parent_symlink(d: Path) -> None:
    """A directory above the checkpoint (the lineage directory) is a symlink."""
    real = d.parent / "real-lineage"
    support.trainer_checkpoint(real / "pod")
    (d.parent / "lineage").symlink_to(real, target_is_directory=True)


def listed_symlink_escaping(d: Path) -> None:
    secret = d.parent / "secret"
    secret.write_bytes(b"s")
    d.mkdir()
    (d / "state.bin").symlink_to(secret)
    _manifest(d, json.dumps({"kontinue": "checkpoint", "files": [_entry("state.bin", b"s")]}))


def directory_is_fifo(d: Path) -> None:
    os.mkfifo(d)


def digest_not_hex(d: Path) -> None:
    entry = {"path": "a", "bytes": 0, "sha256": "z" * 64}
    (d / "a").parent.mkdir(parents=True, exist_ok=True)
    (d / "a").write_bytes(b"")
    _manifest(d, json.dumps({"kontinue": "checkpoint", "files": [entry]}))


def manifest_not_utf8(d: Path) -> None:
    d.mkdir()
    (d / MANIFEST).write_bytes(b'{"kontinue": "checkpoint", "files": [], "x": "\xff"}')


Damage = Callable[[Path], None]
CASES: dict[str, tuple[Damage, str, int, list[str]]] = {
    # name: (damage, which path the env names, exit code, parts of the line)
    "marker-list": (marker_list, "ckpt", 4, ["invalid:", "lacks the marker"]),
    "marker-object": (marker_object, "ckpt", 4, ["invalid:", "lacks the marker"]),
    "nested-100k": (nested_100k, "ckpt", 4, ["invalid:", "nested too deeply"]),
    "nul-in-path": (nul_in_path, "ckpt", 4, ["invalid:", "is illegal"]),
    "lone-surrogate-path": (lone_surrogate_path, "ckpt", 4, ["invalid:", "is illegal"]),
    "surrogate-member": (surrogate_member, "ckpt", 4, ["invalid:", "member must be a string"]),
    "manifest-fifo": (manifest_fifo, "ckpt", 8, ["refused:", "MANIFEST.json is not a regular"]),
    "listed-fifo": (listed_fifo, "ckpt", 8, ["refused:", "file state.bin is not a regular"]),
    "manifest-dev-zero": (manifest_dev_zero, "ckpt", 8, ["refused:", "MANIFEST.json is a symlink"]),
    "listed-dev-zero": (listed_dev_zero, "ckpt", 8, ["refused:", "points outside"]),
    "manifest-symlink": (manifest_symlink_to_good, "ckpt", 8, ["refused:", "is a symlink"]),
    "manifest-directory": (manifest_directory, "ckpt", 8, ["refused:", "not a regular file"]),
    "manifest-huge": (manifest_huge_sparse, "ckpt", 4, ["invalid:", "over the 16777216"]),
    "directory-symlink": (directory_symlink, "ckpt", 8, ["refused:", "directory is a symlink"]),
    "parent-symlink": (parent_symlink, "lineage/pod", 8, ["refused:", "through a symlink"]),
    "listed-escaping": (listed_symlink_escaping, "ckpt", 8, ["refused:", "points outside"]),
    "directory-fifo": (directory_is_fifo, "ckpt", 3, ["missing:", "not a directory"]),
    "digest-not-hex": (digest_not_hex, "ckpt", 4, ["invalid:", "not a digest"]),
    "manifest-not-utf8": (manifest_not_utf8, "ckpt", 4, ["invalid:", "not UTF-8"]),
}


@pytest.mark.parametrize(
    ("damage", "target", "code", "parts"), list(CASES.values()), ids=list(CASES)
)
def test_hostile_directory_ends_with_a_documented_code_and_one_line(
    area: Path, damage: Damage, target: str, code: int, parts: list[str]
) -> None:
    damage(area / "ckpt")

    started = time.monotonic()
    result = support.run(area, {keys.ENV_RESTORE_FROM: str(area / target)}, timeout=QUICK * 3)

    assert time.monotonic() - started < QUICK
    assert result.code == code, result.stderr
    support.assert_one_line(result, stream="stderr", contains=["restore failed:", *parts])
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("damage", [manifest_fifo, manifest_dev_zero, directory_symlink])
def test_hostile_awaited_directory_falls_back_to_the_good_one(area: Path, damage: Damage) -> None:
    """Link mode: the awaited directory is hostile; the verified fallback is linked instead."""
    old = area / "old"
    support.trainer_checkpoint(old)
    damage(area / "ckpt")

    result = support.run(
        area,
        {
            keys.ENV_RESTORE_FROM: str(area / "run" / "restore-from"),
            keys.ENV_RESTORE_SOURCE: str(old),
            keys.ENV_WAIT_FOR: str(area / "ckpt"),
            keys.ENV_WAIT_SECONDS: "5",
        },
        timeout=QUICK * 3,
    )

    assert result.code == 0
    assert (area / "run" / "restore-from").resolve() == old.resolve()
    support.assert_one_line(result, stream="stdout", contains=["instead of", "refused:"])


def test_path_in_env_that_is_not_utf8_is_reported_not_a_crash(area: Path) -> None:
    """A lone surrogate reaches the program through the environment as invalid UTF-8 bytes."""
    result = support.run(area, {keys.ENV_RESTORE_FROM: str(area) + "/\udcff"})

    assert result.code == 4
    support.assert_one_line(result, stream="stderr", contains=["invalid:", "not valid UTF-8"])
    assert "\\udcff" in result.stderr


def test_verification_past_its_budget_times_out(area: Path) -> None:
    ckpt = area / "ckpt"
    support.trainer_checkpoint(ckpt)

    result = support.run(area, {keys.ENV_RESTORE_FROM: str(ckpt)}, "--verify-timeout", "0")

    assert result.code == restore.ExitCode.TIMED_OUT
    support.assert_one_line(result, stream="stderr", contains=["timed-out:", "ran out of time"])


def test_watchdog_ends_a_run_stuck_in_a_call(area: Path) -> None:
    """A read stuck in the kernel cannot be interrupted from Python; the watchdog thread still
    reports and ends the process. (The stuck call here is a sleep in the main thread.)"""
    log = area / "termination"
    code = (
        "import time; from pathlib import Path; from kontinue.restore import program; "
        f"program.arm_watchdog(0.3, Path({str(log)!r})); time.sleep(60)"
    )
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(support.ROOT)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert time.monotonic() - started < QUICK
    assert proc.returncode == restore.ExitCode.TIMED_OUT
    assert log.read_text().startswith("restore failed: no outcome within 0.3s")


@pytest.mark.parametrize(
    ("env", "part"),
    [
        ({keys.ENV_RESTORE_FROM: "/x", keys.ENV_WAIT_SECONDS: "nan"}, "finite number"),
        ({keys.ENV_RESTORE_FROM: "/x", keys.ENV_WAIT_SECONDS: "-1"}, "finite number"),
        ({keys.ENV_RESTORE_FROM: "/x", keys.ENV_VERIFY_SECONDS: "inf"}, "finite number"),
    ],
    ids=["nan", "negative", "infinite-verify"],
)
def test_bad_numbers_are_configuration_errors(area: Path, env: dict[str, str], part: str) -> None:
    result = support.run(area, env)
    assert result.code == restore.ExitCode.CONFIG
    support.assert_one_line(result, stream="stderr", contains=["restore misconfigured:", part])


def test_unknown_option_is_a_configuration_error_not_argparse_exit(area: Path) -> None:
    result = support.run(area, {keys.ENV_RESTORE_FROM: "/x"}, "--no-such-option")
    assert result.code == restore.ExitCode.CONFIG
    support.assert_one_line(result, stream="stderr", contains=["unrecognized arguments"])


@pytest.mark.parametrize(
    ("link", "args", "part"),
    [
        ({keys.ENV_RESTORE_FROM: "/"}, [], "names no file"),
        ({}, ["--link", ""], "needs --link"),
        ({}, ["--link", "current"], "must be an absolute path"),
    ],
    ids=["link-at-root", "empty-link-option", "relative-link-option"],
)
def test_a_link_path_that_cannot_be_a_link_is_a_configuration_error(
    area: Path, link: dict[str, str], args: list[str], part: str
) -> None:
    """Found by the restore fuzzer (tests/fuzz/restore.py): with a good source, ``--link ''``
    and a link at ``/`` ended ``INTERNAL`` (a ValueError making the link), and a relative
    ``--link`` was made in the working directory."""
    support.trainer_checkpoint(area / "ckpt")
    result = support.run(area, {keys.ENV_RESTORE_SOURCE: str(area / "ckpt"), **link}, *args)
    assert result.code == restore.ExitCode.CONFIG
    support.assert_one_line(result, stream="stderr", contains=["restore misconfigured:", part])
    assert not (area / "current").is_symlink()
