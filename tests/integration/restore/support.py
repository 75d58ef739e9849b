"""Running the restore program as a real process on real directories, for the tests here."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

from kontinue import checkpoint_format, keys, restore
from reference_workload import trainer

ROOT = Path(__file__).resolve().parents[3]
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


def run(
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
        [sys.executable, "-m", "kontinue.restore", *args],
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
    trainer.save_checkpoint(directory, step=step, state=os.urandom(4096))


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
    assert result.code in DOCUMENTED, f"exit {result.code} is not a documented exit code"


DOCUMENTED = frozenset(int(code) for code in restore.ExitCode)
