"""kontinue/telemetry.py: the Prometheus exposition, the OTEL_* trace exporter choice, JSON logs."""

from __future__ import annotations

import io
import json
import logging

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kontinue import telemetry
from tests import promlint


def test_instruments_are_exposed_with_prometheus_names_help_and_process_metrics() -> None:
    tel = telemetry.setup("kontinue-test", environ={})
    tel.meter.create_counter(
        "kontinue.test.evictions", unit="{eviction}", description="Evictions seen"
    ).add(2, {"source": "Kueue"})
    tel.meter.create_histogram(
        "kontinue.test.save.duration",
        unit="s",
        description="Save time",
        explicit_bucket_boundaries_advisory=(0.1, 1.0),
    ).record(0.5)
    tel.meter.create_histogram("kontinue.test.save.size", unit="By", description="Bytes").record(
        4096
    )
    text = telemetry.exposition(tel.registry).decode()
    assert promlint.problems(text) == []
    found = promlint.families(text)
    assert found["kontinue_test_evictions_total"].type == "counter"
    assert found["kontinue_test_evictions_total"].help == "Evictions seen"
    assert promlint.value(text, "kontinue_test_evictions_total", source="Kueue") == 2
    assert found["kontinue_test_save_duration_seconds"].type == "histogram"
    assert promlint.value(text, "kontinue_test_save_duration_seconds_bucket", le="0.1") == 0
    assert promlint.value(text, "kontinue_test_save_duration_seconds_bucket", le="1.0") == 1
    assert promlint.value(text, "kontinue_test_save_size_bytes_sum") == 4096
    for process in ("process_cpu_seconds_total", "process_resident_memory_bytes"):
        assert process in found, process
    assert promlint.value(text, "target_info", service_name="kontinue-test") == 1


def test_a_histogram_counted_here_exposes_what_the_sdk_histogram_exposes() -> None:
    """kontinue.telemetry.Histogram against an OpenTelemetry histogram fed the same values:
    the same Prometheus lines (bounds, a value on a bound, above the last, two label values)."""
    bounds = (0.005, 0.01, 0.5, 2.0)
    values = [
        (0.0, "Pod"),
        (0.005, "Pod"),
        (0.0051, "Pod"),
        (0.01, "Workload"),
        (0.3, "Pod"),
        (2.0, "Workload"),
        (7.5, "Pod"),
        (0.001, "Checkpoint"),
    ]
    sdk = telemetry.setup("kontinue-sdk", environ={})
    reference = sdk.meter.create_histogram(
        "kontinue.test.reconcile.duration",
        unit="s",
        description="Time per key",
        explicit_bucket_boundaries_advisory=bounds,
    )
    ours = telemetry.setup("kontinue-ours", environ={})
    counted = telemetry.Histogram(
        "kontinue_test_reconcile_duration_seconds",
        description="Time per key",
        label="kind",
        bounds=bounds,
    )
    counted.register(ours.registry)
    for value, kind in values:
        reference.record(value, {"kind": kind})
        counted.record(value, {"kind": kind})

    def lines(text: str) -> list[str]:
        return sorted(line for line in text.splitlines() if "reconcile_duration" in line)

    ours_text = telemetry.exposition(ours.registry).decode()
    assert promlint.problems(ours_text) == []
    assert lines(ours_text) == lines(telemetry.exposition(sdk.registry).decode())
    assert (
        promlint.value(
            ours_text, "kontinue_test_reconcile_duration_seconds_bucket", kind="Pod", le="0.005"
        )
        == 2
    )


def test_two_components_in_one_process_keep_their_series_apart() -> None:
    one = telemetry.setup("one", environ={})
    two = telemetry.setup("two", environ={})
    one.meter.create_counter("kontinue.one.things", description="x").add(1)
    assert "kontinue_one_things_total" in telemetry.exposition(one.registry).decode()
    assert "kontinue_one_things" not in telemetry.exposition(two.registry).decode()


