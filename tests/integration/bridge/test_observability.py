"""Issue 12, "Done when", on the emulated cluster with real processes: one Kueue preemption of
an opted-in Job, then its restore, as an operator sees it.

- Both ``/metrics`` endpoints (the bridge's over HTTP, the webhook's over HTTPS, verified with
  the CA the webhook published) moved by exactly what happened — one eviction, one Checkpoint
  through Pending, InProgress and Succeeded, one member saved, one restored pod, two pods (the
  victim's first incarnation and the preemptor) started cold — and both pass the naming lint.
- One trace for the eviction, read with the SDK's in-memory exporter: the bridge's detection,
  the Checkpoint's creation and save, the member's save, the webhook's restore decision (another
  process in production: it joins through the Checkpoint's ``kontinue.dev/traceparent``) and
  the restored pod's restore init container, each naming the Checkpoint and its member count.
- Events on the Jobs: ``ColdStart`` with the restore plan's reason (from the webhook),
  ``Restored`` (from the bridge), with ``reportingComponent`` set.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Callable
from pathlib import Path

import aiohttp
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from emulator import cluster
from kontinue import keys, telemetry, tracing
from kontinue.kube import resources
from kontinue.models import checkpoint
from tests import promlint
from tests.integration.bridge.conftest import SYSTEM, eventually
from tests.integration.bridge.test_end_to_end import NS, System, _trainer_job, system

RESTORES = "kontinue_restores_total"


async def _scrape_bridge(s: System) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(s.health_urls[0] + "/metrics") as response,
    ):
        assert response.status == 200
        return await response.text()


async def _scrape_webhook(s: System) -> str:
    secret = await s.admin.get(resources.SECRETS, "kontinue-webhook-tls", namespace=SYSTEM)
    trust = ssl.create_default_context(cadata=base64.b64decode(secret["data"]["ca.crt"]).decode())
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            s.webhook_url + "/metrics",
            ssl=trust,
            server_hostname=f"kontinue-webhook.{SYSTEM}.svc",
        ) as response,
    ):
        assert response.status == 200
        return await response.text()


def _moved(before: str, after: str) -> Callable[..., float]:
    def delta(sample: str, **labels: str) -> float:
        return promlint.value(after, sample, **labels) - promlint.value(before, sample, **labels)

    return delta


async def test_one_preemption_is_counted_traced_and_told(tmp_path: Path) -> None:
    bridge_spans, webhook_spans = InMemorySpanExporter(), InMemorySpanExporter()
    bridge_tel = telemetry.setup(
        "kontinue-bridge", span_processors=[SimpleSpanProcessor(bridge_spans)], environ={}
    )
    webhook_tel = telemetry.setup(
        "kontinue-webhook", span_processors=[SimpleSpanProcessor(webhook_spans)], environ={}
    )
    async with system(tmp_path, opted_in=True, bridge_tel=bridge_tel, webhook_tel=webhook_tel) as s:
        bridge_before, webhook_before = await _scrape_bridge(s), await _scrape_webhook(s)
        await s.admin.create(
            resources.JOBS, _trainer_job("low", priority="low", steps=100000, save_seconds=0.2)
        )
        victim = await s.running_pod("low", min_step=20, exclude=set())
        await s.admin.create(
            resources.JOBS, _trainer_job("high", priority="high", steps=10, save_seconds=0.2)
        )
        await s.cluster.wait_for(
            resources.JOBS, "high", NS, cluster.job_condition("Complete"), timeout=60
        )
        successor = await s.running_pod("low", min_step=1, exclude={victim["metadata"]["uid"]})

        async def restore_counted() -> bool:
            text = await _scrape_bridge(s)
            return promlint.value(text, RESTORES, result="restored") >= 1

        await eventually(restore_counted, within=30, what="the restore counted")

        async def told() -> bool:
            listed = await s.admin.list(resources.EVENTS, namespace=NS)
            reasons = {e["reason"] for e in listed["items"]}
            return {keys.EVENT_COLD_START, keys.EVENT_RESTORED} <= reasons

        await eventually(told, within=30, what="ColdStart and Restored Events")
        bridge_after, webhook_after = await _scrape_bridge(s), await _scrape_webhook(s)
        (cp,) = [
            checkpoint.load(item)
            for item in (await s.admin.list(resources.CHECKPOINTS, namespace=NS))["items"]
        ]
        events = (await s.admin.list(resources.EVENTS, namespace=NS))["items"]

    # -- metrics: exactly what happened ----------------------------------------------------------
    assert promlint.problems(bridge_after) == []
    assert promlint.problems(webhook_after) == []
    bridge = _moved(bridge_before, bridge_after)
    assert bridge("kontinue_bridge_evictions_total", source="Kueue", reason="Preempted") == 1
    for phase in ("Pending", "InProgress", "Succeeded"):
        assert bridge("kontinue_bridge_checkpoint_transitions_total", phase=phase) == 1, phase
    assert bridge("kontinue_bridge_checkpoint_transitions_total", phase="Failed") == 0
    saved = "kontinue_bridge_member_save_duration_seconds_count"
    assert bridge(saved, result="Saved") == 1
    assert bridge("kontinue_bridge_member_save_size_bytes_count") == 1
    assert bridge(RESTORES, result="restored", reason="Restored", queue="gpu-cq") == 1
    assert bridge(RESTORES, result="cold_start", reason="NoCheckpoint", queue="gpu-cq") == 2
    assert bridge(RESTORES, result="failed") == 0
    handover = "kontinue_bridge_handover_seconds_count"
    assert bridge(handover, stage="victims_exited") == 1
    assert bridge(handover, stage="restored_running") == 1
    webhook = _moved(webhook_before, webhook_after)
    requests = "kontinue_webhook_admission_requests_total"
    assert webhook(requests, path="/mutate", decision="restore", outcome="allowed") == 1
    assert webhook(requests, path="/mutate", decision="cold_start", outcome="allowed") == 2
    assert webhook(requests, path="/mutate", decision="plumbed", outcome="allowed") >= 2  # Jobs
    assert webhook(requests, path="/mutate", decision="not_plumbed") == 0
    assert webhook(requests, outcome="error") == 0

    # -- one trace from the bridge's detection to the restored pod's init container --------------
    spans: list[ReadableSpan] = [*bridge_spans.get_finished_spans()]
    spans += webhook_spans.get_finished_spans()
    (eviction,) = [sp for sp in spans if sp.name == tracing.EVICTION]
    trace_id = eviction.context.trace_id
    carried = cp.metadata.annotation(keys.TRACEPARENT_ANNOTATION) or ""
    assert carried.startswith(f"00-{trace_id:032x}-{eviction.context.span_id:016x}-")
    in_trace = {sp.name: sp for sp in spans if sp.context.trace_id == trace_id}
    assert set(in_trace) == {
        tracing.EVICTION,
        tracing.CHECKPOINT_CREATE,
        tracing.CHECKPOINT_SAVE,
        tracing.MEMBER_SAVE,
        tracing.RESTORE_DECISION,
        tracing.RESTORE,
    }
    assert sum(sp.context.trace_id == trace_id for sp in spans) == len(in_trace)
    for name in (tracing.EVICTION, tracing.CHECKPOINT_SAVE, tracing.RESTORE):
        attributes = in_trace[name].attributes or {}
        assert attributes["kontinue.checkpoint"] == cp.name, name
        assert attributes["kontinue.checkpoint.members"] == 1, name
    assert (in_trace[tracing.RESTORE_DECISION].attributes or {})["kontinue.checkpoint"] == cp.name
    for child in (tracing.CHECKPOINT_CREATE, tracing.CHECKPOINT_SAVE, tracing.RESTORE_DECISION):
        parent = in_trace[child].parent
        assert parent is not None, child
        assert parent.span_id == eviction.context.span_id, child
    member = in_trace[tracing.MEMBER_SAVE]
    assert member.parent is not None
    assert member.parent.span_id == in_trace[tracing.CHECKPOINT_SAVE].context.span_id
    assert (member.attributes or {})["k8s.pod.name"] == victim["metadata"]["name"]
    restored = in_trace[tracing.RESTORE]
    assert (restored.attributes or {})["k8s.pod.name"] == successor["metadata"]["name"]
    assert restored.parent is not None
    assert restored.parent.span_id == eviction.context.span_id
    assert restored.start_time is not None
    assert eviction.start_time is not None
    # times are the cluster's (RFC 3339, whole seconds): in order, possibly within one second
    assert restored.start_time >= eviction.start_time
    decision = in_trace[tracing.RESTORE_DECISION]
    admissions = [sp for sp in spans if sp.name == tracing.ADMISSION]
    assert [link.context.span_id for link in decision.links] == [
        sp.context.span_id
        for sp in admissions
        if sp.context.span_id == decision.links[0].context.span_id
    ]

    # -- Events on the Jobs --------------------------------------------------------------------
    cold = {e["involvedObject"]["name"]: e for e in events if e["reason"] == keys.EVENT_COLD_START}
    assert set(cold) == {"low", "high"}
    for event in cold.values():
        assert event["involvedObject"]["kind"] == "Job"
        assert event["count"] == 1
        assert event["reportingComponent"] == "kontinue.dev/webhook"
        assert event["message"].startswith("pods start without a checkpoint: no checkpoint of")
    (restored_event,) = [e for e in events if e["reason"] == keys.EVENT_RESTORED]
    assert restored_event["involvedObject"]["name"] == "low"
    assert restored_event["message"].startswith(f"pods restored from checkpoint {cp.name}")
