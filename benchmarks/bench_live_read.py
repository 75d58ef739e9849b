"""Benchmark: what the live read (webhook/freshness.py) costs a plumbed pod's CREATE.

Run: ``python -m benchmarks.bench_live_read`` (``make bench``; needs ``KUBEBUILDER_ASSETS``, the
real-control-plane tier's etcd + kube-apiserver v1.36.2: without them it prints so and exits 0).
Prints numbers; asserts nothing.

One real kube-apiserver (tests/realcp/controlplane.py) holds the lineage's 5 Checkpoints, 200
Checkpoints of other lineages in the namespace, and 3 pods of the lineage (labelled as the
webhook labels them). ``webhook.app.create_app`` is served here over plain HTTP (TLS costs the
same in both configurations), with the watch-cache stand-in of bench_webhook.py
(``snapshot()``) and either no live read (``fresh=None``: the cache alone, as before) or a
:class:`webhook.freshness.Reader` over the product's API client (two LISTs per plumbed CREATE:
the lineage's Checkpoints and its pods). One client sends the same review ``--count`` times, one
at a time (latency, not throughput), configurations alternating over ``--rounds`` rounds so the
machine's load falls on both alike. Bodies: the recorded job-controller pod CREATE, opted in (a
restore is planned: the read happens) and not opted in (no read).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from typing import Any

import aiohttp

from benchmarks import bench_webhook, on_realcp
from benchmarks.on_realcp import sample as _sample
from kontinue import keys
from kontinue.kube import api, client, resources
from kontinue.models import checkpoint
from tests.realcp import controlplane
from webhook import app as app_module
from webhook import freshness, settings

LINEAGE = checkpoint.Lineage(
    namespace="default", owner_kind="Job", owner_name="train-a", owner_uid="uid-restore"
)


async def _populate(admin: api.Api) -> None:
    for cp in bench_webhook.snapshot().checkpoints_of(LINEAGE):
        body: dict[str, Any] = cp.model_dump(mode="json", by_alias=True, exclude_none=True)
        body.update(apiVersion=resources.CHECKPOINTS.api_version, kind="Checkpoint")
        body["metadata"]["labels"] = {
            keys.CHECKPOINT_OWNER_UID_LABEL: LINEAGE.owner_uid,
            keys.CHECKPOINT_LINEAGE_LABEL: LINEAGE.hash,
        }
        body.pop("status", None)
        await admin.create(resources.CHECKPOINTS, body, namespace="default")
    for i in range(200):  # other lineages in the same namespace: what a label selector skips
        other = LINEAGE.model_copy(update={"owner_name": f"other-{i}", "owner_uid": f"uid-o{i}"})
        await admin.create(
            resources.CHECKPOINTS,
            {
                "apiVersion": resources.CHECKPOINTS.api_version,
                "kind": "Checkpoint",
                "metadata": {
                    "name": f"other-{i}",
                    "labels": {keys.CHECKPOINT_OWNER_UID_LABEL: other.owner_uid},
                },
                "spec": {
                    "lineage": other.model_dump(by_alias=True),
                    "trigger": {
                        "source": "Kueue",
                        "reason": "Preempted",
                        "time": "2026-12-02T10:00:00Z",
                    },
                    "members": [{"podName": "p", "podUid": f"u{i}", "index": 0}],
                },
            },
            namespace="default",
        )
    # no controller manager here: the ServiceAccount admission plugin needs `default` itself
    await admin.create(
        resources.Resource("", "v1", "serviceaccounts", "ServiceAccount"),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        namespace="default",
    )
    for i in range(3):
        await admin.create(
            resources.PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"train-a-{i}",
                    "labels": {keys.CHECKPOINT_LINEAGE_LABEL: LINEAGE.hash},
                },
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
            namespace="default",
        )


async def _serve(fresh: freshness.Reader | None) -> tuple[Any, str]:
    application = app_module.create_app(
        settings.Settings(), state=bench_webhook.snapshot(), fresh=fresh
    )
    runner = app_module.runner(application)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    site = app_module.site(runner, ssl_context=None, sock=sock)
    await site.start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}/mutate"


async def _latencies(url: str, body: bytes, count: int) -> list[float]:
    found = []
    async with aiohttp.ClientSession() as session:
        for _ in range(count):
            started = time.perf_counter()
            async with session.post(
                url, data=body, headers={"Content-Type": "application/json"}
            ) as answer:
                await answer.read()
                assert answer.status == 200, answer.status
            found.append((time.perf_counter() - started) * 1000)
    return found


def _summary(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"p50 {statistics.median(ordered):6.2f} ms  p99 {p99:6.2f} ms  "
        f"mean {statistics.fmean(ordered):6.2f} ms  (n={len(ordered)})"
    )


async def run(args: argparse.Namespace) -> None:
    plane = on_realcp.start_with_crds()
    try:
        api_client = await client.api_client_from_dict(plane.kubeconfig())
        try:
            admin = api.Api(api_client, field_manager="bench")
            await _populate(admin)
            bodies = bench_webhook.bodies()
            reader = freshness.Reader(admin, seconds=1.0, pods=True)
            results: dict[tuple[str, str], list[float]] = {}
            servers = {}
            for name, fresh in (("cache only", None), ("live read", reader)):
                servers[name] = await _serve(fresh)
            for _ in range(args.rounds):
                for name, (_, url) in servers.items():
                    for scenario in ("restore", "not-opted-in"):
                        results.setdefault((name, scenario), []).extend(
                            await _latencies(url, bodies[scenario], args.count)
                        )
            for runner, _ in servers.values():
                await runner.cleanup()
            lists, cached_lists, pod_lists = [], [], []
            selector = {keys.CHECKPOINT_OWNER_UID_LABEL: LINEAGE.owner_uid}
            for _ in range(args.count):
                started = time.perf_counter()
                await reader.read(LINEAGE)
                lists.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                await reader.read_pods(LINEAGE)
                pod_lists.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()  # for comparison: not a consistent read
                await admin.list(
                    resources.CHECKPOINTS,
                    namespace="default",
                    label_selector=selector,
                    resource_version="0",
                )
                cached_lists.append((time.perf_counter() - started) * 1000)
            # the apiserver's own account of where its consistent LISTs were served
            metrics = plane.metrics()
            from_cache = _sample(metrics, "apiserver_watch_cache_consistent_read_total")
            from_etcd = _sample(metrics, "etcd_requests_total", operation="list")
        finally:
            await api_client.close()
    finally:
        plane.stop()
    version = controlplane.etcd_version(plane.assets / "etcd")
    load = os.getloadavg()
    print(
        f"/mutate latency, one request at a time, {args.rounds} rounds x {args.count} each; "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (nproc {os.cpu_count()})"
    )
    print(
        f"  etcd {'.'.join(map(str, version))}: consistent LISTs of Checkpoints served "
        f"{from_cache:.0f} from the watch cache, {from_etcd:.0f} from etcd"
    )
    for (name, scenario), values in results.items():
        print(f"  {name:10}  {scenario:13}  {_summary(values)}")
    print(f"  the Checkpoint LIST alone (5 of 205 selected)  {_summary(lists)}")
    print(f"  the pod LIST alone (Failed, labelled: 0 here)   {_summary(pod_lists)}")
    print(f"  the same Checkpoint LIST, resourceVersion=0     {_summary(cached_lists)}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_live_read")
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    on_realcp.main(parser, run)


if __name__ == "__main__":
    main()
