"""The admission latency histogram aggregated by the webhook (webhook/metrics.py ``Durations``)
is exposed exactly as the OpenTelemetry histogram it replaced on the hot path (issue 14): same
name, HELP, ``le`` values, cumulative counts and sums, and nothing before the first answer."""

from __future__ import annotations

from kontinue import telemetry
from tests import promlint
from webhook import metrics

SECONDS = [0.0, 0.0001, 0.0005, 0.0007, 0.001, 0.001, 0.0049, 2.5, 2.6, 10.0, 0.03]


def _family(text: str) -> list[str]:
    return [line for line in text.splitlines() if metrics.DURATION in line]


def _pair() -> tuple[tuple[telemetry.Telemetry, metrics.Metrics], ...]:
    otel = telemetry.setup("kontinue-webhook", environ={})
    ours = telemetry.setup("kontinue-webhook", environ={})
    return (
        (otel, metrics.Metrics(otel.meter)),
        (ours, metrics.Metrics(ours.meter, registry=ours.registry)),
    )


def test_the_aggregated_histogram_is_exposed_as_the_opentelemetry_one() -> None:
    (otel, by_otel), (ours, by_us) = _pair()
    assert by_otel.duration is not None
    assert by_otel.durations is None
    assert by_us.durations is not None
    assert by_us.duration is None
    assert _family(telemetry.exposition(otel.registry).decode()) == []
    assert _family(telemetry.exposition(ours.registry).decode()) == []
    for i, seconds in enumerate(SECONDS):
        path = "/mutate" if i % 3 else "/validate"
        for each in (by_otel, by_us):
            each.answered(path, allowed=True, decided="plumbed", status=200, seconds=seconds)
    expected = _family(telemetry.exposition(otel.registry).decode())
    got = _family(telemetry.exposition(ours.registry).decode())
    assert len(expected) == 2 + 2 * (len(metrics.SECONDS_BUCKETS) + 1 + 2)  # HELP, TYPE; 2 paths
    assert got == expected
    text = telemetry.exposition(ours.registry).decode()
    assert promlint.problems(text) == []
    bucket = metrics.DURATION + "_bucket"
    assert promlint.value(text, bucket, path="/mutate", le="0.001") == 4  # 0.0001 ... 0.001
    assert promlint.value(text, bucket, path="/validate", le="+Inf") == 4
    assert promlint.value(text, metrics.DURATION + "_count", path="/mutate") == 7
