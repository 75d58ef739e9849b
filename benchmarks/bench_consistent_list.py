"""Benchmark: where a consistent LIST of Checkpoints spends its time on a real kube-apiserver.

Run: ``python -m benchmarks.bench_consistent_list`` (needs ``KUBEBUILDER_ASSETS``; without it
prints so and exits 0). Prints numbers; asserts nothing.

The webhook's live read (webhook/freshness.py) is one LIST of a lineage's Checkpoints by label,
without a ``resourceVersion``: a consistent read. Three namespaces hold 1, 50 and 200
Checkpoints, one of them the lineage's. From one client (the product's, kubernetes-asyncio over
HTTPS), one at a time, each LIST is timed:

- ``consistent``: no ``resourceVersion`` (the live read);
- ``consistent, no selector``: the same, every Checkpoint returned (what the selector saves);
- ``rv=0``: served from the watch cache as it is, not a consistent read (not fresh);
- ``NotOlderThan <fresh rv>``: ``resourceVersion=R&resourceVersionMatch=NotOlderThan`` where R
  is the revision of a ConfigMap written just before (what a client would have to ask for to
  make a cache-served read fresh itself; a few only: it can wait 3 s);
- ``consistent, rev moved``: the live read right after a write elsewhere (a ConfigMap, not
  timed) moved etcd's revision past the Checkpoints' watch cache, as on a busy cluster: served
  from the cache, it waits for a progress notification, which kube-apiserver requests at most
  every 100 ms (``staging/src/k8s.io/apiserver/pkg/storage/cacher/progress/watch_progress.go``
  ``progressRequestPeriod``); back to back, and 150 ms apart.

Then the apiserver's own account from its /metrics: how many consistent LISTs its watch cache
served (``apiserver_watch_cache_consistent_read_total``), how many LISTs went to etcd and what
they cost there (``etcd_request_duration_seconds``), how many objects it fetched and decoded to
answer them (``apiserver_storage_list_fetched_objects_total``) and what the LISTs cost in all
(``apiserver_request_duration_seconds``). Run once with each etcd to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks import on_realcp
from benchmarks.on_realcp import sample as _sample
from kontinue import keys
from kontinue.kube import api, client, errors, resources
from tests.realcp import controlplane

SIZES = (1, 50, 200)
OWNER = "uid-mine"
NAMESPACES = resources.Resource("", "v1", "namespaces", "Namespace", namespaced=False)
CONFIGMAPS = resources.Resource("", "v1", "configmaps", "ConfigMap")


def _checkpoint(namespace: str, index: int) -> dict[str, Any]:
    owner = OWNER if index == 0 else f"uid-o{index}"
    return {
        "apiVersion": resources.CHECKPOINTS.api_version,
        "kind": "Checkpoint",
        "metadata": {"name": f"cp-{index}", "labels": {keys.CHECKPOINT_OWNER_UID_LABEL: owner}},
        "spec": {
            "lineage": {
                "namespace": namespace,
                "ownerKind": "Job",
                "ownerName": f"job-{index}",
                "ownerUid": owner,
            },
            "trigger": {"source": "Kueue", "reason": "Preempted", "time": "2026-12-02T10:00:00Z"},
            "members": [{"podName": "p", "podUid": f"u{index}", "index": 0}],
        },
    }


async def _timed(call: Callable[[], Awaitable[object]], count: int) -> str:
    found: list[float] = []
    failed = 0
    for _ in range(count):
        started = time.perf_counter()
        try:
            await call()
        except errors.ApiError:
            failed += 1
        found.append((time.perf_counter() - started) * 1000)
    return _summary(found, failed)


async def _once(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


def _summary(found: list[float], failed: int = 0) -> str:
    found = sorted(found)
    p90 = found[min(len(found) - 1, int(len(found) * 0.9))]
    note = f"  {failed} failed" if failed else ""
    return (
        f"p50 {statistics.median(found):7.2f} ms  p90 {p90:7.2f} ms  "
        f"mean {statistics.fmean(found):7.2f} ms  (n={len(found)}){note}"
    )


async def _measure(admin: api.Api, count: int) -> None:
    selector = {keys.CHECKPOINT_OWNER_UID_LABEL: OWNER}
    for size in SIZES:
        namespace = f"bench-{size}"
        await admin.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        for index in range(size):
            await admin.create(
                resources.CHECKPOINTS, _checkpoint(namespace, index), namespace=namespace
            )
    for size in SIZES:
        namespace = f"bench-{size}"

        async def consistent(ns: str = namespace) -> object:
            return await admin.list(resources.CHECKPOINTS, namespace=ns, label_selector=selector)

        async def everything(ns: str = namespace) -> object:
            return await admin.list(resources.CHECKPOINTS, namespace=ns)

        async def cached(ns: str = namespace) -> object:
            return await admin.list(
                resources.CHECKPOINTS, namespace=ns, label_selector=selector, resource_version="0"
            )

        async def not_older(ns: str = namespace) -> object:
            written = await admin.create(
                CONFIGMAPS,
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "tick-"}},
                namespace=ns,
            )
            fresh = str(written["metadata"]["resourceVersion"])
            path = resources.CHECKPOINTS.path(namespace=ns)
            query = [
                ("labelSelector", f"{keys.CHECKPOINT_OWNER_UID_LABEL}={OWNER}"),
                ("resourceVersion", fresh),
                ("resourceVersionMatch", "NotOlderThan"),
            ]
            return await admin._call("GET", path, query=query)

        for name, call, n in (
            ("consistent (the live read)", consistent, count),
            ("consistent, no selector", everything, count),
            ("rv=0 (not fresh)", cached, count),
            ("NotOlderThan <fresh rv>", not_older, max(3, count // 20)),
        ):
            print(f"  {size:3} Checkpoints  {name:27} {await _timed(call, n)}", flush=True)
        for name, pause in (("consistent, rev moved", 0.0), ("consistent, rev moved, 150ms", 0.15)):
            took: list[float] = []
            for _ in range(max(3, count // 5)):
                await asyncio.sleep(pause)
                await admin.create(
                    CONFIGMAPS,
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "t-"}},
                    namespace=namespace,
                )  # not timed: only moves etcd's revision past the Checkpoints' watch cache
                took.append(await _once(consistent))
            print(f"  {size:3} Checkpoints  {name:27} {_summary(took)}", flush=True)


async def run(args: argparse.Namespace) -> None:
    plane = on_realcp.start_with_crds()
    try:
        version = controlplane.etcd_version(plane.assets / "etcd")
        print(
            f"etcd {'.'.join(map(str, version))} (kube-apiserver serves consistent LISTs from its "
            f"watch cache: {controlplane.serves_consistent_lists(version)})"
        )
        api_client = await client.api_client_from_dict(plane.kubeconfig())
        try:
            await _measure(api.Api(api_client, field_manager="bench"), args.count)
        finally:
            await api_client.close()
        metrics = plane.metrics()
    finally:
        plane.stop()
    lists = {"verb": "LIST", "scope": "namespace"}
    request_sum = _sample(metrics, "apiserver_request_duration_seconds_sum", **lists)
    request_count = _sample(metrics, "apiserver_request_duration_seconds_count", **lists)
    etcd_sum = _sample(metrics, "etcd_request_duration_seconds_sum", operation="list")
    etcd_count = _sample(metrics, "etcd_request_duration_seconds_count", operation="list")
    get_sum = _sample(metrics, "etcd_request_duration_seconds_sum", operation="get")
    get_count = _sample(metrics, "etcd_request_duration_seconds_count", operation="get")
    print("the apiserver's account (/metrics, Checkpoints, the whole run):")
    print(
        f"  LISTs answered {request_count:.0f}, "
        f"mean {1000 * request_sum / max(request_count, 1):.2f} ms"
    )
    print(
        "  consistent LISTs served from the watch cache "
        f"{_sample(metrics, 'apiserver_watch_cache_consistent_read_total', success='true'):.0f} "
        "(of which fell back to etcd: "
        f"{_sample(metrics, 'apiserver_watch_cache_consistent_read_total', fallback='true'):.0f})"
    )
    etcd_mean = 1000 * etcd_sum / max(etcd_count, 1)
    get_mean = 1000 * get_sum / max(get_count, 1)
    print(
        f"  etcd range reads: LIST {etcd_count:.0f} (mean {etcd_mean:.2f} ms), "
        f"GET {get_count:.0f} (mean {get_mean:.2f} ms)"
    )
    print(
        "  objects fetched from etcd and decoded for LISTs "
        f"{_sample(metrics, 'apiserver_storage_list_fetched_objects_total'):.0f}, returned "
        f"{_sample(metrics, 'apiserver_storage_list_returned_objects_total'):.0f}"
    )
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (nproc {os.cpu_count()})")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_consistent_list")
    parser.add_argument("--count", type=int, default=100)
    on_realcp.main(parser, run)


if __name__ == "__main__":
    main()
