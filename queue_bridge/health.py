"""``/healthz``, ``/readyz`` for the kubelet's probes and ``/metrics`` for a scraper.

- ``/healthz``: 200 while the process's essential tasks run (the watch caches and the leader
  election loop); 500 names the dead one, so the kubelet restarts a bridge that can no longer
  work instead of leaving a silent replica.
- ``/readyz``: 200 once every cache has synced and the replica is either leading or a warm
  standby; 503 before that and while shutting down. The body says which role it has, so
  ``kubectl exec … wget -qO- :8081/readyz`` tells leader from standby.

- ``/metrics``: the OpenTelemetry instruments in the Prometheus text format (names with ``.``
  written as ``_``; counters get ``_total``; histograms ``_bucket``/``_sum``/``_count``), read
  from an in-process ``InMemoryMetricReader`` at each scrape — no exporter dependency. Served on
  both ports; the Deployment's ``metrics`` port (8080) is the one to scrape.

All are cheap, read only memory, and never call the API server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from aiohttp import web
from opentelemetry.sdk.metrics import export as metrics_export


@dataclasses.dataclass
class Health:
    synced: Callable[[], bool]
    leading: Callable[[], bool]
    dead: Callable[[], list[str]] = lambda: []
    """Names of essential tasks that stopped (empty while healthy)."""
    stopping: bool = False
    metrics: metrics_export.InMemoryMetricReader | None = None


def _name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _labels(attributes: Mapping[str, object] | None, extra: dict[str, str] | None = None) -> str:
    pairs = {**{str(k): str(v) for k, v in (attributes or {}).items()}, **(extra or {})}
    if not pairs:
        return ""
    body = ",".join(
        f'{_name(k)}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in sorted(pairs.items())
    )
    return "{" + body + "}"


def render(reader: metrics_export.InMemoryMetricReader) -> str:
    """Every metric the reader holds, in the Prometheus text exposition format (0.0.4)."""
    data = reader.get_metrics_data()
    lines: list[str] = []
    for resource_metrics in data.resource_metrics if data else []:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                base = _name(metric.name)
                points = metric.data
                if isinstance(points, metrics_export.Histogram):
                    lines.append(f"# TYPE {base} histogram")
                    for h in points.data_points:
                        cumulative = 0
                        for bound, count in zip(
                            [*h.explicit_bounds, float("inf")], h.bucket_counts, strict=True
                        ):
                            cumulative += count
                            le = "+Inf" if bound == float("inf") else f"{bound:g}"
                            labels = _labels(h.attributes, {"le": le})
                            lines.append(f"{base}_bucket{labels} {cumulative}")
                        lines.append(f"{base}_sum{_labels(h.attributes)} {h.sum}")
                        lines.append(f"{base}_count{_labels(h.attributes)} {h.count}")
                    continue
                monotonic = isinstance(points, metrics_export.Sum) and points.is_monotonic
                name = base + "_total" if monotonic else base
                lines.append(f"# TYPE {name} {'counter' if monotonic else 'gauge'}")
                for point in points.data_points:
                    value = getattr(point, "value", 0)
                    lines.append(f"{name}{_labels(point.attributes)} {value}")
    return "\n".join(lines) + "\n"


def create_app(health: Health) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        dead = health.dead()
        if dead:
            return web.Response(status=500, text="dead: " + ", ".join(dead) + "\n")
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if health.stopping:
            return web.Response(status=503, text="stopping\n")
        if not health.synced():
            return web.Response(status=503, text="caches not synced\n")
        return web.Response(text="ok: " + ("leader" if health.leading() else "standby") + "\n")

    async def scrape(_: web.Request) -> web.Response:
        if health.metrics is None:
            return web.Response(status=404, text="no metrics reader\n")
        return web.Response(text=render(health.metrics), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", scrape)
    return app
