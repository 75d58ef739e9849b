"""queue_bridge/outbox.py: Events posted after the urgent keys, several at once, and a quiet stop.

The recorder here is a real coroutine that takes a while per POST (as a busy apiserver does) and
counts how many are in flight; the urgency is the bridge's real work queue.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from kontinue.kube import events
from queue_bridge import outbox, queueing


class SlowRecorder:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.posted: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def record(
        self, obj: dict[str, Any], *, reason: str, message: str, type_: events.EventType
    ) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.seconds)
            self.posted.append(message)
        finally:
            self.in_flight -= 1


def _obj(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "uid": f"u{i}"}}


async def test_a_batch_is_posted_several_at_once_and_every_event_arrives() -> None:
    recorder = SlowRecorder(0.02)
    box = outbox.EventOutbox(recorder, queueing.WorkQueue[str]())
    for i in range(40):
        box.add(_obj(i), "CheckpointStarted", f"m{i}", "Normal")
    await asyncio.wait_for(box.sent(), 5)
    assert sorted(recorder.posted) == sorted(f"m{i}" for i in range(40))
    assert recorder.most_in_flight == outbox.IN_FLIGHT  # one at a time took 40 x 20 ms


async def test_events_wait_for_the_keys_that_create_checkpoints() -> None:
    queue = queueing.WorkQueue[str](urgent=lambda key: key.startswith("urgent"))
    queue.add("urgent-workload")
    recorder = SlowRecorder(0)
    box = outbox.EventOutbox(recorder, queue)
    box.add(_obj(0), "CheckpointStarted", "m0", "Normal")
    await asyncio.sleep(0.2)
    assert recorder.posted == []  # the urgent key is still waiting
    await asyncio.wait_for(box.sent(), outbox.DEFER_SECONDS + 2)  # at most DEFER_SECONDS later
    assert recorder.posted == ["m0"]


async def test_a_stop_drops_the_backlog_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    recorder = SlowRecorder(0.05)
    box = outbox.EventOutbox(recorder, queueing.WorkQueue[str]())
    for i in range(500):
        box.add(_obj(i), "CheckpointStarted", f"m{i}", "Normal")
    with caplog.at_level(logging.WARNING, logger="kontinue.bridge"):
        dropped = await box.close(0.2)
    assert 0 < dropped < 500
    assert len(recorder.posted) + dropped + recorder.in_flight >= 500 - outbox.IN_FLIGHT
    assert recorder.in_flight == 0  # nothing left running against a closing client
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        f"{dropped} Events not recorded: the bridge stopped leading first"
    ]
    await asyncio.sleep(0.2)
    assert len(recorder.posted) + dropped <= 500  # the sender is gone: nothing posted after


async def test_a_stop_with_nothing_queued_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    box = outbox.EventOutbox(SlowRecorder(0), queueing.WorkQueue[str]())
    with caplog.at_level(logging.WARNING, logger="kontinue.bridge"):
        assert await box.close(0.1) == 0
    assert caplog.records == []
