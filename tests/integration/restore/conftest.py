"""The scratch area the restore program's tests write checkpoint directories into."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


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
