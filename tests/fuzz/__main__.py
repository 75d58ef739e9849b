"""``make fuzz``: the fuzz properties over at least 100,000 drawn inputs, with a fresh seed.

    python -m tests.fuzz [--inputs N] [--restore-inputs M] [--seed S]

``--inputs`` admission reviews (tests/fuzz/properties.py), then ``--restore-inputs`` checkpoint
directories for the restore program (tests/fuzz/restore.py; default 10,000). For each: the
count of inputs tried, how many broke a property (the first few in full: problems and the
input), and the slowest input with its time. Exits 1 when any input broke a property;
``--seed`` replays a run.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.fuzz import inputs, properties, runs
from tests.fuzz import restore as restore_fuzz

BATCH = 10_000
"""Inputs per Hypothesis run: its record of tried inputs grows with each run, so a long search
is a series of runs with seeds derived from the one printed."""


def run(count: int, chosen_seed: int) -> runs.Stats[inputs.Case]:
    stats = runs.Stats(properties.check)
    started = time.monotonic()
    batch = 0
    while stats.inputs < count:
        _batch(stats, min(BATCH, count - stats.inputs), chosen_seed + batch, started)
        batch += 1
    return stats


def _batch(stats: runs.Stats[inputs.Case], count: int, batch_seed: int, started: float) -> None:
    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # no shrinking: every failure is counted and kept as drawn
        suppress_health_check=list(HealthCheck),
    )
    @seed(batch_seed)
    @given(inputs.cases())
    def one(case: inputs.Case) -> None:
        stats.record(case)
        if stats.inputs % 10_000 == 0:
            rate = stats.inputs / (time.monotonic() - started)
            print(f"  {stats.inputs} inputs, {stats.failed} failed, {rate:.0f}/s", flush=True)

    before = stats.inputs
    one()
    if stats.inputs == before:  # pragma: no cover - Hypothesis found nothing to generate
        raise RuntimeError("no inputs generated")


def run_restore(count: int, chosen_seed: int) -> runs.Stats[restore_fuzz.Case]:
    scratch = restore_fuzz.scratch_directory()
    stats = runs.Stats[restore_fuzz.Case](lambda case: restore_fuzz.check(case, scratch))
    started = time.monotonic()
    batch = 0
    try:
        while stats.inputs < count:
            size = min(BATCH, count - stats.inputs)

            @settings(
                max_examples=size,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @seed(chosen_seed + batch)
            @given(restore_fuzz.cases())
            def one(case: restore_fuzz.Case) -> None:
                stats.record(case)
                if stats.inputs % 5_000 == 0:
                    rate = stats.inputs / (time.monotonic() - started)
                    done = f"{stats.inputs} inputs, {stats.failed} failed"
                    print(f"  {done}, {rate:.0f}/s", flush=True)

            before = stats.inputs
            one()
            if stats.inputs == before:  # pragma: no cover - Hypothesis found nothing to generate
                raise RuntimeError("no inputs generated")
            batch += 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return stats


def _restore_report(count: int, chosen: int) -> int:
    print(f"fuzzing the restore program: {count} inputs, seed {chosen}", flush=True)
    started = time.monotonic()
    stats = run_restore(count, chosen)
    elapsed = time.monotonic() - started
    print(f"restore program: inputs tried: {stats.inputs} in {elapsed:.0f} s (seed {chosen})")
    print(f"restore program: failures: {stats.failed}")
    for problems, case in stats.failures[:5]:
        print(f"  - {'; '.join(problems)}\n    {case.describe()}")
    if stats.slowest_case is not None:
        print(
            f"restore program: slowest input: {stats.slowest * 1000:.1f} ms: "
            f"{stats.slowest_case.describe()}"
        )
    return stats.failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--restore-inputs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--save", metavar="FILE", help="write failing inputs here, one a line")
    args = parser.parse_args(argv)
    chosen = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    logging.disable(logging.CRITICAL)  # denials are logged per request; the count is below
    print(f"fuzzing the admission handlers: {args.inputs} inputs, seed {chosen}", flush=True)
    started = time.monotonic()
    stats = run(args.inputs, chosen)
    elapsed = time.monotonic() - started
    print(f"inputs tried: {stats.inputs} in {elapsed:.0f} s (seed {chosen})")
    print(f"failures: {stats.failed}")
    for problems, case in stats.failures[:5]:
        print(f"  - {'; '.join(problems)}\n    {case.describe()}")
    if args.save:
        with open(args.save, "w") as out:
            for problems, case in stats.failures:
                record = {"problems": problems, "path": case.path, "state": case.state_index}
                out.write(json.dumps({**record, "body": case.body.decode("utf-8", "replace")}))
                out.write("\n")
        print(f"failing inputs written to {args.save}")
    if stats.slowest_case is not None:
        again = time.perf_counter()
        properties.check(stats.slowest_case)
        rerun = (time.perf_counter() - again) * 1000
        print(f"slowest input, run again: {rerun:.1f} ms (the first time may include a GC pause)")
        if args.save:
            with open(args.save, "a") as out:
                slow = stats.slowest_case
                record = {"slowest_ms": stats.slowest * 1000, "path": slow.path}
                out.write(json.dumps({**record, "body": slow.body.decode("utf-8", "replace")}))
                out.write("\n")
        print(f"slowest input: {stats.slowest * 1000:.1f} ms: {stats.slowest_case.describe()}")
    restore_failed = _restore_report(args.restore_inputs, chosen) if args.restore_inputs else 0
    total = stats.inputs + args.restore_inputs
    print(f"total: {total} inputs, {stats.failed + restore_failed} failures")
    return 1 if stats.failed or restore_failed else 0


if __name__ == "__main__":
    sys.exit(main())
