"""What each admission request leaves behind besides its answer: a count and a latency
(webhook/metrics.py), a span, and for an opted-in pod the webhook could not plumb, that starts
cold or whose namespace lacks its checkpoint claim, an Event on its owner (webhook/events.py) —
never for a dry run (``request.dryRun``: the apiserver stores nothing, so nothing is told).

A wrapper around the ``/mutate`` and ``/validate`` handlers (:func:`observed`): the handler
(webhook/app.py) only notes the parsed request and the verdict (:func:`note`, into a slot
:func:`observed` put in the task's context); everything here reads them after the answer is
made, so the rules stay pure and the answer path has two lines of telemetry in it.

Spans: ``kontinue.admission`` per request (its own trace; the JSON log lines written while it
runs carry its trace id). A restore decision also records ``kontinue.restore.decision`` *in the
eviction's trace* (its parent is the Checkpoint's ``kontinue.dev/traceparent``), linked to the
admission span, so one trace follows an eviction from the bridge into the webhook.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import id_generator, sampling

from kontinue import keys, telemetry, tracing
from webhook import events, metrics, review


@dataclasses.dataclass
class _Slot:
    request: review.AdmissionRequest | None = None
    verdict: review.Verdict | None = None


_CURRENT: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar(
    "kontinue_admission", default=None
)


def note(
    request: review.AdmissionRequest | None = None, verdict: review.Verdict | None = None
) -> None:
    """Record what the request was and what was decided, for the middleware (no-op outside)."""
    slot = _CURRENT.get()
    if slot is None:
        return
    if request is not None:
        slot.request = request
        meta = (request.object or {}).get("metadata") or {}
        pod_name = request.name or meta.get("name") or meta.get("generateName") or ""
        telemetry.name(request.kind.kind, request.namespace or "", pod_name)
    if verdict is not None:
        slot.verdict = verdict


@dataclasses.dataclass
class Observer:
    metrics: metrics.Metrics | None = None
    tracer: trace.Tracer = dataclasses.field(default_factory=trace.NoOpTracer)
    events: events.EventSink | None = None

    traced: bool = dataclasses.field(init=False)
    """Whether the admission span is recorded (else it only lends its trace id to log lines,
    and a review that writes none may go without it: webhook/fast_path.py)."""

    unsampled: id_generator.IdGenerator | None = dataclasses.field(init=False)
    """The ids of a tracer that samples every span out (:func:`kontinue.telemetry.setup` with
    ``record_unexported=False`` and no exporter), for :meth:`span`; else ``None``."""

    def __post_init__(self) -> None:
        self.traced = telemetry.records_spans(self.tracer)
        tracer = self.tracer
        self.unsampled = (
            tracer.id_generator
            if isinstance(tracer, sdk_trace.Tracer) and tracer.sampler is sampling.ALWAYS_OFF
            else None
        )

    @contextlib.contextmanager
    def span(self, path: str) -> Iterator[trace.Span]:
        """The admission span, current for the block.

        From a tracer that samples every span out, with no span current (the request brings no
        context), what its ``start_as_current_span`` would give, made directly
        (opentelemetry-sdk ``Tracer.start_span``: a non-recording root span, fresh ids from the
        tracer's generator, not sampled): the SDK's sampler call and wrappers cost ~6 µs per
        admission for a span that records nothing (issue 14, docs/benchmarks.md)."""
        ids = self.unsampled
        if ids is None or trace.get_current_span().get_span_context().is_valid:
            with self.tracer.start_as_current_span(
                tracing.ADMISSION, kind=trace.SpanKind.SERVER, attributes={"url.path": path}
            ) as span:
                yield span
            return
        flags = trace.TraceFlags.RANDOM_TRACE_ID if ids.is_trace_id_random() else 0
        unrecorded = trace.NonRecordingSpan(
            trace.SpanContext(
                trace_id=ids.generate_trace_id(),
                span_id=ids.generate_span_id(),
                is_remote=False,
                trace_flags=trace.TraceFlags(flags),
            )
        )
        token = otel_context.attach(trace.set_span_in_context(unrecorded))
        try:
            yield unrecorded
        finally:
            otel_context.detach(token)

    def passed(self, path: str, seconds: float) -> None:
        """What :meth:`finished` leaves behind for a pod answered by webhook/fast_path.py:
        ``allowed``, not opted in, HTTP 200 (no span is recorded, no Event is due)."""
        if self.metrics is not None:
            self.metrics.answered(
                path, allowed=True, decided=metrics.NOT_OPTED_IN, status=200, seconds=seconds
            )

    def finished(
        self,
        path: str,
        request: review.AdmissionRequest | None,
        verdict: review.Verdict | None,
        status: int,
        seconds: float,
        span: trace.Span,
    ) -> None:
        decided = verdict.decision if verdict else ""
        allowed = verdict.allowed if verdict is not None and status < 400 else None
        if self.metrics is not None:
            self.metrics.answered(
                path, allowed=allowed, decided=decided, status=status, seconds=seconds
            )
        recording = span.is_recording()  # not when no span is exported (kontinue/telemetry.py)
        if recording:
            label = metrics.decision_of(allowed=allowed, decided=decided)
            span.set_attribute("kontinue.admission.decision", label)
            span.set_attribute("http.response.status_code", status)
        if request is None or verdict is None:
            return
        if recording:
            span.set_attribute("k8s.namespace.name", request.namespace or "")
            span.set_attribute("kontinue.admission.kind", request.kind.kind)
        if request.dry_run:
            # ``dryRun``: the apiserver stores nothing, so nothing happened to tell about — no
            # Event, no restore decision in the eviction's trace (the manifests promise
            # ``sideEffects: None``, manifests/webhook/webhooks.yaml). Counted and traced as
            # a request above, like any other answer.
            return
        if verdict.cause:
            self._restore_decision(request, verdict, span)
        if self.events is not None and decided == metrics.CLAIM_MISSING:
            self._claim_missing(request, verdict)
        if self.events is not None and decided in (metrics.NOT_PLUMBED, metrics.COLD_START):
            owner = metrics.owner_of(request.object, request.namespace or "")
            if owner is not None and decided == metrics.NOT_PLUMBED:
                self.events.add(
                    owner, reason=keys.EVENT_NOT_PLUMBED, message=verdict.why, type_="Warning"
                )
            elif owner is not None:
                message = f"pods start without a checkpoint: {verdict.why}"
                self.events.add(owner, reason=keys.EVENT_COLD_START, message=message)

    def _claim_missing(self, request: review.AdmissionRequest, verdict: review.Verdict) -> None:
        """A ``CheckpointVolumeMissing`` Warning for a pod (webhook/claims.py), at most one per
        (namespace, claim) per the sink's quiet window: on the pod's controller (its Job), or,
        for a pod without one, on the missing claim itself (no UID: it does not exist), so
        ``kubectl get events -n <namespace>`` shows it either way. A Job or Volcano Job at its
        own CREATE has no UID yet; its pods bring the Event onto it when they are created. A
        dry run creates nothing, so it tells nothing (nor uses up the quiet window): the caller
        returns before this for one."""
        assert self.events is not None
        if request.kind.group != "" or request.kind.kind != "Pod":
            return
        namespace = request.namespace or ""
        involved = metrics.owner_of(request.object, namespace) or {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": verdict.claim, "namespace": namespace, "uid": ""},
        }
        self.events.add(
            involved,
            reason=keys.EVENT_CHECKPOINT_VOLUME_MISSING,
            message=verdict.why,
            type_="Warning",
            once_per=(namespace, verdict.claim),
        )

    def _restore_decision(
        self, request: review.AdmissionRequest, verdict: review.Verdict, admission: trace.Span
    ) -> None:
        checkpoint = metrics.annotation_set(verdict.patch, keys.RESTORE_FROM_ANNOTATION) or ""
        meta = (request.object or {}).get("metadata") or {}
        tracing.record(
            self.tracer,
            tracing.RESTORE_DECISION,
            cause=tracing.parent(verdict.cause),
            start=None,
            end=None,
            attributes={
                "kontinue.checkpoint": checkpoint,
                "k8s.namespace.name": request.namespace or "",
                "k8s.pod.name": meta.get("name") or meta.get("generateName") or "",
            },
            links=[trace.Link(admission.get_span_context())],
        )


OBSERVER = web.AppKey("observer", Observer)


async def observed(
    request: web.Request,
    path: str,
    handle: Callable[[], Awaitable[web.Response]],
    *,
    started: float | None = None,
) -> web.Response:
    """``handle()``'s answer to ``request`` on ``path``, counted, timed and traced.

    Called by the ``/mutate`` and ``/validate`` handlers themselves rather than as an aiohttp
    middleware: the middleware chain cost every request a few microseconds more for the same
    work (issue 14, docs/benchmarks.md). ``started``: when the request's handling began
    (``time.perf_counter()``), if before this call."""
    observer = request.app[OBSERVER]
    if started is None:
        started = time.perf_counter()
    slot = _Slot()
    token = _CURRENT.set(slot)
    with telemetry.scope(), observer.span(path) as span:
        status = 500
        try:
            response = await handle()
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            _CURRENT.reset(token)
            observer.finished(
                path,
                slot.request,
                slot.verdict,
                status,
                time.perf_counter() - started,
                span,
            )
