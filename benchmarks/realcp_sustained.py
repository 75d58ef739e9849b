"""Issue 14 target 2 against a real kube-apiserver: the bridge's rounds and the sustained phase of
:mod:`benchmarks.bench_bridge`, with the cluster served by the real control plane of the
``tests/realcp`` tier (kube-apiserver and etcd from ``KUBEBUILDER_ASSETS``) instead of the
emulator in the benchmark's own process, and the CPU of each process measured apart.

Run: ``KUBEBUILDER_ASSETS=... python -m benchmarks.realcp_sustained`` (not a ``bench_*`` script:
``make bench`` does not need the assets). Prints numbers; asserts nothing.

The same cluster as ``bench_bridge`` (one Job, its admitted Workload and five Running pods of the
recorded kubelet shape per Workload), written through the product's own client over HTTPS
(tests/realcp/emulated.py ``RealApi``): the Workload writes as Kueue's ServiceAccount
(impersonated, bound to cluster-admin as the tier binds emulated components), the pods as the
job controller's, their Running status by the admin (there are no Nodes for a kubelet
identity). The bridge runs as its own process with the admin's kubeconfig (RBAC is not what is
measured). On one machine the apiserver, etcd, the bridge and this process
share its cores: the figures say which of them spends what per eviction, which is what binds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import tempfile
import time
from typing import Any

from benchmarks import bench_bridge
from tests.realcp import controlplane, emulated

Obj = dict[str, Any]


class _Api(emulated.RealApi):
    """``RealApi`` whose node identities write as the admin (no Node objects exist here)."""

    def client(self, user: str = "admin", *, groups: tuple[str, ...] | None = None) -> Any:
        return super().client("admin" if user.startswith("system:node:") else user)


class _Plane:
    """What :class:`benchmarks.bench_bridge.BridgeProcess` needs: a kubeconfig (the admin's)."""

    def __init__(self, plane: controlplane.ControlPlane) -> None:
        self.plane = plane

    def kubeconfig(self, user: str) -> dict[str, Any]:
        return self.plane.kubeconfig("admin")


def _cpu(plane: controlplane.ControlPlane) -> dict[str, float]:
    return {
        name: bench_bridge.cpu_seconds(process.popen.pid)
        for name, process in plane.processes.items()
    }


async def _fill(filled: bench_bridge.Filled, workloads: int, *, parallel: int) -> None:
    limit = asyncio.Semaphore(parallel)

    async def one(index: int) -> None:
        async with limit:
            await filled.add(index, per=bench_bridge.PODS_PER_WORKLOAD)

    await asyncio.gather(*(one(i) for i in range(workloads)))


async def run(args: argparse.Namespace) -> None:
    for line in bench_bridge.machine():
        print(line)
    assets = controlplane.find_assets()
    plane = controlplane.start(assets)
    try:
        for path in bench_bridge.CRDS:
            plane.kubectl("apply", "--server-side", "-f", str(path))
        plane.wait_established(
            [
                f"{p.name.split('_', 1)[1].removesuffix('.yaml')}.{p.name.split('_', 1)[0]}"
                for p in bench_bridge.CRDS
            ]
        )
        real = await _Api(plane, [bench_bridge.KUEUE_USER, bench_bridge.JOB_CONTROLLER]).open()
        try:
            await _measure(plane, real, args)
        finally:
            await real.close()
    finally:
        plane.stop()
        controlplane.remove(plane)


async def _measure(
    plane: controlplane.ControlPlane, real: emulated.RealApi, args: argparse.Namespace
) -> None:
    admin = real.client("admin")._api  # noqa: SLF001
    for user in (bench_bridge.KUEUE_USER, bench_bridge.JOB_CONTROLLER):
        await emulated.grant(admin, user)
    filled = bench_bridge.Filled(real, recorded=True)  # type: ignore[arg-type]
    await filled.setup()
    # no controller-manager here: the ServiceAccount admission wants the namespace's default one
    plane.kubectl("create", "serviceaccount", "default", "--namespace", bench_bridge.NS)
    workloads = args.pods // bench_bridge.PODS_PER_WORKLOAD
    started = time.perf_counter()
    await _fill(filled, workloads, parallel=args.parallel)
    print(f"  filled {args.pods} pods in {time.perf_counter() - started:.1f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-realcp-") as tmp:
        bridge = bench_bridge.BridgeProcess(_Plane(plane), pathlib.Path(tmp))  # type: ignore[arg-type]
        try:
            ready, idle = await bridge.wait_idle(within=600)
            pid = bridge.process.pid
            print(
                f"  bridge ready {ready:.1f} s, drained {idle:.1f} s,"
                f" start-up CPU {bench_bridge.cpu_seconds(pid):.2f} s",
                flush=True,
            )
            await _phases(filled, plane, pid, bridge.url, args)
        finally:
            await bridge.stop()


async def _phases(
    filled: bench_bridge.Filled,
    plane: controlplane.ControlPlane,
    pid: int,
    url: str,
    args: argparse.Namespace,
) -> None:
    names = sorted(filled.admitted)
    watcher = bench_bridge.Watcher(filled.admin)
    await watcher.start()
    written: dict[str, float] = {}
    try:
        for number in range(args.rounds):
            burst = names[args.evictions : args.evictions + args.burst]
            spread = names[: args.evictions]
            names = names[args.evictions + args.burst :]
            before, own = _cpu(plane), time.process_time()
            one = await bench_bridge._round(  # noqa: SLF001
                filled, pid, url, watcher, written, spread, burst, args.interval
            )
            used = {k: v - before[k] for k, v in _cpu(plane).items()}
            n = len(spread) + len(burst)
            p50, p99 = (bench_bridge._pct(one["spread"], q) for q in (0.5, 0.99))  # noqa: SLF001
            print(
                f"  round {number + 1} ({time.strftime('%H:%M:%S', time.gmtime())} UTC, load"
                f" {os.getloadavg()[0]:.1f}): spread p50 {p50:.1f} p99 {p99:.1f} ms;"
                f" burst of {len(burst)}: last Checkpoint {one['burst_all_ms']:.0f} ms;"
                f" bridge CPU per eviction spread {one['spread_all_cpu_ms']:.1f} ms (incl. 1 s"
                f" after), burst {one['burst_cpu_ms']:.1f} ms; per eviction of the round:"
                + "".join(f" {k} {v * 1000 / n:.1f} ms" for k, v in used.items())
                + f", this process {(time.process_time() - own) * 1000 / n:.1f} ms",
                flush=True,
            )
        if args.sustain_runs:
            before, started = _cpu(plane), time.perf_counter()
            runs = await bench_bridge._sustained(  # noqa: SLF001
                filled,
                pid,
                watcher,
                names,
                argparse.Namespace(
                    rate=args.rate, sustain=args.sustain, sustain_runs=args.sustain_runs
                ),
            )
            used = {k: v - before[k] for k, v in _cpu(plane).items()}
            total = max(1, sum(one["n"] for one in runs))
            for number, one in enumerate(runs):
                ms = one["ms"]
                print(
                    f"  sustained run {number + 1}: {one['n']} evictions in"
                    f" {one['offered_s']:.1f} s ({one['n'] / one['offered_s']:.0f}/s offered,"
                    f" {one['starved']} ticks starved), p50"
                    f" {bench_bridge._pct(ms, 0.5) if ms else 0:.0f} ms, p99"  # noqa: SLF001
                    f" {bench_bridge._pct(ms, 0.99) if ms else 0:.0f} ms,"  # noqa: SLF001
                    f" {one['missing']} missing; CPU per eviction: bridge {one['cpu_ms']:.1f} ms,"
                    f" this process (writes, watch) {one['emulator_cpu_ms']:.1f} ms",
                    flush=True,
                )
            seconds = time.perf_counter() - started
            print(
                f"  sustained phase ({time.strftime('%H:%M:%S', time.gmtime())} UTC, load"
                f" {os.getloadavg()[0]:.1f}), {seconds:.0f} s incl. settling: CPU per offered"
                " eviction"
                + "".join(f", {k} {v * 1000 / total:.1f} ms" for k, v in used.items())
                + "; cores busy"
                + "".join(f", {k} {v / seconds:.2f}" for k, v in used.items()),
                flush=True,
            )
            rate = statistics.median(one["n"] / one["offered_s"] for one in runs)
            p99 = statistics.median(
                bench_bridge._pct(one["ms"], 0.99) if one["ms"] else float("nan")  # noqa: SLF001
                for one in runs
            )
            print(
                f"  sustained against a real apiserver: median of {len(runs)}: {rate:.0f}/s"
                f" offered, p99 {p99:.0f} ms (target: 200/s for 30 s, p99 < 100 ms):"
                f" {'met' if rate >= 196 and p99 < 100 else 'NOT met'}"
            )
    finally:
        if watcher.task is not None and watcher.task.done() and not watcher.task.cancelled():
            print(f"  !! the benchmark's Checkpoint watch ended: {watcher.task.exception()!r}")
        await watcher.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.realcp_sustained")
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--parallel", type=int, default=8, help="Workloads filled at once")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--evictions", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--sustain", type=float, default=30.0)
    parser.add_argument("--sustain-runs", type=int, default=1)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
