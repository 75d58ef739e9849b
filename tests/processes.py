"""A workload started as a real subprocess whose stdout a test reads line by line.

Shared by the tests of the SDK's session (tests/integration/sdk/test_session.py) and of the
reference trainer (tests/integration/test_reference_workload.py): both start a training script
with Kontinue's variables, wait for a line, send a real signal and read how it ended.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar


class LineProcess:
    """One subprocess; :attr:`lines` holds the stdout lines read so far."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env),
            cwd=cwd,
        )
        self.lines: list[str] = []

    def read_until(self, prefix: str, *, timeout: float = 20.0) -> str:
        """The first stdout line starting with ``prefix`` (bounded by ``timeout``)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if line.startswith(prefix):
                return line.rstrip("\n")
        raise AssertionError(f"no {prefix!r} line; got {self.lines[-5:]}")

    def finish(self, *, timeout: float = 30.0) -> tuple[int, str, str]:
        """Wait for the exit: the code, the rest of stdout, all of stderr.

        stdout is read to its end through the same text reader :meth:`read_until` used:
        ``communicate`` reads the raw pipe and so lost the lines that reader had already
        buffered (a trainer's last lines arrive in the chunk holding the one waited for).
        stderr is drained in a second thread, so a chatty stderr cannot fill its pipe.
        """
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        out_read = pool.submit(self.proc.stdout.read)
        err_read = pool.submit(self.proc.stderr.read)
        try:
            out = out_read.result(timeout=timeout)
            self.proc.wait(timeout=timeout)
        except (TimeoutError, subprocess.TimeoutExpired):
            self.proc.kill()  # closes its pipes, so both reads end
            raise
        finally:
            err = err_read.result()
            pool.shutdown()  # the stdout read too, after a kill
            self.proc.stdout.close()
            self.proc.stderr.close()
        self.lines += out.splitlines()
        return self.proc.returncode, out, err

    def close(self) -> None:
        """Kill it if it still runs; reap it and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


P = TypeVar("P", bound="LineProcess")


def closing(started: list[P]) -> Iterator[list[P]]:
    """A fixture body: yield the list tests append to, then close every process in it."""
    yield started
    for process in started:
        process.close()
