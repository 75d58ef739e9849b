"""``make demo``: the scavenger queue with Kontinue and without it, side by side.

Runs the same seeded trace twice on the emulated GPU cluster — once with Kontinue's real webhook
and bridge installed, once without (the baseline) — then prints the report and writes the chart.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from emulator.demo import metrics, report, scenario, scrape, systems, timeline, torch_workload

TORCH_DURATION = 150.0


def _parser() -> argparse.ArgumentParser:
    defaults = scenario.Options()
    parser = argparse.ArgumentParser(prog="python -m emulator.demo", description=__doc__)
    parser.add_argument(
        "--scenario",
        choices=["scavenger", "defrag"],
        default="scavenger",
        help="scavenger: the preemption trace (default); defrag: a 4-GPU job that fits nowhere, "
        "waited for / preempted for / made room for with kubectl kontinue defrag",
    )
    parser.add_argument(
        "--queue-system",
        choices=list(systems.ALL),
        default=systems.KUEUE,
        help="kueue: Kueue preempts (default); volcano: Volcano preempts within a queue and "
        "reclaims across queues; scheduler: Kueue admits, kube-scheduler preempts by priority "
        "(emulator/demo/systems.py)",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help=f"seconds per run (default {defaults.duration:.0f}; "
        f"{TORCH_DURATION:.0f} with --workload torch: the scavengers must finish to be compared)",
    )
    parser.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=defaults.checkpoint_seconds,
        help="how long a scavenger takes to save",
    )
    parser.add_argument(
        "--grace-seconds",
        type=int,
        default=defaults.grace_seconds,
        help="terminationGracePeriodSeconds (and the policy minimum)",
    )
    parser.add_argument("--burst-every", type=float, default=defaults.burst_every)
    parser.add_argument(
        "--workload",
        choices=["counter", "torch"],
        default=defaults.workload,
        help="torch: the scavengers train a real PyTorch model (checked against an "
        "uninterrupted run)",
    )
    parser.add_argument(
        "--torch-epochs",
        type=int,
        default=defaults.torch_epochs,
        help=f"with --workload torch: epochs per scavenger ({torch_workload.steps(1)} steps each)",
    )
    parser.add_argument("--out", type=Path, default=Path("out/demo"))
    return parser


class Bar:
    """One line on stderr, redrawn in place (plain lines when stderr is not a terminal)."""

    def __init__(self, label: str, total: float) -> None:
        self.label = label
        self.total = total
        self.tty = sys.stderr.isatty()
        self.last_print = 0.0

    def __call__(self, elapsed: float, counts: dict[str, int]) -> None:
        width = 30
        filled = int(width * min(1.0, elapsed / self.total))
        line = (
            f"{self.label:<20} [{'#' * filled}{'.' * (width - filled)}] "
            f"{elapsed:5.0f}/{self.total:.0f}s  preemptions {counts['preemptions']:3d}  "
            f"restores {counts['restores']:3d}"
        )
        if self.tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
        elif time.monotonic() - self.last_print >= 10:
            print(line, file=sys.stderr, flush=True)
            self.last_print = time.monotonic()

    def done(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def printed(
    queue_system: str,
    runs: Sequence[timeline.Run],
    extra: Sequence[tuple[str, Sequence[str]]] = (),
) -> str:
    """The report the demo prints once both runs ended: the table (with Kontinue | without),
    then, under it, the restored / cold-started / failed pods read from the bridge's own
    ``/metrics`` in the first run and whether they agree with the table (scrape.summary), then
    who evicted."""
    sources = ", ".join(f"{k} {v}" for k, v in sorted(runs[0].checkpoint_sources.items()))
    return "\n".join(
        [
            f"queue system: {queue_system}",
            report.table(metrics.reports(runs), extra),
            scrape.summary(runs[0]),
            f"checkpoints by who evicted (spec.trigger.source): {sources or 'none'}",
        ]
    )


async def _main(args: argparse.Namespace) -> int:
    options = scenario.Options(
        seed=args.seed,
        duration=args.duration
        or (TORCH_DURATION if args.workload == "torch" else scenario.Options().duration),
        checkpoint_seconds=args.checkpoint_seconds,
        grace_seconds=args.grace_seconds,
        burst_every=args.burst_every,
        workload=args.workload,
        torch_epochs=args.torch_epochs,
        queue_system=args.queue_system,
    )
    out: Path = args.out
    runs: list[timeline.Run] = []
    for with_kontinue in (True, False):
        label = "with Kontinue" if with_kontinue else "without (baseline)"
        workdir = out / ("with-kontinue" if with_kontinue else "baseline")
        shutil.rmtree(workdir, ignore_errors=True)
        bar = Bar(label, options.duration)
        runs.append(
            await scenario.run(
                options=options, with_kontinue=with_kontinue, workdir=workdir, progress=bar
            )
        )
        bar.done()
    extra: list[tuple[str, list[str]]] = []
    if options.workload == "torch":
        reference = torch_workload.reference(epochs=options.torch_epochs)
        extra.append(
            (
                "final parameters equal the uninterrupted run",
                [torch_workload.verdict(run, reference) for run in runs],
            )
        )
    print()
    print(printed(options.queue_system, runs, extra))
    chart = report.chart(runs, out / "occupancy.png")
    raw = out / "timeline.json"
    raw.write_text(json.dumps([dataclasses.asdict(run) for run in runs], indent=1))
    print(f"\nchart: {chart}\nraw timeline: {raw}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    if args.scenario == "defrag":
        from emulator.demo import defrag_main

        return asyncio.run(defrag_main.main(out=args.out / "defrag"))
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
