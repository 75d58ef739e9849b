"""The demo's report numbers from hand-built timelines (every number derived, none assumed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from emulator.demo import metrics, report, timeline, trace
from emulator.demo.timeline import PodRecord, Role

RATE = 10.0  # steps per second


def _scavenger(pod: str, **fields: Any) -> PodRecord:
    defaults: dict[str, Any] = {"node": "n1", "created": 0.0}
    return PodRecord(
        job="scavenger-0", pod=pod, role=Role.SCAVENGER, gpus=4, **{**defaults, **fields}
    )


def _run(*pods: PodRecord, duration: float = 100.0) -> timeline.Run:
    return timeline.Run(
        name="test", duration=duration, gpus_total=8, steps_per_second=RATE, pods=tuple(pods)
    )


PRIORITY = PodRecord(
    job="priority-0-0",
    pod="priority-0-0-a",
    role=Role.PRIORITY,
    gpus=4,
    node="n1",
    created=30.0,
    started=33.0,
    running=33.0,
    ended=60.0,
    exit_code=0,
)


def test_kontinue_run_keeps_the_work_a_preemption_would_lose() -> None:
    first = _scavenger(
        "a",
        started=0,
        running=0,
        terminating=30,
        ended=32,
        exit_code=143,
        first_step=1,
        last_step=300,
        saved_step=300,
    )
    second = _scavenger(
        "b",
        node="n2",
        created=32,
        started=60,
        running=61,
        first_step=301,
        last_step=690,
        restored_from="scavenger-0-abc",
        restored_from_newest=True,
        checkpoint_node="n1",
    )
    result = metrics.report(_run(first, second, PRIORITY))
    assert result.preemptions == 1
    assert result.lost_steps_per_preemption == 0
    assert result.restores == result.restores_from_newest == 1
    assert result.restores_on_other_node == 1
    assert result.priority_gpu_s == 4 * 27
    assert result.scavenger_gpu_s == 4 * 30 + 4 * 39
    assert result.overhead_gpu_s == 4 * 2 + 4 * 1
    assert result.handover_p50_s == 3.0
    assert result.idle_gpu_s == pytest.approx(800 - 108 - 276 - 12)
    assert result.jobs_completed == 1


def test_baseline_run_throws_the_work_away() -> None:
    first = _scavenger(
        "a",
        started=0,
        running=0,
        terminating=30,
        ended=30.5,
        exit_code=143,
        first_step=1,
        last_step=300,
    )
    second = _scavenger("b", created=31, started=60, running=60, first_step=1, last_step=400)
    result = metrics.report(_run(first, second, PRIORITY))
    assert result.lost_steps_per_preemption == 300
    assert result.lost_gpu_s == 4 * 300 / RATE
    assert result.useful_scavenger_gpu_s == result.scavenger_gpu_s - 120
    assert result.restores == 0


def test_a_preempted_job_with_no_next_incarnation_loses_what_it_did_not_save() -> None:
    saved = _scavenger("a", terminating=10, exit_code=143, last_step=100, saved_step=90)
    unsaved = _scavenger("b", terminating=10, exit_code=137, last_step=100)
    assert metrics.lost_steps([saved]) == [10]
    assert metrics.lost_steps([unsaved]) == [100]


def test_percentile_is_an_observed_value() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 100.0]
    assert metrics.percentile(values, 95) == 100.0
    assert metrics.percentile(values, 50) == 3.0
    assert metrics.percentile([], 95) is None


def test_occupancy_never_exceeds_the_cluster() -> None:
    run = _run(PRIORITY, _scavenger("a", started=0, running=5, ended=90, exit_code=0))
    times, series, _ = metrics.occupancy(run, step=1.0)
    for index in range(len(times)):
        assert sum(series[name][index] for name in series) == 8
    assert series["overhead"][2] == 4  # restore init-container before the main container
    assert series["priority"][40] == 4


def test_trace_is_seeded_and_leaves_a_quiet_tail() -> None:
    first = trace.bursts(seed=7, duration=300, burst_every=60)
    assert first == trace.bursts(seed=7, duration=300, burst_every=60)
    assert first != trace.bursts(seed=8, duration=300, burst_every=60)
    assert first
    assert all(a.at < 300 * 0.8 + 1 for a in first)
    assert len({a.name for a in first}) == len(first)


def test_table_and_chart(tmp_path: Path) -> None:
    run = _run(PRIORITY, _scavenger("a", started=0, running=0, ended=90, exit_code=0))
    text = report.table([metrics.report(run), metrics.report(run)])
    assert "priority share of GPU time" in text
    assert "13.5 %" in text  # 108 of 800 GPU·s
    png = report.chart([run], tmp_path / "occupancy.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_occupancy_shows_thrown_away_work_and_the_rework_it_causes() -> None:
    """Issue 17, item 5: the baseline's first incarnation did 300 steps (30 s at 10 steps/s),
    saved nothing and was preempted; the next one starts over, so those 30 s are thrown away and
    its first 30 s re-do them. The legend's GPU·s come from the same intervals."""
    first = _scavenger(
        "a", started=0, running=0, terminating=30, ended=30.5, exit_code=143,
        first_step=1, last_step=300,
    )  # fmt: skip
    second = _scavenger("b", created=31, started=60, running=60, first_step=1, last_step=400)
    run = _run(first, second, PRIORITY)
    times, series, totals = metrics.occupancy(run, step=1.0)
    assert series["thrown_away"][10] == 4
    assert series["scavenger"][10] == 0
    assert series["rework"][70] == 4  # re-doing steps 1..300
    assert series["scavenger"][95] == 4  # new progress after step 300
    assert totals["thrown_away"] == pytest.approx(4 * 30)
    assert totals["rework"] == pytest.approx(4 * 30)
    assert totals["scavenger"] == pytest.approx(4 * 10)
    assert totals["thrown_away"] == metrics.report(run).lost_gpu_s
    assert sum(totals.values()) == pytest.approx(8 * 100)
    for index in range(len(times)):
        assert sum(series[name][index] for name in series) == 8

    # with a restore from the saved step nothing is thrown away or re-done
    saved = dataclasses.replace(first, saved_step=300)
    resumed = dataclasses.replace(second, first_step=301, last_step=700)
    _, _, kept = metrics.occupancy(_run(saved, resumed, PRIORITY), step=1.0)
    assert kept["thrown_away"] == kept["rework"] == 0


