"""``--workload torch``: the scavengers as real PyTorch training, checked bit for bit.

Each scavenger runs reference_workload/torch_trainer.py (the SDK's plain-PyTorch example: a
seeded MLP on generated data, saved and restored through kontinue_sdk.pytorch), paced at the
demo's step rate, for a fixed number of steps so that it can finish within the run. Every
scavenger trains the same deterministic run, so one uninterrupted local run of the same script
is the reference: a scavenger that finished has kept the contract exactly when its final
``DONE steps=<n> params=<sha256>`` line equals the reference's. Priority jobs stay the
dependency-free reference_workload/trainer.py (short, and they opt out of checkpointing).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from emulator.demo import timeline

MODULE = "reference_workload.torch_trainer"
ROOT = Path(__file__).resolve().parents[2]
SIZE = 256
BATCH = 16
DONE = re.compile(r"^DONE (.*)$", re.MULTILINE)


def env(*, epochs: int, rate: float) -> dict[str, str]:
    """The trainer's settings; ``rate`` steps per second (``TRAINER_STEP_SECONDS`` = 1/rate)."""
    return {
        "TRAINER_EPOCHS": str(epochs),
        "TRAINER_SIZE": str(SIZE),
        "TRAINER_BATCH": str(BATCH),
        "TRAINER_STEP_SECONDS": str(round(1.0 / rate, 4)),
    }


def steps(epochs: int) -> int:
    return epochs * -(-SIZE // BATCH)


def reference(*, epochs: int, timeout: float = 600) -> str:
    """The ``DONE`` summary of the same training run uninterrupted (a local process, unpaced)."""
    settings: Mapping[str, str] = {**env(epochs=epochs, rate=1.0), "TRAINER_STEP_SECONDS": "0"}
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, "-m", MODULE],
        env={**os.environ, **settings, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    found = DONE.findall(done.stdout)
    if not found:
        raise RuntimeError(f"{MODULE} printed no DONE line: {done.stdout[-500:]}")
    return str(found[-1])


def verdict(run: timeline.Run, reference_done: str) -> str:
    """ "yes"/"no" for the scavengers that finished in ``run``, with how many did."""
    scavengers = {p.job for p in run.pods if p.role is timeline.Role.SCAVENGER}
    finished = {
        p.job: p.done for p in run.pods if p.role is timeline.Role.SCAVENGER and p.completed
    }
    if not finished:
        return f"— (0 of {len(scavengers)} finished)"
    differ = sorted(job for job, done in finished.items() if done != reference_done)
    if differ:
        return f"no ({len(differ)} of {len(finished)} finished differ)"
    return f"yes ({len(finished)} of {len(scavengers)} finished)"
