"""Logging, traces and metrics for both deployables, set up once at process start.

Logs are one line each, ``key=value`` after the message, so ``kubectl logs`` stays greppable.
Traces and metrics use the OpenTelemetry SDK; without an exporter configured they stay in
process (tests read them with in-memory readers), so telemetry never needs a collector to run.
Components receive their tracer/meter explicitly rather than through the global provider.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclasses.dataclass(frozen=True)
class Telemetry:
    tracer: trace.Tracer
    meter: metrics.Meter
    tracer_provider: TracerProvider
    meter_provider: MeterProvider


def setup_logging(level: str | None = None) -> None:
    """Configure the root logger once; ``KONTINUE_LOG_LEVEL`` overrides the default INFO."""
    logging.basicConfig(
        level=(level or os.environ.get("KONTINUE_LOG_LEVEL", "INFO")).upper(),
        format=LOG_FORMAT,
        stream=sys.stderr,
    )


def setup(
    service: str,
    *,
    span_processors: list[SpanProcessor] | None = None,
    metric_readers: list[MetricReader] | None = None,
) -> Telemetry:
    """Providers for one component (``kontinue-webhook``, ``kontinue-bridge``, ...)."""
    resource = Resource.create({"service.name": service})
    tracer_provider = TracerProvider(resource=resource)
    for processor in span_processors or []:
        tracer_provider.add_span_processor(processor)
    meter_provider = MeterProvider(resource=resource, metric_readers=metric_readers or [])
    return Telemetry(
        tracer=tracer_provider.get_tracer(service),
        meter=meter_provider.get_meter(service),
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
