"""``GET /metrics`` of the real webhook over HTTPS, after real admissions: every decision is
counted under its bounded label, the latency histogram counts each answer, the certificate's
expiry is the served certificate's ``notAfter``, and the exposition passes the naming lint."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import io
import json
import logging
from typing import Any

from cryptography import x509
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kontinue import keys, telemetry, tracing
from tests import promlint
from tests.integration.webhook import conftest
from tests.integration.webhook.test_https import _snapshot
from tests.unit.webhook import support
from webhook import certs

Obj = dict[str, Any]
REQUESTS = "kontinue_webhook_admission_requests_total"


async def _post(server: conftest.Server, path: str, body: Obj | bytes) -> int:
    kwargs: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
    async with server.session.post(server.url + path, **kwargs) as response:
        await response.read()
        return response.status


async def test_admissions_are_counted_by_decision_and_scraped_over_https(
    bundle: certs.Bundle,
) -> None:
    restored = support.kueue_pod()  # its lineage has cp-1
    cold = copy.deepcopy(restored)
    cold["metadata"]["ownerReferences"][0]["uid"] = "another-job-uid"  # no checkpoint yet
    orphan = copy.deepcopy(restored)
    del orphan["metadata"]["ownerReferences"]  # opted in, but nothing would restore it
    plain = support.kueue_pod(cluster_queue="cq-plain")  # queue not opted in
    forged = support.kueue_pod()
    forged["metadata"].setdefault("annotations", {})[keys.RESTORE_FROM_ANNOTATION] = "cp-x"
    tel = telemetry.setup("kontinue-webhook", environ={})
    # the default policy's claim exists in "default" only (webhook/claims.py)
    snap = dataclasses.replace(_snapshot(), claims=frozenset({("default", "kontinue")}))
    async with conftest.running_webhook(bundle, snap, tel=tel) as server:
        for pod in (restored, restored, cold, orphan, plain):
            assert await _post(server, "/mutate", support.request_for(pod)) == 200
        elsewhere = copy.deepcopy(cold)
        elsewhere["metadata"]["namespace"] = "no-claim"
        unclaimed = support.request_for(elsewhere, namespace="no-claim")
        assert await _post(server, "/mutate", unclaimed) == 200
        assert await _post(server, "/validate", support.request_for(forged)) == 200
        assert await _post(server, "/validate", support.request_for(plain)) == 200
        assert await _post(server, "/mutate", b"<xml/>") == 400
        async with server.session.get(server.url + "/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = await response.text()

    assert promlint.problems(text) == []
    expected = {
        ("/mutate", "restore", "allowed"): 2,
        ("/mutate", "cold_start", "allowed"): 1,
        ("/mutate", "not_plumbed", "allowed"): 1,
        ("/mutate", "claim_missing", "allowed"): 1,
        ("/mutate", "not_opted_in", "allowed"): 1,
        ("/mutate", "error", "error"): 1,
        ("/validate", "denied", "denied"): 1,
        ("/validate", "allowed", "allowed"): 1,
    }
    counted = {
        (labels["path"], labels["decision"], labels["outcome"]): value
        for name, labels, value in promlint.families(text)[REQUESTS].samples
        if name == REQUESTS
    }
    assert counted == expected
    duration = "kontinue_webhook_admission_duration_seconds_count"
    assert promlint.value(text, duration, path="/mutate") == 7
    assert promlint.value(text, duration, path="/validate") == 2
    served = x509.load_pem_x509_certificate(bundle.serving.cert_pem).not_valid_after_utc
    expiry = promlint.value(text, "kontinue_webhook_certificate_expiry_timestamp_seconds")
    assert datetime.datetime.fromtimestamp(expiry, datetime.UTC) == served
    assert promlint.value(text, "process_cpu_seconds_total") > 0


async def test_a_denial_logs_one_json_line_with_the_object_and_the_admission_trace(
    bundle: certs.Bundle,
) -> None:
    spans = InMemorySpanExporter()
    tel = telemetry.setup(
        "kontinue-webhook", span_processors=[SimpleSpanProcessor(spans)], environ={}
    )
    forged = support.kueue_pod()
    forged["metadata"].setdefault("annotations", {})[keys.RESTORE_FROM_ANNOTATION] = "cp-x"
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(telemetry.JsonFormatter())
    log = logging.getLogger("kontinue.webhook.app")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        async with conftest.running_webhook(bundle, _snapshot(), tel=tel) as server:
            assert await _post(server, "/validate", support.request_for(forged)) == 200
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    (line,) = [json.loads(raw) for raw in stream.getvalue().splitlines()]
    assert line["message"].startswith("denied path=/validate")
    assert line["kind"] == "Pod"
    assert line["namespace"] == "default"
    expected = forged["metadata"].get("name") or forged["metadata"]["generateName"]
    assert line["name"] == expected
    (admission,) = spans.get_finished_spans()
    assert admission.name == tracing.ADMISSION
    assert line["trace_id"] == f"{admission.context.trace_id:032x}"
    assert (admission.attributes or {})["kontinue.admission.decision"] == "denied"
