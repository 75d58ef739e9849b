"""webhook/events.py against the API emulator over real HTTP: many occurrences of one Event
become one object whose ``count`` adds up, written at flush time, never per admission; a missing
checkpoint claim is told once per namespace and claim per quiet window (webhook/observing.py);
a dry run (``request.dryRun``) tells nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kontinue import keys, tracing
from kontinue.kube import api, resources
from tests.unit.webhook import support
from webhook import claims, events, metrics, observing, review

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "namespace": "default", "uid": "job-uid-1"},
}


async def _events(kube: api.Api) -> list[dict[str, Any]]:
    listed = await kube.list(resources.EVENTS, namespace="default")
    return list(listed["items"])


async def test_occurrences_are_aggregated_into_one_event_per_owner_reason_and_message(
    kube: api.Api,
) -> None:
    sink = events.EventSink(kube, instance="webhook-0")
    for _ in range(100):
        sink.add(JOB, reason=keys.EVENT_COLD_START, message="pods start without a checkpoint: x")
    sink.add(JOB, reason=keys.EVENT_NOT_PLUMBED, message="no controller", type_="Warning")
    assert await _events(kube) == []  # nothing written while admitting
    await sink.flush()
    by_reason = {e["reason"]: e for e in await _events(kube)}
    assert set(by_reason) == {keys.EVENT_COLD_START, keys.EVENT_NOT_PLUMBED}
    cold = by_reason[keys.EVENT_COLD_START]
    assert cold["count"] == 100
    assert cold["involvedObject"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "namespace": "default",
        "uid": "job-uid-1",
    }
    assert cold["reportingComponent"] == "kontinue.dev/webhook"
    assert cold["reportingInstance"] == "webhook-0"
    assert by_reason[keys.EVENT_NOT_PLUMBED]["type"] == "Warning"

    for _ in range(5):  # a later flush (or another replica) bumps the same Event
        sink.add(JOB, reason=keys.EVENT_COLD_START, message="pods start without a checkpoint: x")
    await sink.flush()
    (cold,) = [e for e in await _events(kube) if e["reason"] == keys.EVENT_COLD_START]
    assert cold["count"] == 105


async def test_the_pending_set_is_bounded(kube: api.Api) -> None:
    sink = events.EventSink(kube, instance="webhook-0", max_pending=3)
    for index in range(10):
        sink.add(JOB, reason=keys.EVENT_NOT_PLUMBED, message=f"reason {index}")
    await sink.flush()
    assert sorted(str(e["message"]) for e in await _events(kube)) == [
        "reason 0",
        "reason 1",
        "reason 2",
    ]


def _claim_missing_request(
    namespace: str, owner: str | None, *, dry_run: bool = False
) -> review.AdmissionRequest:
    meta: dict[str, Any] = {"generateName": "train-", "namespace": namespace}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": owner,
                "uid": f"{owner}-uid",
                "controller": True,
            }
        ]
    body = support.request_for(pod, namespace=namespace)
    body["request"]["dryRun"] = dry_run
    return review.parse(json.dumps(body).encode()).request


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_missing_claim_is_one_warning_per_namespace_and_claim_per_quiet_window(
    kube: api.Api,
) -> None:
    clock = Clock()
    sink = events.EventSink(kube, instance="webhook-0", quiet_seconds=300, clock=clock)
    observer = observing.Observer(events=sink)
    missing = claims.Missing(namespace="default", claim="kontinue", policy="default")
    verdict = review.allow(
        warnings=[missing.warning("pod")],
        decision=metrics.CLAIM_MISSING,
        why=missing.message(),
        claim="kontinue",
    )
    span = trace.NoOpTracer().start_span("test")
    # 30 pods of two Jobs, then a bare pod: one Event, on the first pod's Job
    for index in range(30):
        request = _claim_missing_request("default", "train" if index < 20 else "other")
        observer.finished("/mutate", request, verdict, 200, 0.001, span)
    observer.finished("/mutate", _claim_missing_request("default", None), verdict, 200, 0.0, span)
    await sink.flush()
    (event,) = await _events(kube)
    first = event["metadata"]["name"]
    assert event["reason"] == keys.EVENT_CHECKPOINT_VOLUME_MISSING
    assert event["type"] == "Warning"
    assert event["count"] == 1
    assert event["involvedObject"]["kind"] == "Job"
    assert event["involvedObject"]["name"] == "train"
    assert event["message"] == missing.message()
    assert 'no PersistentVolumeClaim "kontinue"' in str(event["message"])

    # after the quiet window the next pod tells again; a pod without an owner, on the claim
    clock.now += 301
    observer.finished("/mutate", _claim_missing_request("default", None), verdict, 200, 0.0, span)
    observer.finished(
        "/mutate", _claim_missing_request("default", "train"), verdict, 200, 0.0, span
    )
    await sink.flush()
    (on_claim,) = [e for e in await _events(kube) if e["metadata"]["name"] != first]
    involved = on_claim["involvedObject"]
    assert (involved["kind"], involved["name"], involved["namespace"]) == (
        "PersistentVolumeClaim",
        "kontinue",
        "default",
    )
    assert on_claim["metadata"]["namespace"] == "default"


EVICTION_TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize("dry_run", [True, False])
async def test_a_dry_run_tells_nothing(kube: api.Api, dry_run: bool) -> None:
    """``dryRun`` stores nothing, so nothing happened: no ``NotPlumbed``, ``ColdStart`` or
    ``CheckpointVolumeMissing`` Event, and no ``kontinue.restore.decision`` span in the
    eviction's trace (a trace that shows a restore no pod made would mislead). The same requests
    without ``dryRun`` tell each (the control: the test can fail)."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = provider.get_tracer("test")
    sink = events.EventSink(kube, instance="webhook-0")
    observer = observing.Observer(events=sink, tracer=tracer)
    request = _claim_missing_request("default", "train", dry_run=dry_run)
    assert request.dry_run is dry_run
    missing = claims.Missing(namespace="default", claim="kontinue", policy="default")
    verdicts = [
        review.allow(decision=metrics.NOT_PLUMBED, why="kontinue: pod not plumbed: x"),
        review.allow(decision=metrics.COLD_START, why="no checkpoint of this lineage"),
        review.allow(decision=metrics.CLAIM_MISSING, why=missing.message(), claim="kontinue"),
        review.allow(
            [{"op": "add", "path": "/metadata/annotations", "value": {}}],
            decision=metrics.RESTORE,
            cause=EVICTION_TRACE,
        ),
    ]
    for verdict in verdicts:
        with tracer.start_as_current_span(tracing.ADMISSION) as span:
            observer.finished("/mutate", request, verdict, 200, 0.001, span)
    await sink.flush()
    told = sorted(e["reason"] for e in await _events(kube))
    decisions = [sp for sp in spans.get_finished_spans() if sp.name == tracing.RESTORE_DECISION]
    admissions = [sp for sp in spans.get_finished_spans() if sp.name == tracing.ADMISSION]
    assert len(admissions) == len(verdicts)  # every request is still traced as a request
    if dry_run:
        assert told == []
        assert decisions == []
    else:
        assert told == sorted(
            [keys.EVENT_NOT_PLUMBED, keys.EVENT_COLD_START, keys.EVENT_CHECKPOINT_VOLUME_MISSING]
        )
        (decision,) = decisions
        assert f"{decision.context.trace_id:032x}" == EVICTION_TRACE.split("-")[1]
