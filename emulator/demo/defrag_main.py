"""The defrag scenario's command line half: run the three modes, print the table and what
``kubectl kontinue defrag`` printed (``python -m emulator.demo --scenario defrag``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from emulator.demo import defrag


async def main(*, out: Path, options: defrag.Options | None = None) -> int:
    options = options or defrag.Options()
    results = []
    for mode in defrag.MODES:
        workdir = out / mode
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        results.append(
            await defrag.run(
                mode=mode,
                options=options,
                workdir=workdir,
                say=lambda line: print(line, file=sys.stderr, flush=True),
            )
        )
    print()
    print(defrag.table(results))
    for result in results:
        if result.cli_output:
            print(f"\n$ kubectl kontinue defrag --for job/{defrag.URGENT} --wait")
            print(result.cli_output.rstrip())
    return 0
