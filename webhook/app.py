"""The aiohttp application: routes, typed state, and the HTTP half of the two error channels.

``create_app`` registers ``POST /mutate``, ``POST /validate``, ``GET /healthz``, ``GET /readyz``
and stores its collaborators under :class:`aiohttp.web.AppKey` s. It starts nothing: the caller
(:mod:`webhook.__main__`, or a test) owns the caches, the certificate and the runner, so the same
app runs in production, in tests over real HTTPS, and in the benchmark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

import prometheus_client
from aiohttp import web
from opentelemetry import metrics

from kontinue import telemetry
from webhook import admission, review, settings
from webhook import metrics as webhook_metrics
from webhook import state as state_module

logger = logging.getLogger(__name__)

MAX_BODY = 8 * 1024 * 1024
"""An AdmissionReview carries object and oldObject, each up to etcd's 1.5 MiB limit."""


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
METRICS = web.AppKey("metrics", webhook_metrics.Metrics)

Decide = Callable[..., review.Verdict]


async def _serve(request: web.Request, decide: Decide, *, path: str) -> web.Response:
    """Answer one AdmissionReview.

    Contract (style.md §7.2):

    * unreadable body / not an ``admission.k8s.io/v1`` AdmissionReview -> **HTTP 400** with the
      cause in plain text (the apiserver then applies the webhook's failurePolicy);
    * otherwise **HTTP 200** with ``response.uid`` = ``request.uid``: ``allowed: true`` with an
      optional base64 JSONPatch and warnings, or ``allowed: false`` with ``status.code`` 422
      (invalid value) or 403 (reserved key) and a message naming the fields;
    * a bug in a rule: ``/mutate`` allows the object untouched with a warning (fail open: an
      unplumbed pod runs as it would without Kontinue); ``/validate`` answers **HTTP 500**, so
      the webhook's failurePolicy decides (docs/webhook.md says which and why).
    """
    started = time.perf_counter()
    app = request.app

    def answered(verdict: review.Verdict | None, status: int = 200) -> None:
        if METRICS in app:
            app[METRICS].answered(
                path,
                allowed=verdict.allowed if verdict else None,
                decided=verdict.decision if verdict else "",
                status=status,
                seconds=time.perf_counter() - started,
            )

    body = await request.read()
    try:
        parsed = review.parse(body)
    except review.MalformedReview as exc:
        answered(None, 400)
        raise web.HTTPBadRequest(text=str(exc)) from None
    admission_request = parsed.request
    try:
        verdict = decide(admission_request, state=app[STATE], config=app[SETTINGS])
    except Exception:
        logger.exception(
            "rule failed path=%s uid=%s kind=%s",
            path,
            admission_request.uid,
            admission_request.kind.kind,
        )
        if path != "/mutate":
            answered(None, 500)
            raise web.HTTPInternalServerError(text="internal error in a validation rule") from None
        verdict = review.allow(warnings=["kontinue: internal error; admitted without changes"])
    answer = review.encode(admission_request.uid, verdict)
    answered(verdict)
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
            verdict.message,
        )
    return web.Response(body=answer, content_type="application/json")


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
) -> web.Application:
    """The webhook application; nothing starts until a runner serves it.

    ``meter``: count and time admissions (webhook/metrics.py; ``expiry`` reads the serving
    certificate's notAfter); ``registry``: serve it as ``GET /metrics``."""
    app = web.Application(client_max_size=MAX_BODY)
    app[SETTINGS] = config
    app[STATE] = state
    app[READINESS] = readiness or Readiness()
    if meter is not None:
        app[METRICS] = webhook_metrics.Metrics(meter, expiry=expiry)
    app.router.add_post("/mutate", mutate)
    app.router.add_post("/validate", validate)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if registry is not None:
        app.router.add_get("/metrics", telemetry.metrics_handler(registry))
    return app
