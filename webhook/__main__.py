"""``kontinue-webhook``: run the admission webhook until SIGTERM.

Order matters for a webhook that must never answer from a half-filled cache:

1. start the watch caches; 2. obtain the certificate (Secret or mounted files) and, in ``self``
   mode, publish its caBundle; 3. start listening (``AppRunner`` + ``TCPSite`` with the one
   :class:`ssl.SSLContext` that rotations update in place); /readyz turns 200 once every cache
   has synced;
4. on SIGTERM: /readyz turns 503, keep serving ``drain_seconds`` while endpoints are updated,
   then ``runner.cleanup()`` stops accepting and waits for requests in flight.

Root tasks are named (``watch:<resource>``, ``certificates``) and supervised
(:mod:`kontinue.supervision`): if one ends, it is logged once and the process exits 1 rather than
serve stale state.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import pathlib
import socket
import sys

from kontinue import supervision, telemetry, usage
from kontinue.kube import api as kube_api
from kontinue.kube import cacheset, client
from webhook import app as app_module
from webhook import caches, events, freshness, rotation, settings, tls

logger = logging.getLogger("kontinue.webhook")


async def serve(
    config: settings.Settings,
    *,
    stop: asyncio.Event,
    api_client: client.ApiClient | None = None,  # None: in-cluster or kubeconfig
    sock: socket.socket | None = None,  # None: listen on config.host:config.port
    cache_options: cacheset.CacheOptions | None = None,  # tests: shorter backoff
    tel: telemetry.Telemetry | None = None,  # None: set up here from the OTEL_* environment
) -> int:
    """Serve until ``stop`` is set (0: SIGTERM in production, directly in tests) or a root task
    ends (1)."""
    owned_telemetry = tel is None
    if tel is None:
        tel = telemetry.setup("kontinue-webhook", record_unexported=False)
    owned = api_client is None
    if api_client is None:
        api_client = await client.make_api_client()
    api = kube_api.Api(api_client, field_manager="kontinue-webhook")
    cluster = caches.Caches(
        api, queue_systems=config.queue_systems, meter=tel.meter, options=cache_options
    )
    serving = tls.ServingCertificate()
    sink = events.EventSink(api, instance=socket.gethostname())
    telling = asyncio.create_task(sink.run(), name="events")
    readiness = app_module.Readiness(
        {"caches": lambda: cluster.synced, "certificate": lambda: serving.loaded}
    )
    application = app_module.create_app(
        config,
        state=cluster,
        readiness=readiness,
        meter=tel.meter,
        registry=tel.registry,
        expiry=lambda: serving.not_after,
        tracer=tel.tracer,
        events=sink,
        fresh=(
            freshness.Reader(
                api,
                seconds=config.live_read_seconds,
                pods=config.unrecorded_wait_seconds > 0,
                meter=tel.meter,
            )
            if config.live_read_seconds > 0
            else None
        ),
    )
    runner = app_module.runner(application)
    await runner.setup()
    supervisor = supervision.Supervisor()
    try:
        async with cluster.running(supervisor):
            if config.cert_mode is settings.CertMode.SELF:
                await rotation.sync_once(api, serving, config)
                keeper = rotation.keep_current(
                    api, serving, config, interval=config.cert_poll_seconds
                )
            else:
                cert_dir = pathlib.Path(config.cert_dir)
                await tls.load_files(serving, cert_dir)
                keeper = tls.watch_files(serving, cert_dir, interval=config.cert_poll_seconds)
            # Connection count, header/body deadlines and the byte budget: webhook/limits.py
            site = app_module.site(
                runner, ssl_context=serving.context, host=config.host, port=config.port, sock=sock
            )
            await site.start()
            logger.info("serving %s", site.name)
            # Everything allocated so far (modules, caches' first lists) lives for the whole
            # process: move it out of the collector's reach, so a full collection during an
            # admission request walks only what requests allocate (p99 latency, docs/webhook.md).
            gc.collect()
            gc.freeze()
            supervisor.spawn(keeper, name="certificates")
            try:
                if await supervisor.wait(stop) is not None:
                    return 1
                readiness.draining = True
                logger.info("draining for %ss", config.drain_seconds)
                await asyncio.sleep(config.drain_seconds)
                return 0
            finally:
                await supervisor.close()
    finally:
        await runner.cleanup()
        telling.cancel()
        await asyncio.gather(telling, return_exceptions=True)
        await sink.flush()
        if owned:
            await api_client.close()
        if owned_telemetry:
            tel.shutdown()


def main() -> None:
    usage.handle(
        sys.argv,
        prog="kontinue-webhook",
        summary="Kontinue's admission webhook: serve /mutate and /validate over HTTPS until "
        "SIGTERM.",
        settings_doc="docs/webhook.md",
    )

    async def run(config: settings.Settings, stop: asyncio.Event) -> int:
        return await serve(config, stop=stop)

    supervision.main("kontinue-webhook", settings.Settings.from_env, run)


if __name__ == "__main__":
    main()
