"""``make fuzz``: the fuzz properties over at least 100,000 drawn inputs, with a fresh seed.

    python -m tests.fuzz [--inputs N] [--seed S]

Prints the count of inputs tried, how many broke a property (the first few in full: problems
and the input), and the slowest input with its time. Exits 1 when any input broke a property;
``--seed`` replays a run.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.fuzz import inputs, properties

BATCH = 10_000
"""Inputs per Hypothesis run: its record of tried inputs grows with each run, so a long search
is a series of runs with seeds derived from the one printed."""


def run(count: int, chosen_seed: int) -> properties.Stats:
    stats = properties.Stats()
    started = time.monotonic()
    batch = 0
    while stats.inputs < count:
        _batch(stats, min(BATCH, count - stats.inputs), chosen_seed + batch, started)
        batch += 1
    return stats


def _batch(stats: properties.Stats, count: int, batch_seed: int, started: float) -> None:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--inputs", type=int, default=100_000)
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
    return 1 if stats.failed else 0


if __name__ == "__main__":
    sys.exit(main())
