"""The bridge's work queue: de-duplication, per-key serialization, retries, bounds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import TypeVar

import pytest

from queue_bridge import queueing

K = TypeVar("K", bound=Hashable)


@contextlib.asynccontextmanager
async def running(
    queue: queueing.WorkQueue[K], handler: Callable[[K], Awaitable[None]], workers: int = 4
) -> AsyncIterator[None]:
    task = asyncio.create_task(queue.run(handler, workers=workers))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_key_added_many_times_while_waiting_runs_once() -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    seen: list[str] = []

    async def handle(key: str) -> None:
        seen.append(key)

    for _ in range(50):
        queue.add("ns/a")
    queue.add("ns/b")
    assert len(queue) == 2
    async with running(queue, handle):
        await asyncio.wait_for(queue.join(), 5)
    assert sorted(seen) == ["ns/a", "ns/b"]


async def test_a_key_is_never_processed_concurrently_and_a_late_add_reruns_it() -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    active = 0
    peak = 0
    runs = 0
    started = asyncio.Event()
    release = asyncio.Event()

    async def handle(key: str) -> None:
        nonlocal active, peak, runs
        active += 1
        peak = max(peak, active)
        runs += 1
        started.set()
        await release.wait()
        active -= 1

    queue.add("k")
    async with running(queue, handle, workers=4):
        await asyncio.wait_for(started.wait(), 5)
        for _ in range(10):  # events arriving while the key is being handled
            queue.add("k")
        release.set()
        await asyncio.wait_for(queue.join(), 5)
    assert peak == 1
    assert runs == 2  # the in-flight run, then exactly one more for all the late events


async def test_a_failing_key_is_retried_with_growing_backoff_without_blocking_others() -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue(base_delay=0.01, max_delay=0.04)
    attempts: dict[str, int] = {"bad": 0, "good": 0}

    async def handle(key: str) -> None:
        attempts[key] += 1
        if key == "bad" and attempts[key] < 4:
            raise RuntimeError("API said 500")

    queue.add("bad")
    queue.add("good")
    async with running(queue, handle, workers=1):
        await asyncio.wait_for(queue.join(), 5)
    assert attempts == {"bad": 4, "good": 1}
    assert queue.backoff("bad") == 0.01  # success resets the failure count


def test_backoff_is_capped() -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue(base_delay=1.0, max_delay=8.0)
    queue._failures["k"] = 10
    assert queue.backoff("k") == 8.0


async def test_a_full_queue_drops_and_counts_instead_of_growing() -> None:
    queue: queueing.WorkQueue[int] = queueing.WorkQueue(max_keys=3)
    for key in range(5):
        queue.add(key)
    assert len(queue) == 3
    assert queue.dropped == 2


async def test_a_full_queue_never_drops_the_same_tail_forever(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A resync adds every key in the same order into a queue too small for them: the keys
    past the bound must still run (issue: a pod that ended while the bridge was down was never
    released because its key sorted after more than ``max_keys`` others)."""
    queue: queueing.WorkQueue[int] = queueing.WorkQueue(max_keys=3)
    every_key = list(range(10))
    queue.set_sweep(lambda: iter(every_key))
    seen: list[int] = []

    async def handle(key: int) -> None:
        seen.append(key)

    for key in every_key:  # what a resync does
        queue.add(key)
    assert queue.dropped == 7
    async with running(queue, handle, workers=2):
        await asyncio.wait_for(queue.join(), 5)
    assert set(seen) == set(every_key)
    full = [r.getMessage() for r in caplog.records if "work queue full" in r.getMessage()]
    assert full == ["work queue full: 7 adds dropped; sweeping every key again"]


async def test_a_sweep_adds_in_batches_and_never_drops() -> None:
    queue: queueing.WorkQueue[int] = queueing.WorkQueue(max_keys=4)
    queue.set_sweep(lambda: iter(range(25)))
    seen: list[int] = []
    peak = 0

    async def handle(key: int) -> None:
        nonlocal peak
        peak = max(peak, len(queue))
        seen.append(key)
        await asyncio.sleep(0)

    queue.sweep()
    assert len(queue) == 4
    async with running(queue, handle):
        await asyncio.wait_for(queue.join(), 5)
    assert sorted(seen) == list(range(25))
    assert queue.dropped == 0
    assert peak <= 4


@pytest.mark.parametrize("delay", [0.0, 0.02])
async def test_add_after_runs_the_key_later(delay: float) -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    seen: list[str] = []

    async def handle(key: str) -> None:
        seen.append(key)

    async with running(queue, handle):
        queue.add_after("later", delay)
        await asyncio.wait_for(queue.join(), 5)
    assert seen == ["later"]


async def test_urgent_keys_run_first_in_their_order_and_every_key_still_runs() -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue(urgent=lambda k: k.startswith("!"))
    for key in ["a", "!x", "b", "!y", "c", "!x", "b"]:
        queue.add(key)
    assert len(queue) == 5  # de-duplicated across both groups
    seen: list[str] = []

    async def handle(key: str) -> None:
        seen.append(key)
        if key == "!y":
            queue.add("!z")  # an urgent key added later overtakes the waiting others

    async with running(queue, handle, workers=1):
        await asyncio.wait_for(queue.join(), 5)
    assert seen == ["!x", "!y", "!z", "a", "b", "c"]


async def test_urgent_drained_waits_for_urgent_keys_but_no_longer_than_told() -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue(urgent=lambda k: k.startswith("!"))
    queue.add("plain")
    await asyncio.wait_for(queue.urgent_drained(60), 5)  # nothing urgent: at once
    queue.add("!evict")
    waiter = asyncio.ensure_future(queue.urgent_drained(60))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    release = asyncio.Event()

    async def handle(key: str) -> None:
        await release.wait()

    async with running(queue, handle, workers=1):
        await asyncio.wait_for(waiter, 5)  # taken by a worker: no urgent key waits any more
        release.set()
        await asyncio.wait_for(queue.join(), 5)
    queue.add("!again")
    await asyncio.wait_for(queue.urgent_drained(0.05), 5)  # bounded: returns though one waits
    assert len(queue) == 1


async def test_a_worker_lets_the_event_loop_run_between_keys_that_never_await() -> None:
    """A new leader's sweep is thousands of keys decided from the caches without an await: the
    health probes, watches and Lease renewal must still run while it drains."""
    queue: queueing.WorkQueue[int] = queueing.WorkQueue()
    handled: list[int] = []
    probe_saw: list[int] = []

    def probe() -> None:
        probe_saw.append(len(handled))

    async def handle(key: int) -> None:  # decides without awaiting, like a cached no-op
        handled.append(key)
        if key == 10:
            asyncio.get_running_loop().call_soon(probe)

    for key in range(2000):
        queue.add(key)
    async with running(queue, handle, workers=4):
        await asyncio.wait_for(queue.join(), 10)
    assert len(handled) == 2000
    (when,) = probe_saw
    assert when <= 20, f"the loop ran other work only after {when} keys"
