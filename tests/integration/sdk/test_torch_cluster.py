"""Plain PyTorch on the emulated cluster: preempted three times, bit for bit the uninterrupted run.

reference_workload/torch_trainer.py (the SDK's example; its three ``# kontinue`` lines are the
ones docs/workload-contract.md quotes) runs as a Job on a queue with one GPU of quota. Three
high-priority Jobs preempt it at seeded random points (real Kueue-style evictions: Workload
evicted, Job suspended, pods deleted with their grace period, SIGTERM). With Kontinue's real
webhook and bridge, every incarnation continues exactly where the previous one saved: the
stitched log has every step once, each loss bit-identical to an uninterrupted local run, and the
final parameters hash the same. Without Kontinue the same preemptions restart the run from step
one: the repeated steps are counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kontinue.kube import resources
from tests.integration.sdk import harness

pytest.importorskip("torch")  # CI installs it (Makefile); a bare venv skips, never passes

MODULE = "reference_workload.torch_trainer"
ENV = {"TRAINER_EPOCHS": "5", "TRAINER_SIZE": "256", "TRAINER_BATCH": "16"}
TOTAL_STEPS = 5 * 256 // 16
PACED = {**ENV, "TRAINER_STEP_SECONDS": "0.08"}
PREEMPTIONS = 3


@pytest.fixture(scope="module")
def reference() -> harness.Incarnation:
    (run,) = harness.reference_run(MODULE, ENV)
    assert run.exit_code == 0, run.log[-2000:]
    assert [n for n, _ in run.steps] == list(range(1, TOTAL_STEPS + 1))
    return run


async def _preempted_run(tmp_path: Path, *, opted_in: bool) -> list[harness.Incarnation]:
    async with harness.running(tmp_path, opted_in=opted_in) as c:
        await c.admin.create(resources.JOBS, harness.job("torch", module=MODULE, env=PACED))
        for index, steps in enumerate(harness.preemption_points(15, PREEMPTIONS, low=3, high=10)):
            await c.preempt_after(steps, f"high-{index}")
        await c.wait_complete("torch")
        # in the order they ran: by first step, the one that completed last
        return sorted(
            c.incarnations(), key=lambda inc: ((inc.steps or [(0, "")])[0][0], inc.exit_code == 0)
        )


@pytest.mark.timeout(420)
async def test_three_preemptions_with_kontinue_equal_the_uninterrupted_run_bit_for_bit(
    tmp_path: Path, reference: harness.Incarnation
) -> None:
    runs = await _preempted_run(tmp_path, opted_in=True)
    assert [run.exit_code for run in runs] == [143] * PREEMPTIONS + [0], [r.log for r in runs]
    for run in runs[:-1]:
        assert run.message is not None
        saved = json.loads(run.message)
        assert saved["kontinue"] == "saved"
        assert saved["step"] == run.steps[-1][0]  # saved the last step it logged
    for before, after in zip(runs, runs[1:], strict=False):
        assert after.steps[0][0] == before.steps[-1][0] + 1  # no step repeated, none skipped
    assert harness.stitched(runs) == reference.steps  # every step's loss, bit for bit
    assert runs[-1].done == reference.done  # the final parameters' sha256


@pytest.mark.timeout(420)
async def test_without_kontinue_the_same_preemptions_repeat_steps(
    tmp_path: Path, reference: harness.Incarnation
) -> None:
    runs = await _preempted_run(tmp_path, opted_in=False)
    assert len(runs) == PREEMPTIONS + 1
    assert all(run.steps[0][0] == 1 for run in runs)  # every incarnation started over
    repeated = len(harness.stitched(runs)) - TOTAL_STEPS
    lost = sum(run.steps[-1][0] for run in runs[:-1])
    assert repeated == lost >= PREEMPTIONS * 3
    print(f"without Kontinue: {PREEMPTIONS} preemptions repeated {repeated} steps")
    assert runs[-1].steps == reference.steps  # the last one ran everything again
