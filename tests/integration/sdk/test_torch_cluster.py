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
import socket
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


async def _preempted_run(
    tmp_path: Path, *, opted_in: bool, env: dict[str, str] = PACED, ranks: int = 1
) -> list[harness.Incarnation]:
    async with harness.running(tmp_path, opted_in=opted_in, quota=ranks) as c:
        await c.admin.create(
            resources.JOBS, harness.job("torch", module=MODULE, env=env, pods=ranks)
        )
        for index, steps in enumerate(harness.preemption_points(15, PREEMPTIONS, low=3, high=10)):
            await c.preempt_after(steps, f"high-{index}", ranks=ranks)
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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.timeout(420)
async def test_a_two_rank_ddp_indexed_job_preempted_three_times_equals_the_uninterrupted_run(
    tmp_path: Path,
) -> None:
    ddp = {
        **ENV,
        "TRAINER_SIZE": "512",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
    }
    references = harness.reference_run(MODULE, ddp, ranks=2)
    assert [run.exit_code for run in references] == [0, 0], [r.log[-500:] for r in references]
    runs = await _preempted_run(
        tmp_path, opted_in=True, env={**ddp, "TRAINER_STEP_SECONDS": "0.08"}, ranks=2
    )
    for rank, reference in enumerate(references):
        mine = [run for run in runs if run.rank == rank]
        assert [run.exit_code for run in mine] == [143] * PREEMPTIONS + [0]
        assert harness.stitched(mine) == reference.steps  # this rank's every loss, bit for bit
        assert mine[-1].done == reference.done
    # all ranks saved the same step at each preemption, each into its own member directory
    saved = [json.loads(run.message or "{}") for run in runs if run.exit_code == 143]
    by_step: dict[int, set[str]] = {}
    for message in saved:
        manifest = json.loads((Path(message["path"]) / "MANIFEST.json").read_text())
        by_step.setdefault(message["step"], set()).add(manifest["member"])
    assert list(by_step.values()) == [{"index=0", "index=1"}] * PREEMPTIONS
