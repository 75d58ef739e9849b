"""One trace per eviction, across the bridge and the webhook, carried on the Checkpoint.

The bridge starts the trace when it detects an eviction (span ``kontinue.eviction``, starting at
the eviction's own time) and writes the span's W3C ``traceparent`` on the Checkpoint it creates
(annotation ``kontinue.dev/traceparent``, kontinue/keys.py). Everything later about that
Checkpoint joins the trace by reading the annotation back: the set's save and each member's
save (bridge), the webhook's decision to restore a new pod from it (a span in the eviction's
trace, linked to the admission request's own span), and the restored pod's restore init
container (bridge, from the container's start and finish times). Spans about the past are
recorded with the times the cluster reports (``start``/``end`` below), so the trace shows when
things happened, not when the bridge noticed.

The format is the W3C Trace Context one (``00-<trace id>-<span id>-<flags>``), written and read
by OpenTelemetry's own propagator (opentelemetry-api
``opentelemetry/trace/propagation/tracecontext.py``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation import tracecontext
from opentelemetry.util import types

_PROPAGATOR = tracecontext.TraceContextTextMapPropagator()
TRACEPARENT = "traceparent"

# Span names (docs/operations.md, "Traces").
EVICTION = "kontinue.eviction"
CHECKPOINT_CREATE = "kontinue.checkpoint.create"
CHECKPOINT_SAVE = "kontinue.checkpoint.save"
MEMBER_SAVE = "kontinue.member.save"
ADMISSION = "kontinue.admission"
RESTORE_DECISION = "kontinue.restore.decision"
RESTORE = "kontinue.restore"


def traceparent(span: trace.Span) -> str:
    """The span's W3C ``traceparent``; ``""`` for a span that is not recording a trace."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get(TRACEPARENT, "")


def parent(value: str | None) -> otel_context.Context | None:
    """The context a ``traceparent`` names, or ``None`` when absent or malformed."""
    if not value:
        return None
    ctx = _PROPAGATOR.extract({TRACEPARENT: value})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def link_to(value: str | None) -> list[trace.Link]:
    """A link to the span a ``traceparent`` names (empty when there is none)."""
    ctx = parent(value)
    return [trace.Link(trace.get_current_span(ctx).get_span_context())] if ctx else []


def nanos(when: datetime.datetime | None) -> int | None:
    if when is None:
        return None
    aware = when if when.tzinfo else when.replace(tzinfo=datetime.UTC)
    return int(aware.timestamp() * 1e9)


def record(
    tracer: trace.Tracer,
    name: str,
    *,
    cause: otel_context.Context | None,
    start: datetime.datetime | None,
    end: datetime.datetime | None,
    attributes: Mapping[str, types.AttributeValue],
    links: Sequence[trace.Link] = (),
    error: str | None = None,
) -> trace.Span:
    """A span about something that already happened, from ``start`` to ``end`` (``None``:
    now), a child of ``cause`` (``None``: a new trace)."""
    start_ns = nanos(start)
    end_ns = nanos(end)
    if start_ns is not None and end_ns is not None and end_ns < start_ns:
        end_ns = start_ns  # clocks of one-second resolution: never a negative span
    span = tracer.start_span(
        name, context=cause, attributes=attributes, links=links, start_time=start_ns
    )
    if error:
        span.set_status(trace.Status(trace.StatusCode.ERROR, error))
    span.end(end_time=end_ns)
    return span
