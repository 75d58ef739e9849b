"""The manifest contract the restore init-container checks (kontinue.checkpoint_format)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from kontinue import checkpoint_format

DIGEST = "0" * 64
GOOD_ENTRY = {"path": "a.bin", "bytes": 1, "sha256": DIGEST}


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ([], "is not a JSON object"),
        ({"files": []}, "lacks the marker"),
        ({"kontinue": "failed", "files": []}, "lacks the marker"),
        ({"kontinue": "checkpoint"}, "files must be a list"),
        ({"kontinue": "checkpoint", "files": ["a"]}, "files[0] is not an object"),
        ({"kontinue": "checkpoint", "files": [{"bytes": 1, "sha256": DIGEST}]}, "files[0].path"),
        ({"kontinue": "checkpoint", "files": [{**GOOD_ENTRY, "path": "/etc/x"}]}, "is illegal"),
        ({"kontinue": "checkpoint", "files": [{**GOOD_ENTRY, "path": "a/../../x"}]}, "illegal"),
        (
            {"kontinue": "checkpoint", "files": [{**GOOD_ENTRY, "path": "MANIFEST.json"}]},
            "is illegal",
        ),
        ({"kontinue": "checkpoint", "files": [{**GOOD_ENTRY, "bytes": -1}]}, "bytes must be"),
        ({"kontinue": "checkpoint", "files": [{**GOOD_ENTRY, "bytes": True}]}, "bytes must be"),
        ({"kontinue": "checkpoint", "files": [{**GOOD_ENTRY, "sha256": "ab"}]}, "not a digest"),
    ],
    ids=[
        "list",
        "no-marker",
        "failed-marker",
        "no-files",
        "entry-not-object",
        "no-path",
        "absolute",
        "escaping",
        "manifest-itself",
        "negative-bytes",
        "bool-bytes",
        "short-digest",
    ],
)
def test_parse_rejects_with_the_key(raw: Any, detail: str) -> None:
    with pytest.raises(checkpoint_format.Problem) as caught:
        checkpoint_format.parse(raw, directory=Path("/ckpt"))
    assert caught.value.cause is checkpoint_format.Cause.INVALID
    assert detail in str(caught.value)
    assert str(caught.value).startswith("invalid: /ckpt: ")


@pytest.mark.parametrize("marker", ["checkpoint", "saved"])
def test_parse_accepts_both_markers_and_keeps_workload_keys(marker: str) -> None:
    raw = {"kontinue": marker, "files": [GOOD_ENTRY], "format": "x/v1", "step": 9}
    manifest = checkpoint_format.parse(raw, directory=Path("/ckpt"))
    assert manifest.files == (checkpoint_format.Entry("a.bin", 1, DIGEST),)
    assert manifest.extra == {"format": "x/v1", "step": 9}


def test_write_manifest_lists_files_and_round_trips(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"bb")
    (tmp_path / "a.bin").write_bytes(b"a")

    written = checkpoint_format.write_manifest(tmp_path, extra={"step": 4})

    assert [e.path for e in written.files] == ["a.bin", "sub/b.bin"]
    on_disk = json.loads((tmp_path / checkpoint_format.MANIFEST_NAME).read_text())
    assert on_disk["kontinue"] == "checkpoint"
    assert on_disk["step"] == 4
    assert checkpoint_format.verify(tmp_path) == written
    assert not (tmp_path / (checkpoint_format.MANIFEST_NAME + ".tmp")).exists()


def test_write_manifest_never_rewrites(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"a")
    checkpoint_format.write_manifest(tmp_path)
    (tmp_path / "a.bin").write_bytes(b"changed")
    with pytest.raises(checkpoint_format.Problem, match="never rewritten"):
        checkpoint_format.write_manifest(tmp_path)
    with pytest.raises(checkpoint_format.Problem, match="size mismatch"):
        checkpoint_format.verify(tmp_path)


def test_symlink_out_of_the_directory_is_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (tmp_path / "secret").write_bytes(b"s")
    (ckpt / "a.bin").symlink_to(tmp_path / "secret")
    entry = {"path": "a.bin", "bytes": 1, "sha256": hashlib.sha256(b"s").hexdigest()}
    (ckpt / checkpoint_format.MANIFEST_NAME).write_text(
        json.dumps({"kontinue": "checkpoint", "files": [entry]})
    )
    with pytest.raises(checkpoint_format.Problem, match="points outside the directory"):
        checkpoint_format.verify(ckpt)


def test_write_manifest_leaves_out_excluded_top_level_entries(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"m")
    (tmp_path / "snapshots" / "step-3").mkdir(parents=True)
    (tmp_path / "snapshots" / "step-3" / "model.bin").write_bytes(b"old")
    (tmp_path / "snapshots.bin").write_bytes(b"kept: only the exact top-level name is excluded")
    written = checkpoint_format.write_manifest(tmp_path, exclude={"snapshots"})
    assert [entry.path for entry in written.files] == ["model.bin", "snapshots.bin"]
    assert checkpoint_format.verify(tmp_path) == written


def test_a_link_to_a_checkpoint_is_followed_unless_the_path_must_be_strict(tmp_path: Path) -> None:
    """A workload reads through the restore container's link; the restore container itself
    refuses a directory that is, or is reached through, a symlink."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.bin").write_bytes(b"a")
    written = checkpoint_format.write_manifest(real)
    link = tmp_path / "restore-from"
    link.symlink_to(real, target_is_directory=True)

    assert checkpoint_format.verify(link) == written
    with pytest.raises(checkpoint_format.Problem, match="directory is a symlink") as caught:
        checkpoint_format.verify(link, strict_path=True)
    assert caught.value.cause is checkpoint_format.Cause.REFUSED
    (tmp_path / "via").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(checkpoint_format.Problem, match="passes through a symlink"):
        checkpoint_format.verify(tmp_path / "via" / "real", strict_path=True)
    assert checkpoint_format.verify(real, strict_path=True) == written


def test_write_manifest_records_the_member(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"a")
    written = checkpoint_format.write_manifest(tmp_path, member="index=2")
    assert written.member == "index=2"
    assert json.loads((tmp_path / checkpoint_format.MANIFEST_NAME).read_text())["member"] == (
        "index=2"
    )
    with pytest.raises(checkpoint_format.Problem, match="saved by member 'index=2'") as caught:
        checkpoint_format.verify(tmp_path, member="index=3")
    assert caught.value.cause is checkpoint_format.Cause.OTHER_MEMBER
