"""The short soak inside ``make test``: one seed's 3 rounds on the whole emulated system.

Seed 42854's plan has every eviction source and every fault kind (tests/soak/plan.py): a
kube-scheduler preemption with the webhook offline and the history compacted (410); a Kueue
eviction of the whole Job with a member SIGKILLed mid-save, the leader killed while every
replica goes down, the bridge's Events failing with 503 and a forged Checkpoint from another
namespace; an Eviction API round whose member's save fails on a full volume, with the bridge's
Lease updates answered 409, watches cut and the leader killed again. ``make soak`` runs longer
plans (docs/security.md, "Fault soak").
"""

from __future__ import annotations

from pathlib import Path

from tests.soak import plan, run

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
