"""The restore container's exit codes, and which of its ends are failed restores."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kontinue import checkpoint_format, restore
from kontinue.restore import program

ROOT = Path(__file__).resolve().parents[3]


def test_every_checkpoint_problem_has_its_own_documented_code() -> None:
    codes = {cause: restore.for_cause(cause) for cause in checkpoint_format.Cause}
    assert set(codes) == set(checkpoint_format.Cause)
    assert restore.ExitCode.OK not in codes.values()


def test_every_code_is_in_the_users_table() -> None:
    """docs/workload-contract.md lists every exit code with its name."""
    doc = (ROOT / "docs" / "workload-contract.md").read_text()
    for code in restore.ExitCode:
        assert re.search(rf"^\| {code.value} \| `{code.name}` \|", doc, re.M), code


@pytest.mark.parametrize(
    ("code", "deleting", "failed"),
    [
        (0, False, False),
        (0, True, False),
        (1, False, True),  # the interpreter crashed before the program could report
        (2, False, True),
        (4, False, True),
        (7, False, True),
        (10, False, True),
        (128, False, True),  # StartError: the command is not in the image
        (137, False, True),  # OOM-killed
        (137, True, False),  # killed because the pod was being deleted
        (143, True, False),
        (4, True, True),  # a torn checkpoint is a failed restore even in a deleted pod
    ],
)
def test_every_non_zero_end_is_a_failed_restore(code: int, deleting: bool, failed: bool) -> None:
    assert restore.failed(code, pod_deleting=deleting) is failed


@pytest.mark.parametrize("separator", ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\u2028"])
def test_the_line_stays_one_line_whatever_a_name_carries(separator: str) -> None:
    """A Checkpoint name from the environment with a line break in it (found by the restore
    fuzzer, tests/fuzz/restore.py: a ``\\r`` survived, and the termination message was two
    lines)."""
    line = program.printable(f"restore from checkpoint a{separator}b (/x): verified")
    assert line.splitlines() == [line]
    assert line == "restore from checkpoint a b (/x): verified"
