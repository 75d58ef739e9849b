"""The aiohttp application: routes, typed state, and the HTTP half of the two error channels.

``create_app`` registers ``POST /mutate``, ``POST /validate``, ``GET /healthz``, ``GET /readyz``
and stores its collaborators under :class:`aiohttp.web.AppKey` s. It starts nothing: the caller
(:mod:`webhook.__main__`, or a test) owns the caches, the certificate and the runner, so the same
app runs in production, in tests over real HTTPS, and in the benchmark.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import ssl
import time
from collections.abc import Callable, Mapping

import prometheus_client
from aiohttp import web
from opentelemetry import metrics, trace

from kontinue import telemetry
from webhook import admission, fast_path, freshness, limits, observing, review, settings, shape
from webhook import events as webhook_events
from webhook import metrics as webhook_metrics
from webhook import state as state_module

logger = logging.getLogger("kontinue.webhook.app")


class Readiness:
    """Named checks /readyz runs; all must hold. ``draining`` fails them all (shutdown)."""

    def __init__(self, checks: Mapping[str, Callable[[], bool]] | None = None) -> None:
        self.checks = dict(checks or {})
        self.draining = False

    def failing(self) -> list[str]:
        if self.draining:
            return ["draining"]
        return [name for name, check in self.checks.items() if not check()]


SETTINGS = web.AppKey("settings", settings.Settings)
STATE: web.AppKey[state_module.State] = web.AppKey("state")
READINESS = web.AppKey("readiness", Readiness)
GUARD = web.AppKey("guard", limits.Guard)
LARGE = web.AppKey("large", asyncio.Lock)
"""Held while a review larger than :data:`YIELD_ABOVE` is parsed or decided (never across the
live read: :func:`_answered`)."""
FRESHNESS: web.AppKey[freshness.Reader | None] = web.AppKey("freshness")
"""Reads a plumbed pod's lineage live at its CREATE (webhook/freshness.py); ``None``: never."""

YIELD_ABOVE = 64 * 1024
"""Bodies larger than this (a real pod review is ~5-20 KiB) wait one turn of the event loop."""

Decide = Callable[..., review.Verdict]


@dataclasses.dataclass(frozen=True)
class Answer:
    """What one request body gets: an HTTP status and body; ``verdict`` when the review was read."""

    status: int
    body: bytes
    content_type: str = "application/json"
    verdict: review.Verdict | None = None


def answer(
    body: bytes,
    decide: Decide,
    *,
    path: str,
    state: state_module.State,
    config: settings.Settings,
) -> Answer:
    """Answer one AdmissionReview body; everything between the bytes read and the bytes sent.

    Contract (kopf ``_kits/webhooks.py``):

    * unreadable body / not an ``admission.k8s.io/v1`` AdmissionReview -> **HTTP 400** with the
      cause in plain text (the apiserver then applies the webhook's failurePolicy);
    * otherwise **HTTP 200** with ``response.uid`` = ``request.uid``: ``allowed: true`` with an
      optional base64 JSONPatch and warnings, or ``allowed: false`` with ``status.code`` 422
      (invalid value), 403 (reserved key) or 400 (an object no apiserver sends,
      :mod:`webhook.shape`) and a bounded message naming the first fields;
    * a bug in a rule: ``/mutate`` allows the object untouched with a warning (fail open: an
      unplumbed pod runs as it would without Kontinue); ``/validate`` answers **HTTP 500**, so
      the webhook's failurePolicy decides (docs/webhook.md says which and why). The fuzz suite
      (tests/fuzz/) searches for inputs that reach this.
    """
    read = read_review(body)
    if isinstance(read, Answer):
        return read
    return respond(read, decide, path=path, state=state, config=config)


def read_review(body: bytes) -> review.AdmissionRequest | Answer:
    """The request of an AdmissionReview body, or the HTTP 400 :class:`Answer` (see
    :func:`answer`)."""
    try:
        parsed = review.parse(body)
    except review.MalformedReview as exc:
        return Answer(400, review.bounded(str(exc)).encode(), "text/plain")
    observing.note(parsed.request)  # metrics, span, Events: webhook/observing.py
    return parsed.request


