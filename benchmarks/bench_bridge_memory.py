"""Benchmark: the queue bridge's memory and start-up at 10,000 opted-in pods, and what 50,000
pods that are not opted in add (issue 14 targets 1 and 3).

Run: ``python -m benchmarks.bench_bridge_memory`` (``make bench``; 5-10 minutes). Prints
numbers; asserts nothing. ``--pods``, ``--bystanders``, ``--runs`` change the sizes.

The cluster is the API emulator filled as :mod:`benchmarks.bench_bridge` fills it (one Job, its
admitted Workload and five Running pods per Workload; pods plumbed as the webhook plumbs them,
``kontinue.dev/plumbed`` label included), with objects shaped like real ones:

- pods: spec and status of the recorded kubelet pod (tests/fixtures/bridge/kubelet-sigterm-saved
  .json); Jobs and Workloads carry that pod spec as their template (Kueue copies the Job's pod
  template into the Workload's podSet);
- every pod, Job and Workload carries ``metadata.managedFields`` as a real kube-apiserver sends
  it: the 1.8 KB recorded on a real control plane for a Job's pod (tests/fixtures/webhook/
  admission/06-job-suspend-update-pod-by-job-controller.json, ``oldObject``). The emulator writes
  no managedFields, so they are added to its stored objects after the fill.

The bystanders — pods of queues that did not opt in, the same recorded shape, no lineage
annotation, no label — are put straight into the emulator's store sharing one spec and status
(the emulator would otherwise hold 50,000 deep copies; each is still served as its own JSON).

For each phase (without, then with the bystanders) the real bridge starts ``--runs`` times as
its own process (``python -m queue_bridge``, the defaults of the Deployment); each time:
``ready`` = seconds from the process start until ``/readyz`` says leader, ``drained`` = until the
start-up sweep has drained (work-queue depth 0 on ``/metrics``; the first of three zero scrapes
200 ms apart), then ``VmRSS`` once the queue is drained and — with bystanders — once the
leader's one-shot labelling of unlabelled plumbed pods has finished (queue_bridge/adoption.py;
it lists the 50,000 bystanders once, in pages). Medians of the runs are compared with the
targets: RSS < 200 MB at 10,000 opted-in pods and 2,000 Workloads, bystanders add < 10 MB,
drained < 5 s with no key dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

import aiohttp

from benchmarks import bench_bridge
from emulator.apiserver import server
from tests import fixtures

Obj = dict[str, Any]
MANAGED_FIELDS_SOURCE = (
    fixtures.FIXTURES / "webhook/admission/06-job-suspend-update-pod-by-job-controller.json"
)
BYSTANDER_NS = "team-b"


def managed_fields() -> list[Obj]:
    review = json.loads(MANAGED_FIELDS_SOURCE.read_text())
    found: list[Obj] = review["request"]["oldObject"]["metadata"]["managedFields"]
    return found


def _objects(emulated: server.ApiServer, key: tuple[str, str]) -> dict[Any, Obj]:
    """The emulator's stored objects of one resource (its store's own dict: a benchmark's
    shortcut, see the module doc)."""
    found: dict[Any, Obj] = emulated.registry.store._objects[key]  # noqa: SLF001
    return found


def dress(emulated: server.ApiServer, recorded: Obj) -> None:
    """Give every stored pod, Job and Workload the recorded managedFields, and Jobs and
    Workloads the recorded pod spec as their template."""
    fields = managed_fields()
    for key in (("", "pods"), ("batch", "jobs"), ("kueue.x-k8s.io", "workloads")):
        for obj in _objects(emulated, key).values():
            obj["metadata"]["managedFields"] = fields
            if key == ("batch", "jobs"):
                obj["spec"]["template"]["spec"] = recorded["spec"]
            elif key == ("kueue.x-k8s.io", "workloads"):
                for pod_set in obj["spec"]["podSets"]:
                    pod_set["template"]["spec"] = recorded["spec"]


def add_bystanders(emulated: server.ApiServer, recorded: Obj, count: int) -> None:
    """``count`` running pods of a queue that did not opt in (no label, no lineage)."""
    store = emulated.registry.store
    pods = _objects(emulated, ("", "pods"))
    fields = managed_fields()
    status = {**recorded["status"], "phase": "Running"}
    for index in range(count):
        store.rv += 1
        name = f"other-{index:06d}"
        pods[(BYSTANDER_NS, name)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": BYSTANDER_NS,
                "uid": str(uuid.UUID(int=index)),
                "resourceVersion": str(store.rv),
                "creationTimestamp": "2026-12-03T10:00:00Z",
                "labels": {"app": "other", "batch.kubernetes.io/job-name": f"other-{index // 5}"},
                "managedFields": fields,
            },
            "spec": recorded["spec"],
            "status": status,
        }


async def one_start(emulated: server.ApiServer, *, adoption: bool, within: float) -> Obj:
    """Start the bridge, wait until drained (and, with ``adoption``, labelled), measure, stop."""
    with tempfile.TemporaryDirectory(prefix="bench-bridge-mem-") as tmp:
        bridge = bench_bridge.BridgeProcess(emulated, pathlib.Path(tmp))
        started = time.monotonic()
        try:
            ready, drained = await _wait_drained(bridge, started, within=within)
            pid = bridge.process.pid
            result: Obj = {"ready_s": ready, "drained_s": drained}
            result["drained_rss"] = bench_bridge.proc_status(pid)["VmRSS"] / 1024
            if adoption:
                deadline = time.monotonic() + within
                while "labelled pods plumbed before the label" not in bridge.tail():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no labelling line within {within}s: {bridge.tail()}")
                    await asyncio.sleep(0.2)
                result["adopted_s"] = time.monotonic() - started
                await asyncio.sleep(1.0)
            status = bench_bridge.proc_status(pid)
            result["rss"] = status["VmRSS"] / 1024
            result["hwm"] = status["VmHWM"] / 1024
            result["cpu_s"] = bench_bridge.cpu_seconds(pid)
            log = bridge.log.read_text(errors="replace")
            result["dropped"] = log.count("work queue full")
        finally:
            await bridge.stop()
    return result


async def _wait_drained(
    bridge: bench_bridge.BridgeProcess, started: float, *, within: float
) -> tuple[float, float]:
    ready = 0.0
    zero_since: float | None = None
    zeros = 0
    async with aiohttp.ClientSession() as session:
        while time.monotonic() - started < within:
            if bridge.process.poll() is not None:
                raise RuntimeError(f"bridge exited: {bridge.tail()}")
            now = time.monotonic() - started
            if not ready:
                status, text = await bridge._get(session, "/readyz")  # noqa: SLF001
                if status == 200 and "leader" in text:
                    ready = now
            else:
                _, text = await bridge._get(session, "/metrics")  # noqa: SLF001
                depth = _depth(text)
                if depth == 0:
                    zero_since = now if zero_since is None else zero_since
                    zeros += 1
                    if zeros >= 3:
                        return ready, zero_since
                else:
                    zero_since, zeros = None, 0
            await asyncio.sleep(0.05 if not ready else 0.2)
    raise RuntimeError(f"bridge not drained within {within}s: {bridge.tail()}")


def _depth(metrics: str) -> float | None:
    for line in metrics.splitlines():
        if line.startswith("kontinue_bridge_queue_depth"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _median(runs: list[Obj], field: str) -> float:
    return float(statistics.median(float(r[field]) for r in runs))


def _row(label: str, runs: list[Obj]) -> str:
    cells = " ".join(
        f"{r['rss']:.1f}/{r['ready_s']:.2f}/{r['drained_s']:.2f}/{r['dropped']}" for r in runs
    )
    return f"  {label:<28s} {cells}"


async def run(args: argparse.Namespace) -> None:
    for line in bench_bridge.machine():
        print(line)
    workloads = args.pods // bench_bridge.PODS_PER_WORKLOAD
    print(
        f"cluster: {args.pods} opted-in pods, {workloads} Workloads and Jobs (recorded shapes,"
        f" managedFields {len(json.dumps(managed_fields()))} B each); bystanders:"
        f" {args.bystanders} pods not opted in; {args.runs} bridge starts per phase"
    )
    async with server.ApiServer(bookmark_interval=5.0) as emulated:
        filled = bench_bridge.Filled(emulated, recorded=True)
        await filled.setup()
        t = time.perf_counter()
        for index in range(workloads):
            await filled.add(index, per=bench_bridge.PODS_PER_WORKLOAD)
        assert filled.recorded is not None
        dress(emulated, filled.recorded)
        print(f"  filled in {time.perf_counter() - t:.1f}s", file=sys.stderr, flush=True)
        alone = []
        for i in range(args.runs):
            alone.append(await one_start(emulated, adoption=False, within=args.timeout))
            print(f"  run {i + 1} opted-in only: {alone[-1]}", file=sys.stderr, flush=True)
        add_bystanders(emulated, filled.recorded, args.bystanders)
        crowded = []
        for i in range(args.runs):
            crowded.append(await one_start(emulated, adoption=True, within=args.timeout))
            print(f"  run {i + 1} with bystanders: {crowded[-1]}", file=sys.stderr, flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print("each run: VmRSS MB / ready s / drained s / keys dropped")
    print(_row(f"{args.pods} opted-in", alone))
    print(_row(f"+ {args.bystanders} not opted in", crowded))
    print(
        "  with bystanders, labelling done after s: "
        + " ".join(f"{r['adopted_s']:.1f}" for r in crowded)
        + "; VmHWM MB: "
        + " ".join(f"{r['hwm']:.0f}" for r in crowded)
    )
    print()
    rss = _median(alone, "rss")
    delta = _median(crowded, "rss") - rss
    drained = _median(alone, "drained_s")
    dropped = max(r["dropped"] for r in alone + crowded)
    verdict = {True: "met", False: "NOT met"}
    print(
        f"  target 1a: RSS at {args.pods} opted-in pods + {workloads} Workloads ="
        f" {rss:.1f} MB (median of {len(alone)}; target < 200 MB): {verdict[rss < 200]}"
    )
    print(
        f"  target 1b: {args.bystanders} pods not opted in add {delta:+.1f} MB"
        f" (median {_median(crowded, 'rss'):.1f} - {rss:.1f}; target < 10 MB):"
        f" {verdict[delta < 10]}"
    )
    print(
        f"  target 3:  start-up to sweep drained = {drained:.2f} s (median; ready"
        f" {_median(alone, 'ready_s'):.2f} s; keys dropped {dropped}; target < 5 s, none dropped):"
        f" {verdict[drained < 5 and dropped == 0]}"
    )
    sweeps = [r["drained_s"] - r["ready_s"] for r in alone]
    print(
        "             ready -> drained (the sweep, as this process saw it; the emulator in this"
        f" process answers the polls late when busy) = {statistics.median(sweeps):.2f} s"
        " (median of "
        + " / ".join(f"{x:.2f}" for x in sweeps)
        + f"); the bridge's CPU for the whole start {_median(alone, 'cpu_s'):.2f} s (median)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_bridge_memory")
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--bystanders", type=int, default=50000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
