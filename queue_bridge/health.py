"""``/healthz``, ``/readyz`` for the kubelet's probes and ``/metrics`` for a scraper.

- ``/healthz``: 200 while the process's essential tasks run (the watch caches and the leader
  election loop); 500 names the dead one, so the kubelet restarts a bridge that can no longer
  work instead of leaving a silent replica.
- ``/readyz``: 200 once every cache has synced and the replica is either leading or a warm
  standby; 503 before that and while shutting down. The body says which role it has, so
  ``kubectl exec … wget -qO- :8081/readyz`` tells leader from standby.

- ``/metrics``: the bridge's instruments and the process collectors in the Prometheus text
  format (kontinue/telemetry.py; every name in docs/operations.md). Served on both ports; the
  Deployment's ``metrics`` port (8080) is the one to scrape.

All are cheap, read only memory, and never call the API server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import prometheus_client
from aiohttp import web

from kontinue import telemetry


@dataclasses.dataclass
class Health:
    synced: Callable[[], bool]
    leading: Callable[[], bool]
    dead: Callable[[], list[str]] = lambda: []
    """Names of essential tasks that stopped (empty while healthy)."""
    stopping: bool = False
    registry: prometheus_client.CollectorRegistry | None = None


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

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if health.registry is not None:
        app.router.add_get("/metrics", telemetry.metrics_handler(health.registry))
    return app
