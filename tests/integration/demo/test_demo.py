"""Issue 7, "Done when": a short demo, both runs, on the emulated cluster with real processes.

With Kontinue the scavengers lose less work than without it, and every incarnation of a
preempted scavenger that had a Succeeded checkpoint restored from the newest one.
"""

from __future__ import annotations

import re
from pathlib import Path

from emulator.demo import __main__ as demo_main
from emulator.demo import metrics, report, scenario, scrape, timeline

OPTIONS = scenario.Options(seed=3, duration=30.0, burst_every=9.0, rate=5.0, grace_seconds=6)


async def test_a_short_demo_keeps_work_the_baseline_throws_away(tmp_path: Path) -> None:
    with_kontinue = await scenario.run(
        options=OPTIONS, with_kontinue=True, workdir=tmp_path / "with"
    )
    baseline = await scenario.run(
        options=OPTIONS, with_kontinue=False, workdir=tmp_path / "without"
    )
    ours, theirs = metrics.report(with_kontinue), metrics.report(baseline)

    assert ours.preemptions > 0
    assert theirs.preemptions > 0
    assert ours.lost_gpu_s < theirs.lost_gpu_s
    assert ours.lost_steps_per_preemption is not None
    assert theirs.lost_steps_per_preemption is not None
    assert ours.lost_steps_per_preemption < theirs.lost_steps_per_preemption

    due = [
        p
        for p in with_kontinue.pods
        if p.role is timeline.Role.SCAVENGER and p.newest_checkpoint is not None
    ]
    assert due, "no scavenger was readmitted after a checkpoint: the trace is too short"
    for pod in due:
        assert pod.restored_from == pod.newest_checkpoint, pod
    assert ours.restores == ours.restores_from_newest == len(due)
    assert theirs.restores == 0

    # issue 19: the multi-pod scavenger (a 2-pod Indexed Job, created last) ran as two
    # identities; every pod that restored was handed its own identity's state — judged from the
    # restored directories' own manifests (the trainer's RESTORED line names who saved it) and
    # the restore exit codes — and a pair pod with a checkpoint due restored it (the loop above)
    pair = [p for p in with_kontinue.pods if p.job == "scavenger-6"]  # Options.pairs: the last
    assert {p.identity for p in pair} == {"index=0", "index=1"}, pair
    restored = [p for p in with_kontinue.pods if p.restored_from and p.restore_exit == 0]
    assert all(p.restored_member == p.identity for p in restored if p.first_step), restored
    assert ours.multi_pod_restores == sum(1 for p in pair if p.restored_from)
    assert ours.wrong_identity_restores == 0
    assert "restores of another pod's state" in report.table([ours, theirs])

    # issue 12: the bridge's own /metrics, scraped at the end, agree with the table
    ran = [p for p in with_kontinue.pods if p.restored_from and p.restore_exit == 0]
    assert with_kontinue.bridge_restores["restored"] == len(ran) > 0
    assert with_kontinue.bridge_restores["failed"] == 0
    cold = [p for p in with_kontinue.pods if p.cold_start]
    assert with_kontinue.bridge_restores["cold_start"] == len(cold)
    assert "agrees with the table" in scrape.summary(with_kontinue)
    assert baseline.bridge_restores == {}

    # ... and `make demo` prints them under its table, where the numbers add up: every restore
    # the table counts (a checkpoint chosen for a pod) the bridge counted as restored or failed,
    # or it is named as not run yet
    lines = demo_main.printed(OPTIONS.queue_system, [with_kontinue, baseline]).splitlines()
    (row,) = [i for i, text in enumerate(lines) if text.startswith("restores (from the newest")]
    (under,) = [i for i, text in enumerate(lines) if text.startswith("from the bridge's /metrics")]
    assert under > row
    table_restores = int(lines[row].split("|")[1].split()[0])
    assert table_restores == ours.restores
    told = re.fullmatch(
        r"from the bridge's /metrics \(kontinue_restores_total\): restored (\d+), "
        r"cold-started (\d+), failed (\d+) — agrees with the table"
        r"(?:; (\d+) of the table's restores had not run at the end)?",
        lines[under],
    )
    assert told is not None, lines[under]
    counted, cold_started, failed, waiting = (int(group or 0) for group in told.groups())
    assert (counted, cold_started, failed) == (
        with_kontinue.bridge_restores["restored"],
        with_kontinue.bridge_restores["cold_start"],
        with_kontinue.bridge_restores["failed"],
    )
    assert counted + failed + waiting == table_restores
    assert all(p.restored_from is None for p in baseline.pods)
