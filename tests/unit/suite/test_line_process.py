"""tests/processes.py: a test reads every line a workload printed, whatever was buffered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import LineProcess

THREE_LINES = "print('A'); print('B'); print('C')"  # piped stdout: one chunk at exit


def test_finish_returns_the_lines_read_until_had_already_buffered(tmp_path: Path) -> None:
    process = LineProcess([sys.executable, "-c", THREE_LINES], env={}, cwd=tmp_path)
    assert process.read_until("A") == "A"
    code, out, err = process.finish()
    assert (code, out.splitlines(), err) == (0, ["B", "C"], "")
    assert process.lines == ["A", "B", "C"]


def test_finish_kills_a_process_that_does_not_end(tmp_path: Path) -> None:
    process = LineProcess(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        env={},
        cwd=tmp_path,
    )
    assert process.read_until("up") == "up"
    with pytest.raises((TimeoutError, subprocess.TimeoutExpired)):
        process.finish(timeout=0.5)
    assert process.proc.wait(timeout=5) != 0
