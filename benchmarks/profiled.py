"""Run a module as ``__main__`` under cProfile (CPU time), writing the stats when it exits.

``python -m benchmarks.profiled OUT.prof queue_bridge`` is ``python -m queue_bridge`` with a
profile of its CPU (``time.process_time``: time the process waits for the CPU on a shared
machine is not charged to the call it waits in). Read with ``python -m pstats OUT.prof``.
Used by ``bench_bridge --profile``; not a benchmark itself (``make bench`` runs ``bench_*``).
"""

from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main() -> None:
    out, module = sys.argv[1], sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()
