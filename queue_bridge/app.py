"""Wiring: watch caches + work queue + leader election + health server, for one replica.

Order, and why:

1. start every watch cache (leader or not: a standby with warm caches takes over without a
   relist, and ``/readyz`` only turns 200 once they synced);
2. serve ``/healthz`` and ``/readyz``;
3. campaign for the Lease once every cache has synced (a replica whose watches never sync, e.g.
   for a CRD that is not installed or a missing grant, never takes it; a leader whose caches
   stay unsynced past the renew deadline gives it up); while holding it,
   :meth:`Controller.lead` sweeps every key and runs the workers. Losing the Lease (renewal
   failed past its deadline) ends :func:`run` with
   :data:`LOST`: the process exits and Kubernetes restarts it, which also drops anything a stale
   leader held in memory;
4. on ``stop`` (SIGTERM): ``/readyz`` turns 503, the workers are cancelled and the Lease is
   released, so the standby takes over within one retry period rather than a lease duration.

The watch caches and the election are root tasks of one :class:`kontinue.supervision.Supervisor`:
one that ends on its own is logged once and ends :func:`run` (:data:`LOST` for the election,
:data:`FAILED` for any other), and ``/healthz`` names it until the process is gone.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from aiohttp import web

from kontinue import supervision, telemetry
from kontinue.kube import api as kube_api
from kontinue.kube import cacheset, client
from queue_bridge import controller as controller_module
from queue_bridge import health, leader
from queue_bridge import settings as settings_module

log = logging.getLogger("kontinue.bridge")

STOPPED = 0
LOST = 1
FAILED = 2
"""A root task other than the election (a watch cache) ended: :mod:`kontinue.supervision`."""
ELECTION = "leader-election"
FIELD_MANAGER = "kontinue-bridge"


async def run(
    config: settings_module.Settings,
    *,
    stop: asyncio.Event,
    api_client: client.ApiClient | None = None,  # None: in-cluster or kubeconfig
    tel: telemetry.Telemetry | None = None,  # None: set up here (OTEL_* env); /metrics serves it
    sock: socket.socket | None = None,  # None: listen on config.health_host:health_port
    started: asyncio.Future[Controller] | None = None,  # tests: the controller, once built
    cache_options: cacheset.CacheOptions | None = None,  # tests: shorter backoff
) -> int:
    """One replica until ``stop`` (:data:`STOPPED`), until its Lease is gone (:data:`LOST`), or
    until another root task ends (:data:`FAILED`)."""
    owned = api_client is None
    if api_client is None:
        api_client = await client.make_api_client()
    kube = kube_api.Api(api_client, field_manager=FIELD_MANAGER)
    owned_telemetry = tel is None
    if tel is None:
        tel = telemetry.setup("kontinue-bridge")
    ctrl = controller_module.Controller(
        kube,
        config=config,
        meter=tel.meter,
        tracer=tel.tracer,
        cache_options=cache_options,
        registry=tel.registry,
    )
    elector = leader.LeaderElector(
        kube,
        namespace=config.namespace,
        name=config.lease_name,
        identity=config.identity,
        duration_seconds=config.lease_duration_seconds,
        renew_seconds=config.lease_renew_seconds,
        deadline_seconds=config.lease_deadline_seconds,
        ready=lambda: ctrl.caches.synced,  # campaign only once every cache synced
    )
    supervisor = supervision.Supervisor()
    state = health.Health(
        synced=lambda: ctrl.caches.synced,
        leading=lambda: ctrl.leading,
        dead=lambda: list(supervisor.failed),
        registry=tel.registry,
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
        async with ctrl.caches.running(supervisor):
            if started is not None:
                started.set_result(ctrl)
            supervisor.spawn(elector.run(ctrl.lead), name=ELECTION)
            try:
                failed = await supervisor.wait(stop)
            finally:
                state.stopping = True
                await supervisor.close()  # the workers stop, the Lease is released
            if failed == ELECTION:
                log.error(
                    "%s lost leadership: exiting so a fresh process campaigns", config.identity
                )
                return LOST
            if failed is not None:
                return FAILED
            log.info("%s stopped", config.identity)
            return STOPPED
    finally:
        await runner.cleanup()
        if owned:
            await api_client.close()
        if owned_telemetry:
            tel.shutdown()


Controller = controller_module.Controller
