"""Consistency ``shared`` end to end: every pod of an Indexed Job restores rank 0's member.

docs/api.md ("Consistency"): under ``shared`` the webhook plans rank 0's newest saved member for
every pod; the restore init-container verifies that directory against ``KONTINUE_RESTORE_MEMBER``
and links it, and the workload (here the reference trainer, which reads the contract through
kontinue_sdk/environment.py) must accept the link although the manifest names ``index=0`` and the
pod is ``index=1``: it checks the restore against ``KONTINUE_RESTORE_MEMBER`` and records its own
``KONTINUE_MEMBER`` in its next save. Before the webhook gave main containers that variable, the
pod of index 1 refused rank 0's state (exit 3) and the Job never completed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kontinue import checkpoint_format, keys
from kontinue.kube import resources
from reference_workload import trainer
from tests.integration.sdk import harness
from tests.waiting import eventually

ENV = {
    "TRAINER_RATE": "20",
    "TRAINER_STEPS": "60",
    "TRAINER_STATE_BYTES": "4096",
    "TRAINER_SAVE_SECONDS": "0",
}
PROGRESS = re.compile(r"^PROGRESS step=(\d+) ", re.MULTILINE)
RESTORED = re.compile(r"^RESTORED step=(\d+) ", re.MULTILINE)


@pytest.mark.timeout(300)
async def test_under_shared_both_ranks_restore_rank_0s_member_and_the_job_completes(
    tmp_path: Path,
) -> None:
    async with harness.running(tmp_path, opted_in=True, quota=2, consistency="shared") as c:
        await c.admin.create(
            resources.JOBS,
            harness.job("shared", module="reference_workload.trainer", env=ENV, pods=2),
        )

        async def both_training() -> bool:
            logs = [inc.log for inc in c.incarnations()]
            return len(logs) == 2 and all(len(PROGRESS.findall(log)) >= 5 for log in logs)

        await eventually(both_training, within=120, what="both ranks 5 steps in")
        await c.preempt("high", pods=2)
        await c.wait_complete("shared", within=180)
        runs = c.incarnations()

    by_rank = {rank: [r for r in runs if r.rank == rank] for rank in (0, 1)}
    for rank, mine in by_rank.items():
        codes = sorted(r.exit_code for r in mine if r.exit_code is not None)
        assert codes == [0, 143], (rank, [r.log[-400:] for r in mine])
    first_of = {rank: next(r for r in mine if r.exit_code == 143) for rank, mine in by_rank.items()}
    saved = {rank: json.loads(run.message or "{}") for rank, run in first_of.items()}
    assert all(message["kontinue"] == "saved" for message in saved.values())
    manifest = checkpoint_format.verify(Path(saved[0]["path"]), member="index=0")
    assert trainer.saved_step(manifest) == saved[0]["step"]
    assert (
        json.loads((Path(saved[1]["path"]) / "MANIFEST.json").read_text())[keys.MANIFEST_MEMBER_KEY]
        == "index=1"
    )  # each rank saved as itself
    for mine in by_rank.values():
        (last,) = [r for r in mine if r.exit_code == 0]
        # both restored rank 0's step, not their own
        assert [int(n) for n in RESTORED.findall(last.log)] == [saved[0]["step"]], last.log[:400]
        assert "DONE step=60" in last.log
