"""Run a module as ``__main__`` under cProfile (CPU time), writing the stats when it exits.

``python -m benchmarks.profiled OUT.prof queue_bridge`` is ``python -m queue_bridge`` with a
profile of its CPU (``time.process_time``: time the process waits for the CPU on a shared
machine is not charged to the call it waits in). Read with ``python -m pstats OUT.prof``.
Used by ``bench_bridge --profile``; not a benchmark itself (``make bench`` runs ``bench_*``).

``SIGUSR1`` starts the profile afresh (what came before is discarded), so a benchmark can
profile one phase (``bench_bridge --profile-from evictions``). The CPU time the garbage
collector took (``gc.callbacks``) is written beside the stats, to ``OUT.prof.gc``, for the same
span: cProfile charges a collection to whichever call happened to allocate when it ran.
"""

from __future__ import annotations

import cProfile
import gc
import pathlib
import runpy
import signal
import sys
import time
from typing import Any


def main() -> None:
    out, module = sys.argv[1], sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    profiler = cProfile.Profile(time.process_time)
    gc_seconds = [0.0, 0.0]  # total, start of the current collection
    collections = [0]
    by_generation = [[0, 0.0] for _ in range(3)]  # collections, seconds

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_seconds[1] = time.process_time()
        else:
            spent = time.process_time() - gc_seconds[1]
            gc_seconds[0] += spent
            collections[0] += 1
            by_generation[info["generation"]][0] += 1
            by_generation[info["generation"]][1] += spent

    def restart(signum: int, frame: object) -> None:
        profiler.disable()
        profiler.clear()
        gc_seconds[0] = 0.0
        collections[0] = 0
        for one in by_generation:
            one[:] = [0, 0.0]
        profiler.enable()

    gc.callbacks.append(on_gc)
    signal.signal(signal.SIGUSR1, restart)
    profiler.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        profiler.disable()
        profiler.dump_stats(out)
        pathlib.Path(out + ".gc").write_text(
            f"gc: {collections[0]} collections, {gc_seconds[0]:.3f} s of CPU"
            + "".join(
                f"; generation {g}: {n} collections, {t:.3f} s"
                for g, (n, t) in enumerate(by_generation)
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
