"""The bounded fuzz run inside ``make test`` (``make fuzz`` runs the same properties at least
100,000 times: ``python -m tests.fuzz``). Derandomized here, so the suite is repeatable; the
full run draws fresh inputs each time and prints its seed.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz import inputs, properties

EXAMPLES = 3000
"""About a minute on the project's 2-core machine (docs/security.md)."""

RELAXED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


@pytest.mark.parametrize("seed_index", range(len(inputs.SEEDS)))
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
@pytest.mark.parametrize("state_index", range(len(inputs.STATES)))
def test_every_seed_unchanged_keeps_the_properties(
    seed_index: int, path: str, state_index: int
) -> None:
    body = json.dumps(inputs.SEEDS[seed_index]).encode()
    case = inputs.Case(body, path, state_index, seed_index, 0)
    problems = properties.check(case)
    assert problems == [], f"{problems}\n{case.describe()}"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=RELAXED,
)
@given(inputs.cases())
def test_bent_reviews_keep_the_properties(case: inputs.Case) -> None:
    problems = properties.check(case)
    assert problems == [], f"{problems}\n{case.describe()}"