def respond(
    admission_request: review.AdmissionRequest,
    decide: Decide,
    *,
    path: str,
    state: state_module.State,
    config: settings.Settings,
) -> Answer:
    """The rest of :func:`answer`, once the review is read: decide, then encode."""
    try:
        verdict = _misshapen(admission_request, path=path) or decide(
            admission_request, state=state, config=config
        )
    except Exception:
        logger.exception(
            "rule failed path=%s uid=%s kind=%s",
            path,
            admission_request.uid,
            admission_request.kind.kind,
        )
        if path != "/mutate":
            return Answer(500, b"internal error in a validation rule", "text/plain")
        verdict = review.allow(warnings=["kontinue: internal error; admitted without changes"])
    if not verdict.allowed:
        logger.info(
            "denied path=%s uid=%s kind=%s name=%s namespace=%s user=%s code=%s message=%s",
            path,
            admission_request.uid,
            admission_request.kind.kind,
            admission_request.name or "",
            admission_request.namespace or "",
            admission_request.user_info.username,
            verdict.code,
            review.bounded(verdict.message),
        )
    observing.note(verdict=verdict)
    return Answer(200, review.encode(admission_request.uid, verdict), verdict=verdict)


async def _answered(body: bytes, decide: Decide, *, path: str, app: web.Application) -> Answer:
    """:func:`answer`, deciding from the app's state with a plumbed pod's lineage read live
    (webhook/freshness.py) when the app has a reader.

    A body larger than :data:`YIELD_ABOVE` is parsed, and later decided, under :data:`LARGE`,
    each after one turn of the loop: a 0.5 MiB review parses in milliseconds, all on this loop,
    so small reviews read meanwhile go first and wait behind at most one large one, never
    behind a queue of them (issue 20 item 4). The live read is awaited *outside* that lock: it
    may take up to ``KONTINUE_WEBHOOK_LIVE_READ_SECONDS``, and large reviews must not queue
    behind another one's network wait."""
    large = app[LARGE] if len(body) > YIELD_ABOVE else None
    if large is None:
        read = read_review(body)
    else:
        async with large:
            await asyncio.sleep(0)
            read = read_review(body)
    if isinstance(read, Answer):
        return read
    state, fresh = app[STATE], app[FRESHNESS]
    if fresh is not None:
        state = await fresh.view(read, state, path=path)
    if large is None:
        return respond(read, decide, path=path, state=state, config=app[SETTINGS])
    async with large:
        await asyncio.sleep(0)
        return respond(read, decide, path=path, state=state, config=app[SETTINGS])


async def _serve(request: web.Request, decide: Decide, *, path: str) -> web.Response:
    """Read the body within the limits (:mod:`webhook.limits`) and :func:`answer` it, counted,
    timed and traced by :func:`webhook.observing.observed`. The body stays reserved until its
    answer is built.

    A ``/mutate`` review of a pod that is not opted in is answered by
    :func:`webhook.fast_path.answer` when no span would be recorded anyway
    (:attr:`webhook.observing.Observer.traced`): counted and timed the same, the same bytes."""
    observer = request.app[observing.OBSERVER]
    if path != "/mutate" or observer.traced:
        return await observing.observed(request, path, lambda: _handle(request, decide, path))
    app = request.app
    started = time.perf_counter()
    reading = app[GUARD].read_body(request)
    try:
        body = await reading.__aenter__()
    except BaseException as exc:  # as _handle would meet it: counted, a Refused answered
        failed = exc

        async def unread() -> web.Response:
            if isinstance(failed, limits.Refused):
                return await _refused(failed, path)
            raise failed

        return await observing.observed(request, path, unread, started=started)
    try:
        if len(body) <= YIELD_ABOVE:  # larger: parsed under LARGE, in _answered
            quick = fast_path.answer(body, state=app[STATE])
            if quick is not None:
                response = web.Response(body=quick, content_type="application/json")
                observer.passed(path, time.perf_counter() - started)
                return response

        async def rest() -> web.Response:
            result = await _answered(body, decide, path=path, app=app)
            return _response(result)

        return await observing.observed(request, path, rest, started=started)
    finally:
        await reading.__aexit__(None, None, None)


async def _handle(request: web.Request, decide: Decide, path: str) -> web.Response:
    app = request.app
    try:
        async with app[GUARD].read_body(request) as body:
            # large reviews: parsed and decided one at a time (see _answered)
            result = await _answered(body, decide, path=path, app=app)
    except limits.Refused as refused:
        return await _refused(refused, path)
    return _response(result)


