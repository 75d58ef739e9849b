"""The demo's output: a side-by-side terminal table and a PNG chart of GPU occupancy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from emulator.demo import metrics, timeline


def _pct(value: float) -> str:
    return f"{100 * value:5.1f} %"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:6.2f} s"


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:6.1f}"


ROWS: list[tuple[str, Callable[[metrics.Report], str]]] = [
    ("priority share of GPU time", lambda r: _pct(r.priority_share)),
    ("idle GPU time", lambda r: f"{r.idle_gpu_s:7.0f} GPU·s ({_pct(r.idle_share).strip()})"),
    ("idle time converted to kept scavenger work", lambda r: _pct(r.idle_converted_share)),
    ("checkpoint + restore overhead", lambda r: _pct(r.overhead_share)),
    ("scavenger work thrown away", lambda r: f"{r.lost_gpu_s:7.0f} GPU·s"),
    ("preemptions", lambda r: str(r.preemptions)),
    ("restores (from the newest checkpoint)", lambda r: f"{r.restores} ({r.restores_from_newest})"),
    ("restores on a different node", lambda r: str(r.restores_on_other_node)),
    (
        "restores of another pod's state (of multi-pod)",
        lambda r: f"{r.wrong_identity_restores} (of {r.multi_pod_restores})",
    ),
    ("handover p50 (priority pod created -> running)", lambda r: _seconds(r.handover_p50_s)),
    ("handover p95", lambda r: _seconds(r.handover_p95_s)),
    ("work lost per preemption (steps)", lambda r: _number(r.lost_steps_per_preemption)),
    ("jobs completed", lambda r: str(r.jobs_completed)),
]


def table(
    reports: Sequence[metrics.Report], extra: Sequence[tuple[str, Sequence[str]]] = ()
) -> str:
    """Rows are the metrics, columns the runs (with Kontinue | without); ``extra`` rows are
    (name, one cell per run), appended."""
    rows = [name for name, _ in ROWS] + [name for name, _ in extra]
    width = max(len(name) for name in rows)
    cells = [[render(r) for r in reports] for _, render in ROWS] + [list(c) for _, c in extra]
    col = max(18, *(len(c) for row in cells for c in row), *(len(r.run) for r in reports))
    lines = [" " * width + " | " + " | ".join(r.run.rjust(col) for r in reports)]
    lines.append("-" * len(lines[0]))
    for name, row in zip(rows, cells, strict=True):
        lines.append(name.ljust(width) + " | " + " | ".join(c.rjust(col) for c in row))
    return "\n".join(lines)


COLOURS = {
    "priority": "#d62728",
    "scavenger": "#2ca02c",
    "rework": "#bcbd22",
    "thrown_away": "#7f7f7f",
    "overhead": "#ff7f0e",
    "idle": "#e8e8e8",
}
LABELS = {
    "priority": "priority",
    "scavenger": "scavenger work kept",
    "rework": "rework (re-doing thrown-away steps)",
    "thrown_away": "scavenger work thrown away",
    "overhead": "checkpoint + restore",
    "idle": "idle",
}
HATCHES = {"thrown_away": "xx", "rework": ".."}


def chart(runs: Sequence[timeline.Run], path: Path) -> Path:
    """One stacked-area panel per run: GPUs by category over time, every category (work later
    thrown away and the rework it causes included) with its GPU·s in that panel's legend."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(
        len(runs), 1, figsize=(13, 3.2 * len(runs)), sharex=True, squeeze=False
    )
    for axis, run in zip(axes[:, 0], runs, strict=True):
        times, series, totals = metrics.occupancy(run)
        names = list(metrics.CATEGORIES)
        areas = axis.stackplot(
            times,
            *(series[n] for n in names),
            labels=[f"{LABELS[n]}: {totals[n]:.0f} GPU·s" for n in names],
            colors=[COLOURS[n] for n in names],
            step="post",
        )
        for area, name in zip(areas, names, strict=True):
            if name in HATCHES:
                area.set_hatch(HATCHES[name])
        axis.set_ylim(0, run.gpus_total)
        axis.set_ylabel("GPUs")
        axis.set_title(run.name)
        axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axes[-1, 0].set_xlabel("seconds")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path
