"""Wiring: watch caches + work queue + leader election + health server, for one replica.

Order, and why:

1. start every watch cache (leader or not: a standby with warm caches takes over without a
   relist, and ``/readyz`` only turns 200 once they synced);
2. serve ``/healthz`` and ``/readyz``;
3. campaign for the Lease; while holding it, :meth:`Controller.lead` sweeps every key and runs
   the workers. Losing the Lease (renewal failed past its deadline) ends :func:`run` with
   :data:`LOST`: the process exits and Kubernetes restarts it, which also drops anything a stale
   leader held in memory;
4. on ``stop`` (SIGTERM): ``/readyz`` turns 503, the workers are cancelled and the Lease is
   released, so the standby takes over within one retry period rather than a lease duration.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client as k8s_client
from opentelemetry import metrics
from opentelemetry.sdk.metrics import export as metrics_export

from kontinue import telemetry
from kontinue.kube import api as kube_api
from kontinue.kube import client
from queue_bridge import controller as controller_module
from queue_bridge import health, leader
from queue_bridge import settings as settings_module

log = logging.getLogger("kontinue.bridge")

STOPPED = 0
LOST = 1
FIELD_MANAGER = "kontinue-bridge"


async def run(
    config: settings_module.Settings,
    *,
    stop: asyncio.Event,
    api_client: k8s_client.ApiClient | None = None,  # None: in-cluster or kubeconfig
    meter: metrics.Meter | None = None,  # None: a meter whose reader /metrics serves
    sock: socket.socket | None = None,  # None: listen on config.health_host:health_port
    started: asyncio.Future[Controller] | None = None,  # tests: the controller, once built
    **cache_options: Any,  # test hooks for the watch caches
) -> int:
    """One replica until ``stop`` (:data:`STOPPED`) or until its Lease is gone (:data:`LOST`)."""
    owned = api_client is None
    if api_client is None:
        api_client = await client.make_api_client()
    kube = kube_api.Api(api_client, field_manager=FIELD_MANAGER)
    reader: metrics_export.InMemoryMetricReader | None = None
    if meter is None:
        reader = metrics_export.InMemoryMetricReader()
        meter = telemetry.setup("kontinue-bridge", metric_readers=[reader]).meter
    ctrl = controller_module.Controller(kube, config=config, meter=meter, **cache_options)
    elector = leader.LeaderElector(
        kube,
        namespace=config.namespace,
        name=config.lease_name,
        identity=config.identity,
        duration_seconds=config.lease_duration_seconds,
        renew_seconds=config.lease_renew_seconds,
        deadline_seconds=config.lease_deadline_seconds,
    )
    election: asyncio.Task[None] | None = None

    def dead() -> list[str]:
        return ["leader-election"] if election is not None and election.done() else []

    state = health.Health(
        synced=lambda: ctrl.caches.synced, leading=lambda: ctrl.leading, dead=dead, metrics=reader
    )
    runner = web.AppRunner(health.create_app(state), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site: web.BaseSite
        if sock is None:
            site = web.TCPSite(runner, config.health_host, config.health_port)
            if config.metrics_port:
                await web.TCPSite(runner, config.health_host, config.metrics_port).start()
        else:
            site = web.SockSite(runner, sock)
        await site.start()
        async with ctrl.caches.running():
            if started is not None:
                started.set_result(ctrl)
            election = asyncio.create_task(elector.run(ctrl.lead), name="leader-election")
            stopped = asyncio.create_task(stop.wait(), name="stop")
            try:
                done, _ = await asyncio.wait(
                    [election, stopped], return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                state.stopping = True
                for task in (election, stopped):
                    task.cancel()
                results = await asyncio.gather(election, stopped, return_exceptions=True)
            if election in done:
                log.error(
                    "%s lost leadership: exiting so a fresh process campaigns", config.identity
                )
                if isinstance(results[0], Exception):
                    log.error("leader work failed: %r", results[0])
                return LOST
            log.info("%s stopped", config.identity)
            return STOPPED
    finally:
        await runner.cleanup()
        if owned:
            await api_client.close()


Controller = controller_module.Controller
