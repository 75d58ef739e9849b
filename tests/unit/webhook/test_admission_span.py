"""The admission span (webhook/observing.py ``Observer.span``): made directly when the tracer
samples every span out, the same span the SDK's ``start_as_current_span`` gives; through the
SDK otherwise."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kontinue import telemetry, tracing
from webhook import observing


def test_a_sampled_out_span_is_the_one_the_sdk_would_make() -> None:
    quiet = telemetry.setup("kontinue-test", environ={}, record_unexported=False)
    observer = observing.Observer(tracer=quiet.tracer)
    assert observer.unsampled is not None
    with quiet.tracer.start_as_current_span(tracing.ADMISSION) as sdk_span:
        sdk = sdk_span.get_span_context()
    seen = []
    for _ in range(2):
        with observer.span("/mutate") as span:
            assert trace.get_current_span() is span
            seen.append(span.get_span_context())
            assert not span.is_recording()
        assert not trace.get_current_span().get_span_context().is_valid
    for ours in seen:
        assert ours.is_valid
        assert not ours.is_remote
        assert ours.trace_flags == sdk.trace_flags
        assert ours.trace_state == sdk.trace_state
        assert type(span) is type(sdk_span)
    assert seen[0].trace_id != seen[1].trace_id


def test_a_current_span_is_its_parent_through_the_sdk() -> None:
    quiet = telemetry.setup("kontinue-test", environ={}, record_unexported=False)
    observer = observing.Observer(tracer=quiet.tracer)
    with quiet.tracer.start_as_current_span("outer") as outer, observer.span("/mutate") as span:
        assert span.get_span_context().trace_id == outer.get_span_context().trace_id
        assert span.get_span_context().span_id != outer.get_span_context().span_id


def test_a_recording_tracer_records_the_admission_span() -> None:
    spans = InMemorySpanExporter()
    seen = telemetry.setup(
        "kontinue-test",
        environ={},
        span_processors=[SimpleSpanProcessor(spans)],
        record_unexported=False,
    )
    observer = observing.Observer(tracer=seen.tracer)
    assert observer.unsampled is None
    with observer.span("/validate") as span:
        assert span.is_recording()
    (finished,) = spans.get_finished_spans()
    assert finished.name == tracing.ADMISSION
    assert finished.kind is trace.SpanKind.SERVER
    assert dict(finished.attributes or {}) == {"url.path": "/validate"}


def test_no_tracer_gives_the_invalid_span_as_before() -> None:
    observer = observing.Observer()
    assert observer.unsampled is None
    with observer.span("/mutate") as span:
        assert not span.get_span_context().is_valid
