"""A Hugging Face Trainer on the emulated cluster: preempted three times, bit for bit the
uninterrupted run.

reference_workload/hf_trainer.py (a one-layer GPT-2 built from a config, nothing downloaded;
its three ``# kontinue`` lines are the ones docs/workload-contract.md quotes) runs as a Job on a
queue with one GPU of quota, with Kontinue's real webhook and bridge. Three high-priority Jobs
preempt it at seeded random points (Kueue-style evictions: Workload evicted, Job suspended, pods
deleted with their grace period, SIGTERM). kontinue_sdk.hf saves through the Trainer's own
``_save_checkpoint`` and resumes through ``resume_from_checkpoint``: the stitched log has every
step once, each loss bit-identical to an uninterrupted local run, and the final parameters hash
the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kontinue import checkpoint_format
from kontinue.kube import resources
from tests.integration.sdk import harness

pytest.importorskip("transformers")  # CI installs it (Makefile: the hf extra); a bare venv skips

MODULE = "reference_workload.hf_trainer"
ENV = {"TRAINER_EPOCHS": "4", "TRAINER_SIZE": "64", "TRAINER_BATCH": "8", "HF_HUB_OFFLINE": "1"}
TOTAL_STEPS = 4 * 64 // 8
PREEMPTIONS = 3
DOC = harness.ROOT / "docs" / "workload-contract.md"


def test_the_three_lines_in_the_docs_are_the_ones_the_tested_script_uses() -> None:
    doc = DOC.read_text()
    recipe = doc.split("### Hugging Face Trainer", 1)[1].split("```python", 1)[1].split("```")[0]
    added = [line.strip() for line in recipe.splitlines() if line.strip().endswith("# kontinue")]
    script = (harness.ROOT / "reference_workload" / "hf_trainer.py").read_text()
    used = [line.strip() for line in script.splitlines() if line.strip().endswith("# kontinue")]
    assert added == used
    assert len(used) == 3


@pytest.mark.timeout(420)
async def test_three_preemptions_of_a_trainer_equal_the_uninterrupted_run_bit_for_bit(
    tmp_path: Path,
) -> None:
    (reference,) = harness.reference_run(MODULE, ENV)
    assert reference.exit_code == 0, reference.log[-2000:]
    assert [n for n, _ in reference.steps] == list(range(1, TOTAL_STEPS + 1))
    paced = {**ENV, "TRAINER_STEP_SECONDS": "0.15"}
    async with harness.running(tmp_path, opted_in=True) as c:
        await c.admin.create(resources.JOBS, harness.job("hf", module=MODULE, env=paced))
        for index, steps in enumerate(harness.preemption_points(15, PREEMPTIONS, low=2, high=4)):
            await c.preempt_after(steps, f"high-{index}")
        await c.wait_complete("hf")
        runs = sorted(
            c.incarnations(), key=lambda inc: ((inc.steps or [(0, "")])[0][0], inc.exit_code == 0)
        )
    assert [run.exit_code for run in runs] == [143] * PREEMPTIONS + [0], [r.log for r in runs]
    for run in runs[:-1]:
        assert run.message is not None
        saved = json.loads(run.message)
        assert saved["kontinue"] == "saved"
        assert saved["step"] == run.steps[-1][0]  # saved the last step it logged
        manifest = checkpoint_format.verify(Path(saved["path"]))  # the project's manifest
        name = manifest.extra["hf_checkpoint"]
        assert name == f"checkpoint-{saved['step']}"  # the Trainer's own checkpoint inside
        assert any(entry.path == f"{name}/trainer_state.json" for entry in manifest.files)
        assert any(entry.path == f"{name}/rng_state.pth" for entry in manifest.files)
    for before, after in zip(runs, runs[1:], strict=False):
        assert after.steps[0][0] == before.steps[-1][0] + 1  # no step repeated, none skipped
    assert harness.stitched(runs) == reference.steps  # every step's loss, bit for bit
    assert runs[-1].done == reference.done  # the final parameters' sha256