def test_the_lint_finds_what_prometheus_naming_forbids() -> None:
    bad = "\n".join(
        [
            "# TYPE kontinue_bridge_reaction_latency histogram",
            'kontinue_bridge_reaction_latency_bucket{le="+Inf"} 1',
            "kontinue_bridge_reaction_latency_sum 1",
            "kontinue_bridge_reaction_latency_count 1",
            "# HELP kontinue_requests counted",
            "# TYPE kontinue_requests counter",
            'kontinue_requests_total{reason="result recorded"} 1',
            "# HELP kontinue_wait_ms waited",
            "# TYPE kontinue_wait_ms gauge",
            "kontinue_wait_ms 3",
            "",
        ]
    )
    found = promlint.problems(bad)
    assert "kontinue_bridge_reaction_latency: no HELP" in found
    assert "kontinue_bridge_reaction_latency: a duration not in _seconds" in found
    assert 'kontinue_requests: counter without "_total" suffix' in found
    assert "kontinue_wait_ms: abbreviated unit 'ms'" in found
    assert any("is not a short token" in p for p in found)


def test_trace_export_is_off_unless_the_otel_variables_ask() -> None:
    assert telemetry.span_exporter_from_env({}) is None
    assert telemetry.span_exporter_from_env({"OTEL_TRACES_EXPORTER": "none"}) is None
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert isinstance(telemetry.span_exporter_from_env(endpoint), OTLPSpanExporter)
    chosen = {"OTEL_TRACES_EXPORTER": "otlp"}
    assert isinstance(telemetry.span_exporter_from_env(chosen), OTLPSpanExporter)
    assert telemetry.span_exporter_from_env({**chosen, "OTEL_SDK_DISABLED": "true"}) is None
    with pytest.raises(ValueError, match="grpc"):
        telemetry.span_exporter_from_env({**chosen, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(ValueError, match="OTEL_TRACES_EXPORTER"):
        telemetry.span_exporter_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})


def test_the_trace_endpoint_comes_from_the_mapping_given_not_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://process-env:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://process-env:4318/v1/traces")

    def url(environ: dict[str, str]) -> str:
        exporter = telemetry.span_exporter_from_env(environ)
        assert isinstance(exporter, OTLPSpanExporter)
        return str(exporter._endpoint)  # the URL the exporter posts to

    assert url({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}) == (
        "http://collector:4318/v1/traces"
    )
    per_signal = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:9999/custom",
    }
    assert url(per_signal) == "http://traces:9999/custom"


def test_json_logs_name_the_object_and_the_trace() -> None:
    spans = InMemorySpanExporter()
    tel = telemetry.setup("kontinue-test", span_processors=[SimpleSpanProcessor(spans)], environ={})
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(telemetry.JsonFormatter())
    log = logging.getLogger("kontinue.test.json")
    log.addHandler(handler)
    log.propagate = False
    try:
        with tel.tracer.start_as_current_span("work") as span, telemetry.about("Pod", "ns", "p-0"):
            log.warning("checkpoint created members=%d", 2)
        log.warning("outside")
    finally:
        log.removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["message"] == "checkpoint created members=2"
    assert inside["level"] == "WARNING"
    assert (inside["kind"], inside["namespace"], inside["name"]) == ("Pod", "ns", "p-0")
    assert inside["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert "trace_id" not in outside
    assert "namespace" not in outside


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="KONTINUE_LOG_FORMAT"):
        telemetry.setup_logging(log_format="xml")


def test_unexported_spans_are_sampled_out_but_keep_ids_when_asked() -> None:
    """``record_unexported=False`` (the webhook): with no exporter and no processor, spans
    record nothing yet still carry trace ids for log lines; any processor turns recording on."""
    quiet = telemetry.setup("kontinue-test", environ={}, record_unexported=False)
    with quiet.tracer.start_as_current_span("kontinue.admission") as span:
        assert not span.is_recording()
        assert span.get_span_context().is_valid
    default = telemetry.setup("kontinue-test", environ={})
    with default.tracer.start_as_current_span("kontinue.admission") as span:
        assert span.is_recording()
    spans = InMemorySpanExporter()
    seen = telemetry.setup(
        "kontinue-test",
        environ={},
        span_processors=[SimpleSpanProcessor(spans)],
        record_unexported=False,
    )
    with seen.tracer.start_as_current_span("kontinue.admission") as span:
        assert span.is_recording()
    assert [s.name for s in spans.get_finished_spans()] == ["kontinue.admission"]
