"""Logging, traces and metrics for both deployables, set up once at process start.

**Metrics** are OpenTelemetry instruments (each component receives its ``Meter`` explicitly)
read by the SDK's Prometheus exporter (``opentelemetry-exporter-prometheus``) into a
:class:`prometheus_client.CollectorRegistry` of the component's own, beside
``prometheus_client``'s standard ``process_*``, ``python_gc_*`` and ``python_info`` collectors;
:func:`metrics_handler` serves that registry as ``GET /metrics``. The exporter writes Prometheus
names from the instruments: ``.`` becomes ``_``, the unit becomes a suffix (``s`` ->
``_seconds``, ``By`` -> ``_bytes``, annotations such as ``{pod}`` are dropped), counters end in
``_total``, the description is the ``# HELP`` line (opentelemetry-python
``exporter/opentelemetry-exporter-prometheus/src/opentelemetry/exporter/prometheus/__init__.py``).
A registry per component, never the process-global one, so two components in one process (the
tests, the demo) never mix their series. An instrument recorded many times a second can instead
be a :class:`Histogram` counted here and registered on that registry (the same Prometheus series,
without the SDK's per-record cost).

**Traces** use the OpenTelemetry SDK. Export is off unless the standard variables ask for it:
``OTEL_TRACES_EXPORTER=otlp`` (or an ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``) sends spans with
the OTLP/HTTP exporter, which reads its own ``OTEL_EXPORTER_OTLP_*`` settings; batching follows
``OTEL_BSP_*``; ``OTEL_SDK_DISABLED=true`` turns everything off. Tests add their own span
processor (the SDK's in-memory exporter).

**Logs** are one line each. ``KONTINUE_LOG_FORMAT=text`` (default) keeps ``key=value`` after the
message so ``kubectl logs`` stays greppable; ``json`` writes one JSON object per line with the
object being handled (:func:`about`) and the current trace and span ids.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import dataclasses
import datetime
import itertools
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence

import prometheus_client
from aiohttp import web
from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace import export as trace_export
from prometheus_client import exposition as exposition_module
from prometheus_client import metrics_core

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")

_OBJECT: contextvars.ContextVar[tuple[str, str, str] | None] = contextvars.ContextVar(
    "kontinue_object", default=None
)


@dataclasses.dataclass(frozen=True)
class Telemetry:
    tracer: trace.Tracer
    meter: metrics.Meter
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    registry: prometheus_client.CollectorRegistry
    """What ``/metrics`` serves: this component's instruments and the process collectors."""

    def shutdown(self) -> None:
        """Flush spans still batched for export; stop the readers."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


# --- logs -------------------------------------------------------------------------------------


@contextlib.contextmanager
def about(kind: str, namespace: str, name: str) -> Iterator[None]:
    """Log lines written inside the block name this object (JSON fields ``kind``,
    ``namespace``, ``name``); nested blocks name the innermost."""
    token = _OBJECT.set((kind, namespace, name))
    try:
        yield
    finally:
        _OBJECT.reset(token)


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """A block after which the object named inside it (:func:`name`) is forgotten."""
    token = _OBJECT.set(_OBJECT.get())
    try:
        yield
    finally:
        _OBJECT.reset(token)


def name(kind: str, namespace: str, name: str) -> None:
    """Name the object being handled for the rest of the enclosing :func:`scope`."""
    _OBJECT.set((kind, namespace, name))


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, RFC 3339), level, logger, message, the object
    being handled, ``trace_id``/``span_id`` of the current span, and the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        out: dict[str, object] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        current = _OBJECT.get()
        if current is not None:
            out["kind"], out["namespace"], out["name"] = current
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            out["trace_id"] = trace.format_trace_id(span.trace_id)
            out["span_id"] = trace.format_span_id(span.span_id)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str | None = None, log_format: str | None = None) -> None:
    """Configure the root logger once; ``KONTINUE_LOG_LEVEL`` (default INFO) and
    ``KONTINUE_LOG_FORMAT`` (``text`` default, or ``json``) override the defaults."""
    chosen = (log_format or os.environ.get("KONTINUE_LOG_FORMAT") or "text").lower()
    if chosen not in LOG_FORMATS:
        raise ValueError(f"KONTINUE_LOG_FORMAT: {chosen!r} is not one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else logging.Formatter(LOG_FORMAT))
    logging.basicConfig(
        level=(level or os.environ.get("KONTINUE_LOG_LEVEL", "INFO")).upper(),
        handlers=[handler],
    )


# --- traces -----------------------------------------------------------------------------------


def span_exporter_from_env(
    environ: Mapping[str, str] | None = None,
) -> trace_export.SpanExporter | None:
    """The span exporter the standard ``OTEL_*`` variables ask for; ``None`` (off) by default.

    ``OTEL_TRACES_EXPORTER``: ``none`` | ``otlp`` | ``console``; unset means ``otlp`` when an
    OTLP endpoint is set, else ``none``. Only OTLP over HTTP/protobuf is shipped, so
    ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=grpc`` is refused with a message rather than ignored.
    """
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    chosen = env.get("OTEL_TRACES_EXPORTER", "").strip().lower() or ("otlp" if endpoint else "none")
    if chosen == "none":
        return None
    if chosen == "console":
        return trace_export.ConsoleSpanExporter()
    if chosen != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER: {chosen!r} is not one of none, otlp, console")
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol != "http/protobuf":
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not supported (only http/protobuf)"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=_traces_url(env))


def _traces_url(env: Mapping[str, str]) -> str | None:
    """The traces URL from ``env``, not from ``os.environ`` the exporter would read.

    The per-signal variable is used as-is; the generic one is a base URL to which the signal
    path ``v1/traces`` is appended (the OTLP exporter specification, "Endpoint URLs for
    OTLP/HTTP"). ``None`` leaves the exporter's default (``http://localhost:4318/v1/traces``).
    """
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return f"{base.rstrip('/')}/v1/traces" if base else None


# --- metrics ----------------------------------------------------------------------------------


def new_registry() -> prometheus_client.CollectorRegistry:
    """A registry with the standard process, platform and garbage-collector collectors."""
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.ProcessCollector(registry=registry)
    prometheus_client.PlatformCollector(registry=registry)
    prometheus_client.GCCollector(registry=registry)
    return registry


def exposition(registry: prometheus_client.CollectorRegistry) -> bytes:
    """The registry in the Prometheus text format (0.0.4)."""
    return prometheus_client.generate_latest(registry)


def metrics_handler(
    registry: prometheus_client.CollectorRegistry,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``GET /metrics`` for an aiohttp router (text format 0.0.4, which every Prometheus reads;
    the names are all legacy-valid, so 1.0.0's UTF-8 quoting is never needed)."""

    async def scrape(_: web.Request) -> web.Response:
        return web.Response(
            body=exposition(registry),
            headers={"Content-Type": exposition_module.CONTENT_TYPE_PLAIN_0_0_4},
        )

    return scrape


class Histogram:
    """A histogram of one label, counted here and read by Prometheus when it scrapes: the same
    series the SDK's exporter writes for an OpenTelemetry histogram (``<name>_bucket`` with
    ``le`` from ``bounds`` and ``+Inf``, ``_count``, ``_sum``; a value on a bound counts in that
    bound's bucket), at ~0.2 µs per :meth:`observe` instead of ~5 µs in the SDK — for an
    instrument recorded many times per second (the bridge's time per key, the webhook's time
    per admission: docs/benchmarks.md, issue 14). ``name`` is the Prometheus name (unit suffix
    included). Exported once :meth:`register`-ed with a registry; until then it only counts.

    ``written_empty``: the family's HELP and TYPE are written before the first observation (the
    bridge's); otherwise nothing is, as the OpenTelemetry exporter does (the webhook's).
    ``ordered``: the series by label value; otherwise in the order each value was first seen,
    as the OpenTelemetry exporter writes them."""

    def __init__(
        self,
        name: str,
        *,
        description: str,
        label: str,
        bounds: Sequence[float],
        written_empty: bool = True,
        ordered: bool = True,
    ) -> None:
        self.name = name
        self.description = description
        self.label = label
        self.bounds = tuple(sorted(bounds))
        self.written_empty = written_empty
        self.ordered = ordered
        self._les = [repr(float(b)) for b in self.bounds] + ["+Inf"]
        self.counts: dict[str, list[int]] = {}
        """Per label value, observations per bucket: ``counts[v][i]`` those in
        ``(bounds[i-1], bounds[i]]``, the last those above every bound (the SDK's
        ``bisect_left``)."""
        self.sums: dict[str, float] = {}

    def observe(self, key: str, value: float) -> None:
        """Count ``value`` for label value ``key`` (the hot path: a ``bisect``, two additions)."""
        counts = self.counts.get(key)
        if counts is None:
            counts = self.counts[key] = [0] * (len(self.bounds) + 1)
            self.sums[key] = 0.0
        counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sums[key] += value

    def record(self, value: float, attributes: Mapping[str, str]) -> None:
        """As an OpenTelemetry instrument is called: the label's value among ``attributes``."""
        self.observe(attributes[self.label], value)

    def register(self, registry: prometheus_client.CollectorRegistry) -> None:
        registry.register(self)

    def _family(self) -> metrics_core.HistogramMetricFamily:
        return metrics_core.HistogramMetricFamily(self.name, self.description, labels=[self.label])

    def describe(self) -> Iterator[metrics_core.Metric]:
        yield self._family()

    def collect(self) -> Iterator[metrics_core.Metric]:
        if not self.counts and not self.written_empty:
            return
        family = self._family()
        keys = sorted(self.counts) if self.ordered else list(self.counts)
        for key in keys:
            cumulative = list(itertools.accumulate(self.counts[key]))
            family.add_metric(
                [key], list(zip(self._les, map(float, cumulative), strict=True)), self.sums[key]
            )
        yield family


class BoundedLabel:
    """Keeps a label's value set bounded: a value is passed through if it is a CamelCase token
    (``Preempted``, ``PodsReadyTimeout``) and one of the first ``limit`` distinct values seen;
    anything else becomes ``Other``. Upstream reasons are a small fixed set, but they are
    strings we read from objects users can write, and a label must never grow without bound."""

    OTHER = "Other"

    def __init__(self, limit: int = 32, known: tuple[str, ...] = ()) -> None:
        self.limit = limit
        self._seen: set[str] = set(known)

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit or not _camel(value):
            return self.OTHER
        self._seen.add(value)
        return value


def _camel(value: str) -> bool:
    return 0 < len(value) <= 63 and value[0].isupper() and value.isalnum() and value.isascii()


# --- both -------------------------------------------------------------------------------------


def records_spans(tracer: trace.Tracer) -> bool:
    """Whether ``tracer`` may record a span: ``False`` only for the no-op tracer and for one
    whose sampler drops every span (:func:`setup` with ``record_unexported=False`` and no
    exporter); any other tracer may."""
    if isinstance(tracer, trace.NoOpTracer):
        return False
    return getattr(tracer, "sampler", None) is not sampling.ALWAYS_OFF


def setup(
    service: str,
    *,
    span_processors: list[SpanProcessor] | None = None,
    metric_readers: list[MetricReader] | None = None,
    environ: Mapping[str, str] | None = None,
    record_unexported: bool = True,
) -> Telemetry:
    """Providers for one component (``kontinue-webhook``, ``kontinue-bridge``, ...).

    ``record_unexported=False``: when no span goes anywhere (no exporter from the environment,
    no ``span_processors``), spans are sampled out (the SDK's ``ALWAYS_OFF`` sampler). They
    still carry valid trace and span ids, so log lines and ``traceparent`` values keep
    correlating, but nothing is recorded: the webhook's admission span cost ~25 µs of CPU per
    request recording attributes nobody reads (docs/benchmarks.md, issue 14), ~8 µs sampled out.
    """
    env = os.environ if environ is None else environ
    resource = Resource.create({"service.name": service})
    exporter = span_exporter_from_env(env)
    unexported = exporter is None and not span_processors
    tracer_provider = (
        TracerProvider(resource=resource, sampler=sampling.ALWAYS_OFF)
        if unexported and not record_unexported
        else TracerProvider(resource=resource)
    )
    for processor in span_processors or []:
        tracer_provider.add_span_processor(processor)
    if exporter is not None:
        tracer_provider.add_span_processor(trace_export.BatchSpanProcessor(exporter))
    registry = new_registry()
    prometheus = PrometheusMetricReader(registry=registry, scope_info_enabled=False)
    meter_provider = MeterProvider(
        resource=resource, metric_readers=[prometheus, *(metric_readers or [])]
    )
    return Telemetry(
        tracer=tracer_provider.get_tracer(service),
        meter=meter_provider.get_meter(service),
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        registry=registry,
    )
