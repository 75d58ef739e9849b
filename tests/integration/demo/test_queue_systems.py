"""Issue 17, item 4: a short demo per queue system, both runs, on the emulated cluster with real
processes — ``volcano`` (Volcano reclaims across queues and preempts within one, no Kueue CRDs)
and ``scheduler`` (Kueue admits everything, kube-scheduler preempts by priority). ``kueue``, the
default, is tests/integration/demo/test_demo.py.

With Kontinue the scavengers lose less work than without, every incarnation that had a good
checkpoint restored from the newest one, the Checkpoints name the component that evicted, and the
bridge's own /metrics agree with the table.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from emulator.demo import metrics, report, scenario, scrape, systems, timeline

OPTIONS = scenario.Options(seed=3, duration=30.0, burst_every=9.0, rate=5.0, grace_seconds=6)
SOURCE = {systems.VOLCANO: "Volcano", systems.SCHEDULER: "Scheduler"}
PAIR = {
    systems.VOLCANO: {"task=train,index=0", "task=train,index=1"},
    systems.SCHEDULER: {"index=0", "index=1"},
}


@pytest.mark.parametrize("system", [systems.VOLCANO, systems.SCHEDULER])
async def test_a_short_demo_per_queue_system(tmp_path: Path, system: str) -> None:
    options = dataclasses.replace(OPTIONS, queue_system=system)
    ours_run = await scenario.run(options=options, with_kontinue=True, workdir=tmp_path / "with")
    theirs_run = await scenario.run(
        options=options, with_kontinue=False, workdir=tmp_path / "without"
    )
    ours, theirs = metrics.report(ours_run), metrics.report(theirs_run)
    assert ours.preemptions > 0
    assert theirs.preemptions > 0
    assert ours.lost_gpu_s < theirs.lost_gpu_s
    assert ours.lost_steps_per_preemption is not None
    assert theirs.lost_steps_per_preemption is not None
    assert ours.lost_steps_per_preemption < theirs.lost_steps_per_preemption

    # who evicted: only the queue system under test
    assert set(ours_run.checkpoint_sources) == {SOURCE[system]}, ours_run.checkpoint_sources
    due = [
        p
        for p in ours_run.pods
        if p.role is timeline.Role.SCAVENGER and p.newest_checkpoint is not None
    ]
    assert due, "no scavenger was restarted after a checkpoint: the trace is too short"
    for pod in due:
        # kube-scheduler preemption: the Job replaces a victim as soon as it failed (after its
        # save); a replacement created before the bridge recorded that eviction cannot restore
        # it (a race docs/demo.md names). Every other one restores the newest set.
        if pod.newest_existed is False and system == systems.SCHEDULER:
            continue
        assert pod.restored_from == pod.newest_checkpoint, pod
    raced = sum(1 for p in due if p.newest_existed is False and system == systems.SCHEDULER)
    assert ours.restores == len(due)
    assert ours.restores_from_newest >= len(due) - raced
    assert theirs.restores == 0
    # the bridge's /metrics, compared once the cluster is frozen (stack.Stack.freeze), agree
    # with the table, and there is something to agree on
    assert "agrees with the table" in scrape.summary(ours_run)
    ran = [p for p in ours_run.pods if p.restored_from and p.restore_exit == 0]
    assert ours_run.bridge_restores["restored"] == len(ran) > 0
    # issue 19: the multi-pod scavenger (the last, scenario.Options.pairs) ran as two
    # identities — a 2-pod Indexed Job, or on Volcano a vcjob task of 2 replicas whose pods keep
    # their names across incarnations — and no pod was handed another identity's state, judged
    # from the restored directories' own manifests (the trainer's RESTORED line) and the
    # restore exit codes
    pair = [p for p in ours_run.pods if p.job == "scavenger-6"]
    assert {p.identity for p in pair} == PAIR[system], pair
    assert all(p.restored_member == p.identity for p in ran if p.first_step), ran
    assert ours.multi_pod_restores == sum(1 for p in pair if p.restored_from)
    if system == systems.VOLCANO:  # issue 19: the Volcano count is not vacuous
        assert ours.multi_pod_restores > 0, pair
    assert ours.wrong_identity_restores == 0
    table = report.table([ours, theirs])
    assert "scavenger work thrown away" in table
    assert "with Kontinue" in table
