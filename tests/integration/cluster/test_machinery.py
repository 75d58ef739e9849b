"""The controllers' plumbing: per-key serialization of the work queue, the informer's
write-through, and a shutdown that survives a swallowed cancellation."""

from __future__ import annotations

import asyncio

from emulator import informer, workqueue
from emulator.apiserver import server
from kontinue.kube import api as kube_api
from kontinue.kube import resources


async def test_a_key_is_never_processed_twice_at_once_and_never_lost() -> None:
    running: set[str] = set()
    overlaps: list[str] = []
    seen: list[str] = []
    gate = asyncio.Event()

    async def handle(key: str) -> None:
        if key in running:
            overlaps.append(key)
        running.add(key)
        seen.append(key)
        if len(seen) == 1:
            await gate.wait()  # "a" stays busy while it is added again
        running.discard(key)

    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue(handle, workers=3)
    queue.start()
    try:
        queue.add("a")
        await asyncio.sleep(0.01)
        queue.add("a")
        queue.add("a")  # deduplicated: one more run, after the first
        queue.add("b")
        await asyncio.sleep(0.01)
        assert seen == ["a", "b"]
        gate.set()
        for _ in range(100):
            if queue.idle:
                break
            await asyncio.sleep(0.01)
        assert seen == ["a", "b", "a"]
        assert overlaps == []
    finally:
        await queue.stop()


async def test_a_failing_handler_is_retried() -> None:
    calls: list[int] = []

    async def handle(key: int) -> None:
        calls.append(key)
        if len(calls) == 1:
            raise RuntimeError("transient")

    queue: workqueue.WorkQueue[int] = workqueue.WorkQueue(handle, retry_seconds=0.01)
    queue.start()
    try:
        queue.add(7)
        for _ in range(100):
            if len(calls) == 2:
                break
            await asyncio.sleep(0.01)
        assert calls == [7, 7]
    finally:
        await queue.stop()


async def test_informer_write_through_ignores_stale_copies_and_deleted_objects() -> None:
    async with server.ApiServer() as api:
        admin = api.client()
        config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
        cms = resources.Resource("", "v1", "configmaps", "ConfigMap")
        created = await admin.create(cms, config, namespace="default")
        changes: list[str] = []
        inf = informer.Informer(admin, cms, on_change=lambda kind, _obj: changes.append(kind))
        tasks = await informer.start([inf])
        try:
            newer = await admin.patch(
                cms,
                "c",
                {"data": {"k": "v"}},
                content_type=kube_api.MERGE_PATCH,
                namespace="default",
            )
            inf.observe(newer)
            inf.observe(created)  # older: ignored
            held = inf.get("c", "default")
            assert held is not None
            assert held["data"] == {"k": "v"}
            await admin.delete(cms, "c", namespace="default")
            for _ in range(100):
                if inf.get("c", "default") is None:
                    break
                await asyncio.sleep(0.01)
            inf.observe(newer)  # a write-through arriving after the deletion: ignored
            assert inf.get("c", "default") is None
            assert changes[0] == "ADDED"
            assert changes[-1] == "DELETED"
        finally:
            await informer.stop(tasks)


async def test_stop_recancels_a_task_that_swallowed_its_cancellation() -> None:
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            swallowed.set()  # what 3.11's wait_for can do by accident
        await asyncio.sleep(10)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(informer.stop([task]), timeout=5)
    assert swallowed.is_set()
    assert task.cancelled()
