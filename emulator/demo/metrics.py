"""Pure: a run's timeline -> the numbers of the report. Nothing here is a constant of the demo.

GPU time is split the way an operator would account it: a GPU held by a priority pod is
*priority*; held by a scavenger's main container, *scavenger* (of which the steps later thrown
away by a restart from an older state are *lost*, and the steps re-doing them *rework*: the
chart, :func:`occupancy`, shows both as their own categories); held while a restore
init-container verifies or a preempted scavenger saves, *overhead*; held by nobody, *idle*.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
from collections.abc import Iterable

from emulator.demo import timeline
from emulator.demo.timeline import PodRecord, Role


@dataclasses.dataclass(frozen=True)
class Report:
    run: str
    capacity_gpu_s: float
    priority_gpu_s: float
    scavenger_gpu_s: float
    lost_gpu_s: float
    overhead_gpu_s: float
    idle_gpu_s: float
    preemptions: int
    restores: int
    restores_from_newest: int
    restores_on_other_node: int
    handover_p50_s: float | None
    handover_p95_s: float | None
    lost_steps_per_preemption: float | None
    jobs_completed: int
    multi_pod_restores: int = 0
    """Restores by pods of a multi-pod workload (a job whose pods have more than one identity):
    the ones where another identity's state could be handed over."""
    wrong_identity_restores: int = 0
    """Pods handed another identity's state (:attr:`timeline.PodRecord.wrong_identity`)."""

    @property
    def priority_share(self) -> float:
        return self.priority_gpu_s / self.capacity_gpu_s

    @property
    def idle_share(self) -> float:
        return self.idle_gpu_s / self.capacity_gpu_s

    @property
    def overhead_share(self) -> float:
        return self.overhead_gpu_s / self.capacity_gpu_s

    @property
    def useful_scavenger_gpu_s(self) -> float:
        return max(0.0, self.scavenger_gpu_s - self.lost_gpu_s)

    @property
    def idle_converted_share(self) -> float:
        """Of the GPU time priority work left free, the share that became kept scavenger work."""
        free = self.capacity_gpu_s - self.priority_gpu_s
        return self.useful_scavenger_gpu_s / free if free > 0 else 0.0


def _span(start: float | None, end: float | None, duration: float) -> float:
    if start is None:
        return 0.0
    stop = duration if end is None else end
    return max(0.0, min(stop, duration) - max(start, 0.0))


def _main_started_or_stopped(pod: PodRecord) -> float | None:
    """The end of a pod's restore/start overhead: its main container started, else (killed
    before it did: a victim preempted during its restore) its deletion began, else it ended."""
    for moment in (pod.running, pod.terminating, pod.ended):
        if moment is not None:
            return moment
    return None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (no interpolation: every reported value was observed)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def lost_steps(incarnations: list[PodRecord]) -> list[int]:
    """Steps thrown away at each preemption of one job's pods of one identity, in order.

    Lost = the last step reached before the kill minus the step the next incarnation resumed
    from (its first step - 1). With no next incarnation in the run, what was not saved is lost.
    """
    ordered = sorted(incarnations, key=lambda r: r.created)
    lost: list[int] = []
    for current, following in zip(ordered, [*ordered[1:], None], strict=True):
        if not current.preempted:
            continue
        reached = current.last_step or 0
        if following is not None and following.first_step is not None:
            resumed = following.first_step - 1
        else:
            resumed = current.saved_step or 0
        lost.append(max(0, reached - resumed))
    return lost


def report(run: timeline.Run) -> Report:
    d = run.duration
    priority = scavenger = overhead = lost_gpu = 0.0
    handovers: list[float] = []
    by_job: dict[tuple[str, str], list[PodRecord]] = collections.defaultdict(list)
    for pod in run.pods:
        if pod.role is Role.PRIORITY:
            priority += pod.gpus * _span(pod.started, pod.ended, d)
            if pod.running is not None:
                handovers.append(pod.running - pod.created)
            continue
        by_job[pod.job, pod.identity].append(pod)
        end_useful = pod.terminating if pod.terminating is not None else pod.ended
        scavenger += pod.gpus * _span(pod.running, end_useful, d)
        overhead += pod.gpus * _span(pod.started, _main_started_or_stopped(pod), d)
        if pod.terminating is not None:
            overhead += pod.gpus * _span(pod.terminating, pod.ended, d)
    lost_per_preemption: list[int] = []
    for incarnations in by_job.values():
        steps = lost_steps(incarnations)
        lost_per_preemption += steps
        gpus = incarnations[0].gpus
        lost_gpu += gpus * sum(steps) / run.steps_per_second
    capacity = run.gpus_total * d
    scavengers = [p for p in run.pods if p.role is Role.SCAVENGER]
    restored = [p for p in scavengers if p.restored_from]
    identities: dict[str, set[str]] = collections.defaultdict(set)
    for pod in scavengers:
        identities[pod.job].add(pod.identity)
    multi_pod = {job for job, seen in identities.items() if len(seen) > 1}
    return Report(
        run=run.name,
        capacity_gpu_s=capacity,
        priority_gpu_s=priority,
        scavenger_gpu_s=scavenger,
        lost_gpu_s=min(lost_gpu, scavenger),
        overhead_gpu_s=overhead,
        idle_gpu_s=max(0.0, capacity - priority - scavenger - overhead),
        preemptions=sum(1 for p in scavengers if p.preempted),
        restores=len(restored),
        restores_from_newest=sum(1 for p in restored if p.restored_from_newest),
        restores_on_other_node=sum(
            1 for p in restored if p.checkpoint_node and p.node and p.checkpoint_node != p.node
        ),
        handover_p50_s=statistics.median(handovers) if handovers else None,
        handover_p95_s=percentile(handovers, 95),
        lost_steps_per_preemption=(
            statistics.fmean(lost_per_preemption) if lost_per_preemption else None
        ),
        jobs_completed=sum(1 for p in run.pods if p.completed),
        multi_pod_restores=sum(1 for p in restored if p.job in multi_pod),
        wrong_identity_restores=sum(1 for p in scavengers if p.wrong_identity),
    )


