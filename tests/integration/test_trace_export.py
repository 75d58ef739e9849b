"""Issue 12, traces: "Export with OTLP, configured by the standard ``OTEL_*`` environment
variables, off by default" — end to end, through kontinue/telemetry.py as both deployables call
it (``telemetry.setup(<service>)`` reads the process environment).

The collector is a local HTTP server standing in for the OpenTelemetry Collector's OTLP/HTTP
receiver (``POST /v1/traces``, ``application/x-protobuf`` ``ExportTraceServiceRequest``,
open-telemetry/opentelemetry-proto ``opentelemetry/proto/collector/trace/v1/trace_service.proto``);
the spans reach it over real HTTP through the shipped exporter
(opentelemetry-exporter-otlp-proto-http) and are decoded with the protocol's own messages.
That no variable at all means no exporter is tests/unit/kontinue/test_telemetry.py's
``test_trace_export_is_off_unless_the_otel_variables_ask``.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from kontinue import telemetry, tracing

Received = list[tuple[str, dict[str, str], bytes]]
OTEL = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
)


@pytest.fixture
async def collector(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[str, Received]]:
    """``(base URL, requests received)`` of a local OTLP/HTTP receiver; the process's ``OTEL_*``
    variables cleared for the test."""
    for name in OTEL:
        monkeypatch.delenv(name, raising=False)
    received: Received = []

    async def traces(request: web.Request) -> web.Response:
        received.append((request.path, dict(request.headers), await request.read()))
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, sock)
    await site.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", received
    finally:
        await runner.cleanup()


async def _one_eviction_span(tel: telemetry.Telemetry) -> None:
    with tel.tracer.start_as_current_span(
        tracing.EVICTION, attributes={"kontinue.checkpoint": "train-a-1"}
    ):
        pass
    # the exporter posts from the BatchSpanProcessor's thread; the receiver runs on this loop
    assert await asyncio.to_thread(tel.tracer_provider.force_flush, 30_000)
    await asyncio.to_thread(tel.tracer_provider.shutdown)


async def test_spans_leave_over_otlp_http_when_the_otel_variables_say_where(
    collector: tuple[str, Received], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, received = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=platform")
    await _one_eviction_span(telemetry.setup("kontinue-bridge"))

    ((path, headers, body),) = received
    assert path == "/v1/traces"
    assert headers["Content-Type"] == "application/x-protobuf"
    assert headers["x-tenant"] == "platform"
    export = ExportTraceServiceRequest.FromString(body)
    (resource_spans,) = export.resource_spans
    resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert resource["service.name"] == "kontinue-bridge"
    spans = [span for scope in resource_spans.scope_spans for span in scope.spans]
    assert [span.name for span in spans] == [tracing.EVICTION]
    attributes = {a.key: a.value.string_value for a in spans[0].attributes}
    assert attributes["kontinue.checkpoint"] == "train-a-1"


@pytest.mark.parametrize(
    "off", [{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}], ids=str
)
async def test_the_standard_variables_turn_export_off(
    collector: tuple[str, Received], monkeypatch: pytest.MonkeyPatch, off: dict[str, str]
) -> None:
    url, received = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    for name, value in off.items():
        monkeypatch.setenv(name, value)
    await _one_eviction_span(telemetry.setup("kontinue-bridge"))
    assert received == []