async def _refused(refused: limits.Refused, path: str) -> web.Response:
    logger.info("refused path=%s status=%s: %s", path, refused.status, refused.text.strip())
    return refused.response


def _response(result: Answer) -> web.Response:
    return web.Response(status=result.status, body=result.body, content_type=result.content_type)


def _misshapen(request: review.AdmissionRequest, *, path: str) -> review.Verdict | None:
    """The answer for an object no apiserver would send (:mod:`webhook.shape`), else ``None``.

    ``/mutate`` admits it untouched with a warning (fail open, as for any pod it cannot read);
    ``/validate`` denies it with code 400 naming the first few fields.
    """
    if request.operation not in ("CREATE", "UPDATE") or request.sub_resource:
        return None
    found = shape.problems(
        group=request.kind.group, kind=request.kind.kind, obj=request.object, old=request.old_object
    ) or shape.namespace_problems(request.namespace, request.object, request.old_object)
    if not found:
        return None
    message = f"{request.kind.kind}: malformed object: " + "; ".join(str(e) for e in found)
    if path == "/mutate":
        return review.allow(warnings=[f"kontinue: not plumbed: {message}"])
    return review.bad_request(message)


async def mutate(request: web.Request) -> web.Response:
    return await _serve(request, admission.mutate, path="/mutate")


async def validate(request: web.Request) -> web.Response:
    return await _serve(request, admission.validate, path="/validate")


async def healthz(request: web.Request) -> web.Response:
    """Alive: the event loop answers. Nothing else, so a slow API never restarts the pod."""
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    """Ready: caches synced and a certificate served (and not shutting down)."""
    failing = request.app[READINESS].failing()
    if failing:
        return web.Response(status=503, text="not ready: " + ", ".join(failing))
    return web.Response(text="ok")


def create_app(
    config: settings.Settings,
    *,
    state: state_module.State,
    readiness: Readiness | None = None,
    meter: metrics.Meter | None = None,
    registry: prometheus_client.CollectorRegistry | None = None,
    expiry: Callable[[], float | None] = lambda: None,
    tracer: trace.Tracer | None = None,
    events: webhook_events.EventSink | None = None,
    fresh: freshness.Reader | None = None,
) -> web.Application:
    """The webhook application; nothing starts until a runner serves it.

    ``meter``: count and time admissions (webhook/metrics.py; ``expiry`` reads the serving
    certificate's notAfter); ``registry``: serve it as ``GET /metrics``; ``tracer``: a span per
    admission; ``events``: NotPlumbed and ColdStart Events (webhook/observing.py); ``fresh``:
    read a plumbed pod's lineage live at its CREATE (webhook/freshness.py; ``None``: plan from
    ``state`` alone)."""
    app = web.Application(client_max_size=config.limits.max_body)
    app[observing.OBSERVER] = observing.Observer(
        metrics=(
            webhook_metrics.Metrics(meter, expiry=expiry, registry=registry)
            if meter is not None
            else None
        ),
        tracer=tracer or trace.NoOpTracer(),
        events=events,
    )
    app[SETTINGS] = config
    app[GUARD] = limits.Guard(config.limits)
    app[LARGE] = asyncio.Lock()
    app[STATE] = state
    app[FRESHNESS] = fresh
    app[READINESS] = readiness or Readiness()
    app.router.add_post("/mutate", mutate)
    app.router.add_post("/validate", validate)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if registry is not None:
        app.router.add_get("/metrics", telemetry.metrics_handler(registry))
    return app


def runner(application: web.Application) -> web.AppRunner:
    """The runner for :func:`create_app`'s application: idle kept-alive connections closed after
    ``idle_seconds``, and no lingering read of a refused request's body."""
    return web.AppRunner(
        application,
        handle_signals=False,
        access_log=None,
        keepalive_timeout=application[SETTINGS].limits.idle_seconds,
        lingering_time=0,
    )


def site(
    app_runner: web.AppRunner,
    *,
    ssl_context: ssl.SSLContext | None,
    host: str | None = None,
    port: int | None = None,
    sock: socket.socket | None = None,
) -> limits.GuardedSite:
    """Where :func:`create_app`'s application listens, through its :class:`limits.Guard`."""
    return limits.GuardedSite(
        app_runner,
        app_runner.app[GUARD],
        ssl_context=ssl_context,
        host=host,
        port=port,
        sock=sock,
    )
