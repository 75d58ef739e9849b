"""How the fuzz properties are run: the settings of the bounded runs inside ``make test``
(:func:`derandomized`) and the tally ``make fuzz`` prints (:class:`Stats`), shared by the
admission properties (tests/fuzz/properties.py), the restore program's (tests/fuzz/restore.py)
and the webhook's fast paths (tests/fuzz/test_fast_path.py, tests/fuzz/test_shape_clean.py).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from hypothesis import HealthCheck, settings

RELAXED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
"""Inputs are large JSON documents and real directory trees: slow to draw, by design."""

C = TypeVar("C")


def derandomized(examples: int, *, also: Sequence[HealthCheck] = ()) -> settings:
    """``examples`` inputs, the same ones every run (the suite is repeatable), no deadline, no
    example database; ``also``: further health checks to suppress."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[*RELAXED, *also],
    )


@dataclasses.dataclass
class Stats(Generic[C]):
    """What ``make fuzz`` prints: inputs tried, failures (first few kept), the slowest input."""

    check: Callable[[C], list[str]]
    """What is wrong with one input's outcome (empty: nothing)."""
    inputs: int = 0
    failed: int = 0
    failures: list[tuple[list[str], C]] = dataclasses.field(default_factory=list)
    slowest: float = 0.0
    slowest_case: C | None = None

    def record(self, case: C) -> list[str]:
        started = time.perf_counter()
        problems = self.check(case)
        elapsed = time.perf_counter() - started
        self.inputs += 1
        if elapsed > self.slowest:
            self.slowest, self.slowest_case = elapsed, copy.copy(case)
        if problems:
            self.failed += 1
            if len(self.failures) < 20:
                self.failures.append((problems, case))
        return problems
