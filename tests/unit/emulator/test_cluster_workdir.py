"""A relative workdir (``make demo`` uses ``out/demo``) must not end up inside containers."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator import cluster, nodes


def test_a_relative_workdir_is_made_absolute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    c = cluster.Cluster(nodes=[nodes.NodeSpec("gpu-a")], workdir=Path("out/demo"))
    assert c.workdir == tmp_path / "out" / "demo"
    assert c.shared_root.is_absolute()
