"""webhook/events.py against the API emulator over real HTTP: many occurrences of one Event
become one object whose ``count`` adds up, written at flush time, never per admission."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from emulator.apiserver import server
from kontinue import keys
from kontinue.kube import api, client, resources
from webhook import events

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "namespace": "default", "uid": "job-uid-1"},
}


@pytest.fixture
async def kube() -> AsyncIterator[api.Api]:
    async with server.ApiServer() as emulated:
        api_client = await client.api_client_from_dict(emulated.kubeconfig("admin"))
        try:
            yield api.Api(api_client, field_manager="test")
        finally:
            await api_client.close()


async def _events(kube: api.Api) -> list[dict[str, object]]:
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
