"""Issue 13, "Demo": a short ``--scenario defrag``, all three modes, real processes.

The urgent job waits least with Kontinue's defrag among the runs that lose no work; only the
preempting baseline throws scavenger steps away and counts failed pods.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.demo import defrag

pytestmark = pytest.mark.timeout(400)

OPTIONS = defrag.Options(scavenger_seconds=25, urgent_seconds=3, arrive_after=3)


async def test_defrag_runs_the_urgent_job_sooner_and_loses_nothing(tmp_path: Path) -> None:
    results = {
        mode: await defrag.run(mode=mode, options=OPTIONS, workdir=tmp_path / mode)
        for mode in defrag.MODES
    }
    wait, preempt, moved = results["wait"], results["preempt"], results["defrag"]
    assert (wait.evictions, wait.lost_steps, wait.moves) == (0, 0, 0)
    assert preempt.evictions == 2
    assert preempt.lost_steps > 0
    assert preempt.restores == 0
    assert preempt.failed == 2  # counted against backoffLimit
    assert (moved.evictions, moved.moves, moved.restores) == (2, 2, 2)
    assert moved.lost_steps == 0
    assert moved.failed == 0
    assert moved.urgent_wait < wait.urgent_wait
    assert "plan: free node gpu-a by moving 2 job(s):" in moved.cli_output
    table = defrag.table(list(results.values()))
    assert "defrag (Kontinue)" in table.splitlines()[0]
