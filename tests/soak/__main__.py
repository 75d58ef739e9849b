"""``make soak``: seeded soak runs of the whole emulated system under faults.

    python -m tests.soak [--seed S] [--runs N] [--rounds R] [--shape all|indexed|jobset|vcjob]
                         [--members M]

Each run plays ``--rounds`` rounds of one seed's plan (seeds S, S+1, ... for ``--runs``) on each
workload shape asked for (tests/soak/shapes.py; ``all``, the default: the Indexed Job of
``--members`` pods (2), the JobSet of 2 replicated Jobs x 2 pods and the Volcano Job of 2 tasks
x 2 pods, one after the other), prints its report (evictions, faults, invariant checks, and on a
violation the seed, the shape and the plan to replay it) and the totals. Exits 1 when any run
broke an invariant.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

from tests.soak import invariants, run, shapes


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument(
        "--members", type=int, default=2, help="pods of the Indexed Job shape (default 2)"
    )
    parser.add_argument(
        "--shape", choices=["all", *shapes.SHAPES], default="all", help="the workload shape(s)"
    )
    parser.add_argument("--trace", action="store_true", help="print every pod's and set's record")
    parser.add_argument(
        "--log-level", default="ERROR", help="the components' logging level (default ERROR)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    started = time.monotonic()
    evictions: collections.Counter[str] = collections.Counter()
    faults: collections.Counter[str] = collections.Counter()
    by_shape: collections.Counter[str] = collections.Counter()
    checks = fired = broken = unrecorded = runs = 0
    every = {**shapes.SHAPES, "indexed": shapes.indexed(args.members)}
    chosen = list(every.values()) if args.shape == "all" else [every[args.shape]]
    for seed, shape in ((s, x) for s in range(first, first + args.runs) for x in chosen):
        runs += 1
        with tempfile.TemporaryDirectory(prefix=f"kontinue-soak-{seed}-{shape.name}-") as tmp:
            report = asyncio.run(run.soak(seed, args.rounds, Path(tmp), shape=shape))
        print(report.summary(), flush=True)
        if args.trace or report.violations:
            print("\n".join(f"    {line}" for line in report.trace), flush=True)
        evictions.update(report.evictions)
        by_shape[shape.name] += sum(report.evictions.values())
        faults.update(report.faults)
        checks += sum(report.checks.values())
        fired += report.api_errors_fired
        broken += bool(report.violations)
        unrecorded += len(report.findings)
    print(
        f"total: {runs} runs (seeds {first}..{first + args.runs - 1}), "
        f"{sum(evictions.values())} evictions {dict(sorted(evictions.items()))}, "
        f"by shape {dict(by_shape)}, "
        f"faults {dict(sorted(faults.items()))}, API errors answered {fired}, "
        f"{checks} invariant checks, {broken} runs with violations, "
        f"{unrecorded} {invariants.UNRECORDED} findings, "
        f"{time.monotonic() - started:.0f} s"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
