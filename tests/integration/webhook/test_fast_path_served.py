"""The real webhook over HTTPS answers the same with and without webhook/fast_path.py.

The fast path is taken only when no admission span is recorded (the default, no trace
exporter: ``telemetry.setup(record_unexported=False)`` as webhook/__main__.py sets it up). The
same reviews are sent to a webhook that records spans (every review takes the full path) and
to one that does not; the answers (status, content type, bytes) and what ``/metrics`` counts
must be the same, and the second must have answered the pods that are not opted in by the fast
path.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kontinue import keys, telemetry
from tests import promlint
from tests.integration.webhook import conftest
from tests.integration.webhook.test_https import _snapshot
from tests.unit.webhook import support
from webhook import certs, fast_path

Obj = dict[str, Any]
REQUESTS = "kontinue_webhook_admission_requests_total"
DURATION = "kontinue_webhook_admission_duration_seconds_count"


def _encode(review: Obj) -> bytes:
    return json.dumps(review).encode()


def _reviews() -> list[tuple[str, bytes]]:
    plain = support.kueue_pod(cluster_queue="cq-plain")  # queue not opted in
    nowhere = copy.deepcopy(plain)
    del nowhere["metadata"]["labels"][keys.KUEUE_CLUSTER_QUEUE_LABEL]  # no queue at all
    opted_out = support.kueue_pod()
    opted_out["metadata"].setdefault("annotations", {})[keys.CHECKPOINT_OPT_OUT_ANNOTATION] = (
        "false"
    )
    misshapen = copy.deepcopy(plain)
    misshapen["spec"]["containers"] = {"name": "not-a-list"}
    restored = support.kueue_pod()
    dry = support.request_for(plain)
    dry["request"]["dryRun"] = True
    forged = support.request_for(plain)
    forged["request"]["dryRun"] = "yes"  # not a boolean: the full path decides
    return [
        ("/mutate", _encode(support.request_for(plain))),
        ("/mutate", _encode(support.request_for(nowhere))),
        ("/mutate", _encode(support.request_for(opted_out))),
        ("/mutate", _encode(dry)),
        ("/mutate", _encode(forged)),
        ("/mutate", _encode(support.request_for(misshapen))),
        ("/mutate", _encode(support.request_for(restored))),
        ("/validate", _encode(support.request_for(plain))),
        ("/mutate", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"'),
        ("/mutate", b"<xml/>"),
    ]


async def _served(
    bundle: certs.Bundle, tel: telemetry.Telemetry
) -> tuple[list[tuple[int, str, bytes]], dict[tuple[str, str, str], float], dict[str, float]]:
    snap = dataclasses.replace(_snapshot(), claims=frozenset({("default", "kontinue")}))
    answers = []
    async with conftest.running_webhook(bundle, snap, tel=tel) as server:
        for path, body in _reviews():
            headers = {"Content-Type": "application/json"}
            async with server.session.post(server.url + path, data=body, headers=headers) as r:
                answers.append((r.status, r.content_type, await r.read()))
        async with server.session.get(server.url + "/metrics") as response:
            text = await response.text()
    assert promlint.problems(text) == []
    counted = {
        (labels["path"], labels["decision"], labels["outcome"]): value
        for name, labels, value in promlint.families(text)[REQUESTS].samples
        if name == REQUESTS
    }
    durations = {
        path: promlint.value(text, DURATION, path=path) for path in ("/mutate", "/validate")
    }
    return answers, counted, durations


async def test_the_fast_path_changes_no_answer_and_no_count(
    bundle: certs.Bundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    traced = telemetry.setup(
        "kontinue-webhook",
        span_processors=[SimpleSpanProcessor(InMemorySpanExporter())],
        environ={},
    )
    full = await _served(bundle, traced)

    fast_answers: list[bytes] = []
    answer = fast_path.answer

    def counting(body: bytes, **kwargs: Any) -> bytes | None:
        given = answer(body, **kwargs)
        if given is not None:
            fast_answers.append(given)
        return given

    monkeypatch.setattr(fast_path, "answer", counting)
    quiet = telemetry.setup("kontinue-webhook", environ={}, record_unexported=False)
    assert not telemetry.records_spans(quiet.tracer)
    fast = await _served(bundle, quiet)

    assert fast == full
    answers, counted, durations = fast
    # plain, nowhere, opted out and the dry run: not opted in, answered by the fast path
    assert len(fast_answers) == 4
    assert all(a[2] in fast_answers for a in answers[:4])
    assert counted[("/mutate", "not_opted_in", "allowed")] == 5  # and the forged dryRun
    assert durations == {"/mutate": 9, "/validate": 1}