def test_a_pod_preempted_during_its_restore_holds_overhead_only_until_it_is_deleted() -> None:
    killed = _scavenger(
        "a", started=10, terminating=12, ended=13, exit_code=143, restored_from="x"
    )  # fmt: skip
    result = metrics.report(_run(killed))
    assert result.overhead_gpu_s == 4 * 3  # 10 -> 12 restoring, 12 -> 13 terminating
    _, _, totals = metrics.occupancy(_run(killed), step=1.0)
    assert totals["overhead"] == pytest.approx(4 * 3)


def test_restores_of_another_identitys_state_are_counted_per_pod_and_kept_apart() -> None:
    """Issue 19: the report counts pods handed another identity's state — a directory whose
    manifest names another member (the trainer's ``RESTORED ... member=`` line), or one the
    restore init-container refused for that reason (exit 7) — and each identity's incarnations
    are their own chain for the work thrown away."""
    common: dict[str, Any] = {"job": "pair", "role": Role.SCAVENGER, "gpus": 1, "node": "n1"}
    index0 = PodRecord(
        pod="p0", created=0, started=0, running=0, terminating=10, ended=11, exit_code=143,
        first_step=1, last_step=100, saved_step=100, identity="index=0", **common,
    )  # fmt: skip
    index1 = PodRecord(
        pod="p1", created=0, started=0, running=0, terminating=10, ended=11, exit_code=143,
        first_step=1, last_step=40, saved_step=40, identity="index=1", **common,
    )  # fmt: skip
    own = PodRecord(
        pod="p0b", created=12, started=12, running=13, first_step=101, last_step=150,
        restored_from="cp", restored_member="index=0", identity="index=0", **common,
    )  # fmt: skip
    other = PodRecord(
        pod="p1b", created=12, started=12, running=13, first_step=101, last_step=150,
        restored_from="cp", restored_member="index=0", identity="index=1", **common,
    )  # fmt: skip
    refused = PodRecord(
        pod="p1c", created=20, started=20, restored_from="cp", restore_exit=7,
        identity="index=1", **common,
    )  # fmt: skip
    assert (own.wrong_identity, other.wrong_identity, refused.wrong_identity) == (False, True, True)
    result = metrics.report(_run(index0, index1, own, other, refused))
    assert result.wrong_identity_restores == 2
    assert result.multi_pod_restores == 3
    # index 1 resumed at 101 although it had reached only 40: nothing of its own was lost, and
    # index 0's chain is judged on its own (reached 100, resumed from 100)
    assert result.lost_steps_per_preemption == 0
    clean = metrics.report(_run(index0, index1, own))
    assert (clean.wrong_identity_restores, clean.multi_pod_restores) == (0, 1)
    assert "restores of another pod's state (of multi-pod)" in report.table([result])
