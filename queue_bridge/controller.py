"""The Kueue-path controller: watch caches -> one bounded per-key work queue -> handlers.

The pieces, one concept each:

- :mod:`queue_bridge.caches`: the watch caches and their indexes (the read-only
  :class:`queue_bridge.state.State` of the decisions);
- :mod:`queue_bridge.routing`: watch callbacks map a change to keys and ``add`` them (never I/O,
  never a decision);
- :mod:`queue_bridge.handlers`: one module per key kind (:mod:`queue_bridge.kinds`) re-reads the
  caches for its key, calls the pure decisions (:mod:`queue_bridge.deciding`,
  :mod:`queue_bridge.reconciling`, :mod:`queue_bridge.disruptions`,
  :mod:`queue_bridge.admission_check`) and writes through :mod:`queue_bridge.acting`;
- :mod:`queue_bridge.instruments`: the OpenTelemetry instruments.

Only the leader processes keys (:meth:`Controller.lead`); the standby keeps its caches warm, so
a takeover starts with a full sweep (every key enqueued) and no relist. Nothing needed for a
decision lives only in memory: the few in-memory sets (Jobs already warned about) only spare the
cluster duplicate Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import time
from collections.abc import Awaitable, Callable

import prometheus_client
from opentelemetry import metrics, trace

from kontinue import telemetry
from kontinue.kube import api as kube_api
from kontinue.kube import cacheset
from queue_bridge import (
    admission_check,
    adoption,
    instruments,
    kinds,
    queueing,
    recording,
    routing,
)
from queue_bridge import caches as caches_module
from queue_bridge import settings as settings_module
from queue_bridge.handlers import admission_check as admission_check_handler
from queue_bridge.handlers import checkpoint, context, disruption, job, pod, vcjob, workload

log = logging.getLogger("kontinue.bridge")

Key = kinds.Key
Handler = Callable[[context.Context, str, str], Awaitable[None]]
HANDLERS: dict[str, Handler] = {
    kinds.WORKLOAD: workload.reconcile,
    kinds.CHECKPOINT: checkpoint.reconcile,
    kinds.POD: pod.reconcile,
    kinds.JOB: job.reconcile,
    kinds.VOLCANO_JOB: vcjob.reconcile,
    kinds.ADMISSION_CHECK: admission_check_handler.reconcile,
    kinds.DISRUPTION: disruption.reconcile,
}


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Controller:
    def __init__(
        self,
        kube: kube_api.Api,
        *,
        config: settings_module.Settings,
        meter: metrics.Meter | None = None,
        tracer: trace.Tracer | None = None,
        clock: context.Clock | None = None,
        cache_options: cacheset.CacheOptions | None = None,  # tests: shorter backoff
        registry: prometheus_client.CollectorRegistry | None = None,  # what /metrics serves
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock or _utcnow
        meter = meter or metrics.NoOpMeter("kontinue.bridge")
        self.caches = caches_module.Caches(
            kube,
            admission_check=config.admission_check,
            queue_systems=config.queue_systems,
            meter=meter,
            options=dataclasses.replace(
                cache_options or cacheset.CacheOptions(), resync_seconds=config.resync_seconds
            ),
        )
        self.queue: queueing.WorkQueue[Key] = queueing.WorkQueue(
            max_keys=config.max_queued_keys, urgent=kinds.urgent
        )
        self.router = routing.Router(self.caches, self.queue)
        self.metrics = instruments.Metrics(
            meter, self.caches, self.queue, lambda: self.leading, tracer=tracer, registry=registry
        )
        self.context = context.Context(
            kube=kube,
            applier=kube_api.Api(kube.api_client, field_manager=admission_check.FIELD_MANAGER),
            config=config,
            clock=self.clock,
            caches=self.caches,
            metrics=self.metrics,
            recorder=recording.Recorder(kube, instance=config.identity),
            queue=self.queue,
        )

    @property
    def leading(self) -> bool:
        return self.router.leading

    async def lead(self) -> None:
        """Work while leading: wait for the caches, sweep every key, run the workers."""
        await self.caches.wait_synced()
        self.router.leading = True
        log.info("leading: sweeping every object")
        adopting = (
            asyncio.create_task(adoption.label_plumbed_pods(self.kube), name="adoption")
            if self.config.adopt_unlabelled_pods
            else None
        )
        try:
            self.queue.sweep()  # every key, in batches as the queue drains (Router.every_key)
            await self.queue.run(self.handle, workers=self.config.workers)
        finally:
            self.router.leading = False
            with contextlib.suppress(Exception):  # Events are best-effort; do not hang on them
                await self.context.outbox.close(2.0)
            if adopting is not None:
                adopting.cancel()
                await asyncio.gather(adopting, return_exceptions=True)

    async def handle(self, key: Key) -> None:
        kind, namespace, name = key
        started = time.monotonic()
        try:
            with telemetry.about(kind, namespace, name):  # JSON log lines name the object
                await HANDLERS[kind](self.context, namespace, name)
        except Exception as exc:
            self.metrics.reconcile_failed(kind, exc)
            raise
        finally:
            self.metrics.reconciles.record(time.monotonic() - started, {"kind": kind})
