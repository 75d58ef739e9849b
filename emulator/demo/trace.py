"""Seeded arrivals of high-priority jobs in bursts: the same trace drives both runs."""

from __future__ import annotations

import dataclasses
import random


@dataclasses.dataclass(frozen=True)
class Arrival:
    at: float
    """Seconds after the run starts."""
    name: str
    gpus: int
    steps: int
    """Work to do, in trainer steps; the job completes when done."""


def bursts(
    *,
    seed: int,
    duration: float,
    burst_every: float,
    jobs_per_burst: tuple[int, int] = (1, 2),
    gpus: tuple[int, ...] = (2, 4),
    steps: tuple[int, int] = (20, 40),
) -> list[Arrival]:
    """Bursts roughly every ``burst_every`` seconds (exponential gaps), none in the last 20%.

    The tail is kept free so every priority job can finish and the scavengers resume before
    the run ends — otherwise the comparison would be cut off mid-handover.
    """
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    at = rng.uniform(0.15, 0.3) * burst_every
    burst = 0
    while at < duration * 0.8:
        for index in range(rng.randint(*jobs_per_burst)):
            arrivals.append(
                Arrival(
                    at=round(at + index * 0.5, 3),
                    name=f"priority-{burst}-{index}",
                    gpus=rng.choice(gpus),
                    steps=rng.randint(*steps),
                )
            )
        burst += 1
        at += rng.expovariate(1 / burst_every)
    return arrivals
