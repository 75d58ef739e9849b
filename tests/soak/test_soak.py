"""The short soak inside ``make test``: a few rounds of one seed on the whole emulated system,
for each workload shape (tests/soak/shapes.py).

Seed 42854's plan for the 2-pod Indexed Job has every eviction source and every fault kind
(tests/soak/plan.py): a kube-scheduler preemption with the webhook offline and the history
compacted (410); a Kueue eviction of the whole Job with a member SIGKILLed mid-save, the leader
killed while every replica goes down, the bridge's Events failing with 503 and a forged
Checkpoint from another namespace; an Eviction API round whose member's save fails on a full
volume, with the bridge's Lease updates answered 409, watches cut and the leader killed again.

Seed 125's plan for the two 2 x 2 shapes of issue 19 (a JobSet of 2 replicated Jobs x 2 pods,
a Volcano Job of 2 tasks x 2 pods): the whole workload evicted (a drain of every pod; Volcano
reclaiming every GPU) while the bridge's status updates conflict and its leader is killed, so
that every one of the 4 identities saves and each of the next pods must restore its own; then
one pod evicted with a member SIGKILLed mid-save, the leader killed again and a forgery; for the
JobSet a kube-scheduler preemption with the bridge's pod watch failing. ``make soak`` runs
longer plans of every shape (docs/security.md, "Fault soak").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.soak import invariants, plan, run, shapes

SEED = 42854
ROUNDS = 3


async def test_a_short_soak_breaks_no_invariant(tmp_path: Path) -> None:
    report = await run.soak(SEED, ROUNDS, tmp_path)
    assert report.violations == [], report.summary() + "\n" + "\n".join(report.trace)
    # it did what it says: every round evicted, every fault of the plan was applied
    assert sum(report.evictions.values()) == ROUNDS
    assert set(report.evictions) == set(plan.SOURCES)
    assert set(report.faults) == {f.kind for r in report.rounds for f in r.faults}
    assert report.api_errors_fired > 0
    # every pod the run created started and was checked: 2 at first, then 2 per Kueue eviction
    # and 1 per single-pod eviction (more if a restore failed and its pod was replaced)
    created = 2 + sum(2 if r.source == "kueue" else 1 for r in report.rounds)
    assert report.checks["restores-the-planned-member"] >= created
    assert report.sets >= ROUNDS - 1  # a round whose pods the outage left unplumbed has none


SHAPE_SEED = 125
SHAPE_ROUNDS = {"jobset": 3, "vcjob": 2}


@pytest.mark.timeout(300)  # four members and a restart of each: slower under load
@pytest.mark.parametrize("name", list(SHAPE_ROUNDS))
async def test_a_short_soak_of_a_2x2_workload_restores_each_identity_its_own(
    tmp_path: Path, name: str
) -> None:
    shape = shapes.SHAPES[name]
    rounds = SHAPE_ROUNDS[name]
    report = await run.soak(SHAPE_SEED, rounds, tmp_path, shape=shape)
    assert report.violations == [], report.summary() + "\n" + "\n".join(report.trace)
    assert sum(report.evictions.values()) == rounds
    assert set(report.evictions) == set(shape.sources)
    assert set(report.faults) == {f.kind for r in report.rounds for f in r.faults}
    # 4 distinct identities recorded, and every one of them restored (each its own: a restore
    # of another identity's state would be a violation of OWN_IDENTITY)
    assert report.identities == set(shape.identities)
    assert report.restored == set(shape.identities)
    assert report.checks[invariants.OWN_IDENTITY] >= len(shape.identities)
    # every pod the run created started and was checked: 4, then 4 after the whole eviction
    # and 1 per single-pod eviction
    created = 4 + sum(4 if r.whole else 1 for r in report.rounds)
    assert report.checks["restores-the-planned-member"] >= created
