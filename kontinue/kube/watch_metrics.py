"""The watch caches' OpenTelemetry counters (:mod:`kontinue.kube.watching`)."""

from __future__ import annotations

from opentelemetry import metrics


class Instruments:
    """The watch caches' counters (names in docs/operations.md), each by ``resource``."""

    def __init__(self, meter: metrics.Meter) -> None:
        counter = meter.create_counter
        self.events = counter("kontinue.watch.events", unit="{event}", description=_EVENTS)
        self.relists = counter("kontinue.watch.relists", unit="{list}", description=_RELISTS)
        self.reconnects = counter(
            "kontinue.watch.reconnects", unit="{watch}", description=_RECONNECTS
        )
        self.invalid_objects = counter(
            "kontinue.watch.invalid_objects", unit="{object}", description=_INVALID
        )


_EVENTS = "Changes the cache delivered"
_RELISTS = "Complete lists, by reason"
_RECONNECTS = "Watches restarted after a failure or a closed stream, by reason"
_INVALID = "Objects skipped because they failed validation"
