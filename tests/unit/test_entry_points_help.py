"""The three programs answer ``--help`` with usage (exit 0), not a traceback, a start-up, or (for
``python -m kontinue.crds``) a directory named ``--help``; other arguments are refused (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import fixtures

PROGRAMS = {
    "webhook": ([sys.executable, "-m", "webhook"], "kontinue-webhook"),
    "bridge": ([sys.executable, "-m", "queue_bridge"], "kontinue-bridge"),
    "crds": ([sys.executable, "-m", "kontinue.crds"], "python -m kontinue.crds"),
}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(fixtures.ROOT)}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_prints_usage(program: str, tmp_path: Path) -> None:
    argv, prog = PROGRAMS[program]
    done = _run([*argv, "--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {prog}")
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written, no directory named --help


@pytest.mark.parametrize("program", ["webhook", "bridge"])
def test_unexpected_arguments_are_refused(program: str, tmp_path: Path) -> None:
    argv, prog = PROGRAMS[program]
    done = _run([*argv, "--port", "9443"], tmp_path)
    assert done.returncode == 2
    assert f"{prog}: unexpected arguments --port 9443" in done.stderr


def test_console_scripts_answer_help_too() -> None:
    for script in ("kontinue-webhook", "kontinue-bridge"):
        path = Path(sys.executable).parent / script
        done = subprocess.run(
            [str(path), "--help"], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"usage: {script}")
