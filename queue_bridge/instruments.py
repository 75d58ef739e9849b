"""The bridge's OpenTelemetry instruments (names and meaning in docs/operations.md)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable

from opentelemetry import metrics

from kontinue.models import checkpoint
from queue_bridge import caches as caches_module
from queue_bridge import kinds, queueing

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Histogram bounds for sub-second work (OpenTelemetry's default starts at 0, 5, 10 s)."""


class Metrics:
    """The bridge's OpenTelemetry instruments (names in docs/operations.md)."""

    def __init__(
        self,
        meter: metrics.Meter,
        caches: caches_module.Caches,
        queue: queueing.WorkQueue[kinds.Key],
        leading: Callable[[], bool],
    ) -> None:
        def by_phase(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            counts = collections.Counter(cp.status.phase.value for cp in caches.checkpoints.items())
            for phase in checkpoint.Phase:
                yield metrics.Observation(counts.get(phase.value, 0), {"phase": phase.value})

        def depth(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            yield metrics.Observation(len(queue))

        meter.create_observable_gauge(
            "kontinue.bridge.checkpoints",
            callbacks=[by_phase],
            unit="{checkpoint}",
            description="Checkpoints in the cluster, by phase",
        )

        def leader(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            yield metrics.Observation(1 if leading() else 0)

        meter.create_observable_gauge(
            "kontinue.bridge.leader",
            callbacks=[leader],
            unit="1",
            description="1 while this replica holds the Lease and works, else 0",
        )
        meter.create_observable_gauge(
            "kontinue.bridge.queue.depth",
            callbacks=[depth],
            unit="{key}",
            description="Keys waiting in the work queue",
        )
        self.transitions = meter.create_counter(
            "kontinue.bridge.checkpoint.transitions",
            unit="{checkpoint}",
            description="Checkpoints created (phase Pending) or moved to a phase",
        )
        self.reaction = meter.create_histogram(
            "kontinue.bridge.reaction_latency",
            unit="s",
            description="From the eviction's condition time (1 s resolution) to its Checkpoint",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.errors = meter.create_counter(
            "kontinue.bridge.reconcile.errors",
            unit="{error}",
            description="Reconciles that failed (retried with backoff), by kind",
        )
        self.reconciles = meter.create_histogram(
            "kontinue.bridge.reconcile.duration",
            unit="s",
            description="Time spent handling one key, by kind",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.finalizers = meter.create_counter(
            "kontinue.bridge.finalizers.released",
            unit="{pod}",
            description="Pod finalizers removed, by why",
        )