CATEGORIES = ("priority", "scavenger", "rework", "thrown_away", "overhead", "idle")
"""The chart's categories, bottom to top. A scavenger's main-container time is split three ways:
*thrown_away* — the last steps before a preemption that the next incarnation did not resume
from (:func:`lost_steps`, at the run's step rate); *rework* — the next incarnation's first
steps, re-doing exactly those; *scavenger* — the rest, new kept progress."""


def _incarnation_losses(incarnations: list[PodRecord]) -> dict[int, tuple[int, int]]:
    """``id(record)`` -> (steps it threw away at its preemption, steps it re-did at its start)."""
    ordered = sorted(incarnations, key=lambda r: r.created)
    out: dict[int, tuple[int, int]] = {id(r): (0, 0) for r in ordered}
    for current, following in zip(ordered, [*ordered[1:], None], strict=True):
        if not current.preempted:
            continue
        (lost,) = lost_steps([current, following] if following is not None else [current])[:1]
        out[id(current)] = (lost, out[id(current)][1])
        if following is not None and following.first_step is not None:
            done = max(0, (following.last_step or 0) - (following.first_step - 1))
            out[id(following)] = (out[id(following)][0], min(lost, done))
    return out


def occupancy(
    run: timeline.Run, *, step: float = 1.0
) -> tuple[list[float], dict[str, list[float]], dict[str, float]]:
    """GPUs per category (:data:`CATEGORIES`) sampled every ``step`` seconds, and each
    category's GPU·s over the run (exact, from the intervals), for the chart and its legend."""
    times = [i * step for i in range(int(run.duration / step) + 1)]
    series: dict[str, list[float]] = {name: [0.0] * len(times) for name in CATEGORIES}
    totals: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)

    def add(name: str, gpus: int, start: float | None, end: float | None) -> None:
        if start is None:
            return
        stop = run.duration if end is None else end
        totals[name] += gpus * _span(start, stop, run.duration)
        for index, t in enumerate(times):
            if start <= t < stop:
                series[name][index] += gpus

    by_job: dict[tuple[str, str], list[PodRecord]] = collections.defaultdict(list)
    for pod in run.pods:
        if pod.role is Role.SCAVENGER:
            by_job[pod.job, pod.identity].append(pod)
    losses: dict[int, tuple[int, int]] = {}
    for incarnations in by_job.values():
        losses.update(_incarnation_losses(incarnations))
    for pod in run.pods:
        if pod.role is Role.PRIORITY:
            add("priority", pod.gpus, pod.started, pod.ended)
            continue
        add("overhead", pod.gpus, pod.started, _main_started_or_stopped(pod))
        end_useful = pod.terminating if pod.terminating is not None else pod.ended
        if pod.running is not None:
            end = min(run.duration if end_useful is None else end_useful, run.duration)
            lost, redone = losses.get(id(pod), (0, 0))
            thrown_from = max(pod.running, end - lost / run.steps_per_second)
            rework_to = min(thrown_from, pod.running + redone / run.steps_per_second)
            add("rework", pod.gpus, pod.running, rework_to)
            add("scavenger", pod.gpus, rework_to, thrown_from)
            add("thrown_away", pod.gpus, thrown_from, end)
        if pod.terminating is not None:
            add("overhead", pod.gpus, pod.terminating, pod.ended)
    for index in range(len(times)):
        used = sum(series[n][index] for n in CATEGORIES if n != "idle")
        series["idle"][index] = max(0.0, run.gpus_total - used)
    used_total = sum(v for k, v in totals.items() if k != "idle")
    totals["idle"] = max(0.0, run.gpus_total * run.duration - used_total)
    return times, series, totals


def reports(runs: Iterable[timeline.Run]) -> list[Report]:
    return [report(run) for run in runs]
