"""``/metrics`` rendering and the sooner-wins ``add_after`` the bridge's deadlines rely on."""

from __future__ import annotations

import asyncio

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics import export as metrics_export

from queue_bridge import health, queueing


def test_render_writes_prometheus_text() -> None:
    reader = metrics_export.InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    counter = meter.create_counter("kontinue.bridge.finalizers.released")
    counter.add(2, {"reason": 'result "recorded"'})
    histogram = meter.create_histogram(
        "kontinue.bridge.reaction_latency", explicit_bucket_boundaries_advisory=(0.1, 0.5, 1.0)
    )
    histogram.record(0.3, {"source": "Kueue"})
    gauge = meter.create_up_down_counter("kontinue.queue.depth")
    gauge.add(3)
    text = health.render(reader)
    assert "# TYPE kontinue_bridge_finalizers_released_total counter" in text
    assert 'kontinue_bridge_finalizers_released_total{reason="result \\"recorded\\""} 2' in text
    assert "# TYPE kontinue_bridge_reaction_latency histogram" in text
    assert 'kontinue_bridge_reaction_latency_bucket{le="0.1",source="Kueue"} 0' in text
    assert 'kontinue_bridge_reaction_latency_bucket{le="0.5",source="Kueue"} 1' in text
    assert 'kontinue_bridge_reaction_latency_bucket{le="+Inf",source="Kueue"} 1' in text
    assert 'kontinue_bridge_reaction_latency_count{source="Kueue"} 1' in text
    assert "# TYPE kontinue_queue_depth gauge" in text
    assert "kontinue_queue_depth 3" in text


async def test_a_sooner_add_after_replaces_a_later_one() -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    seen: list[str] = []

    async def handler(key: str) -> None:
        seen.append(key)

    queue.add_after("cp", 3600)  # a far deadline ...
    queue.add_after("cp", 0.01)  # ... must not postpone a retry
    queue.add_after("cp", 3600)  # and a later one does not replace the sooner
    worker = asyncio.create_task(queue.run(handler, workers=1))
    try:
        async with asyncio.timeout(5):
            await queue.join()
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert seen == ["cp"]
