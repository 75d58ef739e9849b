"""Benchmark: the queue bridge's reaction time and memory, and how both grow with the cluster.

Run: ``python -m benchmarks.bench_bridge`` (``make bench``). Prints numbers; asserts nothing.
``--sizes 5000`` alone gives the reaction headline (1,000 Workloads, 5,000 pods), ``--sizes
10000`` the footprint headline (2,000 Workloads, 10,000 pods); the default runs the scaling
table 1k / 2.5k / 5k / 10k pods (Workloads = pods / 5, one Job each), which contains both.

For each size, in this process: a fresh API emulator (``emulator.apiserver.server.ApiServer``
over loopback HTTP) filled through its in-process clients with what the other components
write — the Jobs, Kueue's admitted Workloads (status by server-side apply as
``kueue-admission``), the job controller's pods carrying the webhook's ``kontinue.dev/lineage``
annotation and ``kontinue.dev/checkpoint`` finalizer, the kubelet's ``Running`` status — in
one opted-in ClusterQueue. Pods have the spec and status of the recorded kubelet pod
(``--pod-shape recorded``, the default, ~4 KB of JSON; the emulator adds no managedFields, a real
kube-apiserver would add about 1 KB more) or a minimal running pod (``--pod-shape small``,
~1.9 KB). Then the real bridge starts as its own process (``python -m
queue_bridge``, configured by environment and ``KUBECONFIG`` exactly as in a pod), so its
memory is its own and its CPU is not the emulator's.

1. Footprint: once ``/readyz`` says ``leader`` and the work queue has drained (the start-up
   sweep of every key is done), ``VmRSS`` and ``VmHWM`` from ``/proc/<pid>/status``.
2. Reaction: Kueue's eviction write (one server-side apply on workloads/status:
   ``Evicted=True`` reason ``Preempted`` + ``Preempted=True`` reason ``InClusterQueue``,
   admission kept — as tests/integration/bridge/conftest.py ``Cluster.evict``) to the
   Checkpoint's ADDED event on a watch opened with the emulator's in-process client. Both
   timestamps are taken in this process with one clock: from just before the write call to the
   moment the watch delivers the Checkpoint. ``--evictions`` Workloads are evicted one every
   ``--interval`` s (spread), then ``--burst`` more at once.

Targets (issue 7): reaction p99 < 100 ms at 1,000 Workloads / 5,000 pods; RSS < 300 MB at
2,000 Workloads / 10,000 pods. Issue 14 target 2, printed with the median of ``--rounds``
rounds (each on Workloads not evicted before): <= 4 ms of bridge CPU per eviction, the last of a
burst of 50 Checkpoints within 250 ms; then ``--sustain-runs`` sustained runs of ``--sustain``
seconds at ``--rate`` evictions/s (200/s for 30 s, p99 < 100 ms), the Workloads recycled between
their evictions (readmitted, their Checkpoint deleted: :mod:`benchmarks.sustained` says how and
what that leaves out).
The default is the 5,000-pod size alone; ``--sizes 0,1000,2500,5000,10000`` gives the scaling
table. The memory and start-up targets are :mod:`benchmarks.bench_bridge_memory`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import pathlib
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from benchmarks import sustained
from emulator import owners
from emulator.apiserver import server
from kontinue import keys, lineage
from kontinue.kube import resources
from kontinue.models import base, checkpoint
from tests import fixtures, kueue_writes

Obj = dict[str, Any]
NS = "team-a"
SYSTEM = "kontinue-system"
BRIDGE_USER = f"system:serviceaccount:{SYSTEM}:kontinue-bridge"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
KUEUE_USER = kueue_writes.USER
PODS_PER_WORKLOAD = 5
CRDS = [
    *sorted((fixtures.MANIFESTS / "crds").glob("kontinue.dev_*.yaml")),
    *sorted((fixtures.UPSTREAM / "kueue/crds").glob("kueue.x-k8s.io_*.yaml")),
]
RECORDED_POD = fixtures.FIXTURES / "bridge/kubelet-sigterm-saved.json"
IDLE_SECONDS = 3.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# --- the cluster ------------------------------------------------------------------------------


class Filled:
    """An emulator holding ``workloads`` admitted Workloads with ``per`` running pods each."""

    def __init__(self, emulated: server.ApiServer, *, recorded: bool = False) -> None:
        self.emulated = emulated
        self.recorded: Obj | None = json.loads(RECORDED_POD.read_text()) if recorded else None
        self.admin = emulated.client()
        self.kueue = emulated.client(KUEUE_USER)
        self.job_controller = emulated.client(JOB_CONTROLLER)
        self.admitted: dict[str, Obj] = {}  # Workload name -> the status Kueue applied

    async def setup(self) -> None:
        for path in CRDS:
            self.emulated.install_crd(fixtures.load_one(path))
        for namespace in (NS, SYSTEM):
            await self.admin.create(resources.NAMESPACES, {"metadata": {"name": namespace}})
        await self.admin.create(
            resources.CLUSTER_QUEUES,
            {
                "apiVersion": resources.CLUSTER_QUEUES.api_version,
                "kind": "ClusterQueue",
                "metadata": {"name": "cq", "labels": {keys.ENABLED_LABEL: "true"}},
                "spec": {"cohortName": "team"},
            },
        )
        await self.admin.create(
            resources.LOCAL_QUEUES,
            {
                "apiVersion": resources.LOCAL_QUEUES.api_version,
                "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": NS},
                "spec": {"clusterQueue": "cq"},
            },
        )

    async def add(self, index: int, *, per: int) -> None:
        """One Job, its admitted Workload and ``per`` Running pods."""
        template: Obj = {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.example/train:v1"}],
            }
        }
        job = await self.admin.create(
            resources.JOBS,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"train-{index:05d}",
                    "namespace": NS,
                    "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "lq"},
                },
                "spec": {
                    "suspend": False,
                    "completions": per,
                    "parallelism": per,
                    "completionMode": "Indexed",
                    "podReplacementPolicy": "Failed",
                    "podFailurePolicy": {
                        "rules": [
                            {
                                "action": "Ignore",
                                "onPodConditions": [{"type": "DisruptionTarget"}],
                            }
                        ]
                    },
                    "template": template,
                },
            },
        )
        job_name, job_uid = job["metadata"]["name"], job["metadata"]["uid"]
        owner_ref = owners.controller_ref(job)
        workload = kueue_writes.workload(
            job, namespace=NS, queue="lq", count=per, template=template
        )
        name = workload["metadata"]["name"]
        await self.kueue.create(resources.WORKLOADS, workload)
        status = kueue_writes.admitted(cluster_queue="cq", count=per)
        await self.kueue_apply(name, status)
        self.admitted[name] = status
        annotation = lineage.annotation_value(
            checkpoint.Lineage(
                namespace=NS, owner_kind="Job", owner_name=job_name, owner_uid=job_uid
            )
        )
        for pod_index in range(per):
            node = f"node-{(index * per + pod_index) % 64}"
            body: Obj = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job_name}-{pod_index}-{index:05x}",
                    "namespace": NS,
                    "labels": {
                        keys.JOB_NAME_LABEL: job_name,
                        "batch.kubernetes.io/controller-uid": job_uid,
                        keys.PLUMBED_LABEL: keys.PLUMBED_VALUE,
                    },
                    "annotations": {
                        keys.LINEAGE_ANNOTATION: annotation,
                        keys.JOB_COMPLETION_INDEX_ANNOTATION: str(pod_index),
                    },
                    "finalizers": [keys.JOB_TRACKING_FINALIZER, keys.CHECKPOINT_FINALIZER],
                    "ownerReferences": [owner_ref],
                },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 30,
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/train:v1",
                            "resources": {
                                "limits": {"nvidia.com/gpu": "1"},
                                "requests": {"nvidia.com/gpu": "1"},
                            },
                        }
                    ],
                },
            }
            if self.recorded is not None:  # the recorded pod's spec, with our name and node
                body["spec"] = {**copy.deepcopy(self.recorded["spec"]), "nodeName": node}
            pod = await self.job_controller.create(resources.PODS, body)
            pod["status"] = {
                "phase": "Running",
                "podIP": f"10.0.{pod_index}.{index % 250}",
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "restartCount": 0,
                        "image": "registry.example/train:v1",
                        "state": {"running": {"startedAt": base.format_time(base.now())}},
                    }
                ],
            }
            if self.recorded is not None:  # the recorded kubelet status, still running
                status = copy.deepcopy(self.recorded["status"])
                status["phase"] = "Running"
                for item in status["conditions"]:
                    item["status"] = "True"
                    item.pop("reason", None)
                running = status["containerStatuses"][0]
                running["state"] = {"running": {"startedAt": base.format_time(base.now())}}
                running["ready"] = True
                pod["status"] = status
            kubelet = self.emulated.client(f"system:node:{node}")
            await kubelet.replace(resources.PODS, pod, subresource="status")

    async def kueue_apply(self, name: str, status: Obj) -> Obj:
        return await kueue_writes.apply_status(self.kueue, name, NS, status)

    async def evict(self, name: str) -> None:
        """Kueue's preemption write (tests/kueue_writes.py), admission kept."""
        admitted = self.admitted[name]
        conditions = kueue_writes.evicted(admitted["conditions"])
        await self.kueue_apply(name, {"admission": admitted["admission"], "conditions": conditions})

    async def readmit(self, name: str) -> None:
        """Kueue reserves quota for ``name`` again: Evicted/Preempted reset to False
        (tests/kueue_writes.py ``readmitted``), admission kept."""
        admitted = self.admitted[name]
        evicted = kueue_writes.evicted(admitted["conditions"])
        conditions = kueue_writes.readmitted(evicted, cluster_queue="cq")
        await self.kueue_apply(name, {"admission": admitted["admission"], "conditions": conditions})


# --- the bridge process -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_status(pid: int) -> dict[str, int]:
    """``VmRSS``/``VmHWM`` (kB) of ``pid`` from /proc: the process's own resident memory."""
    found: dict[str, int] = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        field, _, value = line.partition(":")
        if field in ("VmRSS", "VmHWM"):
            found[field] = int(value.split()[0])
    return found


def cpu_split(pid: int) -> tuple[float, float]:
    """User and system CPU time of ``pid`` so far (/proc/<pid>/stat fields 14 and 15)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far."""
    return sum(cpu_split(pid))


class BridgeProcess:
    """``python -m queue_bridge`` with a kubeconfig for the emulator; SIGTERM to stop."""

    def __init__(
        self,
        emulated: server.ApiServer,
        workdir: pathlib.Path,
        profile: pathlib.Path | None = None,
    ) -> None:
        self.port = _free_port()
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(json.dumps(emulated.kubeconfig(BRIDGE_USER)))
        self.log = workdir / "bridge.log"
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "KONTINUE_NAMESPACE": SYSTEM,
            "KONTINUE_POD_NAME": "bench-bridge",
            "KONTINUE_HEALTH_HOST": "127.0.0.1",
            "KONTINUE_HEALTH_PORT_NUMBER": str(self.port),
            "KONTINUE_METRICS_PORT_NUMBER": "0",
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        with self.log.open("wb") as out:
            wrap = ["-m", "benchmarks.profiled", str(profile)] if profile is not None else ["-m"]
            self.process = subprocess.Popen(
                [sys.executable, *wrap, "queue_bridge"], env=env, stdout=out, stderr=out
            )
        self.url = f"http://127.0.0.1:{self.port}"

    async def _get(self, session: aiohttp.ClientSession, path: str) -> tuple[int, str]:
        try:
            async with session.get(self.url + path) as response:
                return response.status, await response.text()
        except aiohttp.ClientError:
            return 0, ""

    async def wait_idle(self, *, within: float) -> tuple[float, float]:
        """Seconds until ``/readyz`` says leader, and until the work queue stayed empty."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + within
        ready_at = 0.0
        empty = 0
        async with aiohttp.ClientSession() as session:
            while loop.time() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"bridge exited {self.process.returncode}: {self.tail()}")
                if not ready_at:
                    status, text = await self._get(session, "/readyz")
                    if status == 200 and "leader" in text:
                        ready_at = loop.time() - started
                else:
                    _, text = await self._get(session, "/metrics")
                    found = re.search(r"^kontinue_bridge_queue_depth\S* (\S+)$", text, re.M)
                    empty = empty + 1 if found and float(found.group(1)) == 0 else 0
                    if empty >= 3:
                        return ready_at, loop.time() - started
                await asyncio.sleep(0.2)
        raise RuntimeError(f"bridge not idle within {within}s: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    async def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.process.wait, 15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# --- one size -------------------------------------------------------------------------------


class Watcher:
    """Timestamps each Checkpoint's ADDED event, by the Workload it was made for."""

    def __init__(self, client: server.Client) -> None:
        self.client = client
        self.seen: dict[str, float] = {}
        self.made: dict[str, str] = {}  # Workload -> the name of its newest Checkpoint
        self.on_added: Callable[[str, str, float], None] | None = None  # benchmarks/sustained.py
        self.arrived = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listed = await self.client.list(resources.CHECKPOINTS, namespace=NS)
        version = listed["metadata"]["resourceVersion"]
        self.task = asyncio.create_task(self._run(version))

    async def _run(self, version: str) -> None:
        while True:  # a real apiserver ends watches now and then: resume where it ended
            async for event in self.client.watch(
                resources.CHECKPOINTS, namespace=NS, resource_version=version
            ):
                version = event["object"]["metadata"].get("resourceVersion") or version
                self._seen(event)

    def _seen(self, event: Obj) -> None:
        if event["type"] != "ADDED":
            return
        at = time.perf_counter()
        workload = event["object"]["spec"].get("workload", "")
        self.seen.setdefault(workload, at)
        self.made[workload] = event["object"]["metadata"]["name"]
        if self.on_added is not None:
            self.on_added(workload, self.made[workload], at)
        self.arrived.set()

    async def wait_for(self, names: list[str], *, within: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not all(n in self.seen for n in names) and loop.time() < deadline:
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), timeout=deadline - loop.time())

    async def stop(self) -> None:
        """Cancel the watch, again if need be: on Python 3.11 a cancellation that lands as
        ``asyncio.wait_for`` (inside the emulator's stream) completes can be swallowed, and a
        single ``cancel()`` + ``await`` then hangs forever (seen once in this benchmark)."""
        if self.task is None:
            return
        for _ in range(20):
            self.task.cancel()
            await asyncio.wait({self.task}, timeout=0.5)
            if self.task.done():
                break
        if self.task.done() and not self.task.cancelled():
            with contextlib.suppress(Exception):
                self.task.result()


async def one_size(pods: int, args: argparse.Namespace) -> Obj:
    workloads = pods // PODS_PER_WORKLOAD
    result: Obj = {"pods": pods, "workloads": workloads}
    async with server.ApiServer(bookmark_interval=5.0) as emulated:
        filled = Filled(emulated, recorded=args.pod_shape == "recorded")
        await filled.setup()
        t = time.perf_counter()
        for index in range(workloads):
            await filled.add(index, per=PODS_PER_WORKLOAD)
        result["fill_s"] = time.perf_counter() - t
        with tempfile.TemporaryDirectory(prefix="bench-bridge-") as tmp:
            bridge = BridgeProcess(emulated, pathlib.Path(tmp), args.profile)
            early = args.sample and args.profile_from == "start"
            try:
                # the start-up: sampled from the first instruction to the drain
                started = _sampler(bridge.process.pid, args.sample) if early else None
                ready, idle = await bridge.wait_idle(within=args.sync_timeout)
                if started is not None:
                    started.send_signal(signal.SIGINT)
                    await asyncio.to_thread(started.wait, 60)
                pid = bridge.process.pid
                result.update(ready_s=ready, idle_s=idle, startup_cpu_s=cpu_seconds(pid))
                if args.profile is not None and args.profile_from == "evictions":
                    bridge.process.send_signal(signal.SIGUSR1)  # benchmarks/profiled.py
                result.update(proc_status(pid))
                if workloads and args.evictions + args.burst:
                    sampler = _sampler(pid, args.sample) if args.sample and not early else None
                    try:
                        result.update(await reaction(filled, pid, args, bridge.url))
                    finally:
                        if sampler is not None:
                            sampler.send_signal(signal.SIGINT)
                            await asyncio.to_thread(sampler.wait, 60)
                    result["after"] = proc_status(pid)
                result["queue_full"] = bridge.log.read_text(errors="replace").count(
                    "work queue full"
                )
            finally:
                await bridge.stop()
    return result


def _sampler(pid: int, out: pathlib.Path) -> subprocess.Popen[bytes]:
    """py-spy sampling the bridge (``--sample``): unlike cProfile it does not slow Python code
    more than C code, so its shares are the process's own. py-spy is not a dependency of the
    project: ``pip install --target DIR py-spy`` and put ``DIR/bin`` on ``PATH``."""
    exe = shutil.which("py-spy")
    if exe is None:
        raise RuntimeError("--sample needs py-spy on PATH")
    return subprocess.Popen(
        [exe, "record", "-p", str(pid), "-r", "250", "-f", "raw", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def keys_handled(url: str) -> float:
    """Keys the bridge has handled so far: the sum of its per-kind reconcile counts on
    ``/metrics`` (``kontinue_bridge_reconcile_duration_seconds_count``)."""
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
        text = await response.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("kontinue_bridge_reconcile_duration_seconds_count")
    )


async def reaction(filled: Filled, pid: int, args: argparse.Namespace, url: str) -> Obj:
    """``--rounds`` rounds of (spread evictions, then a burst), each on fresh Workloads, then
    the sustained runs at ``--rate`` evictions/s, Workloads recycled (benchmarks/sustained.py)."""
    names = sorted(filled.admitted)
    watcher = Watcher(filled.admin)
    await watcher.start()
    written: dict[str, float] = {}
    rounds: list[Obj] = []
    result: Obj = {}
    # what the bridge spends with nothing to do (Lease renewals, watch bookmarks), for the net
    # figure beside the raw one: the spread phase lasts seconds, so its CPU includes some
    idle_before = cpu_seconds(pid)
    await asyncio.sleep(IDLE_SECONDS)
    result["idle_cpu_ms_per_s"] = (cpu_seconds(pid) - idle_before) * 1000 / IDLE_SECONDS
    try:
        for _ in range(args.rounds):
            burst_n = min(args.burst, len(names) // 4)
            spread = names[: min(args.evictions, max(0, len(names) - burst_n))]
            burst = names[len(spread) : len(spread) + burst_n]
            names = names[len(spread) + len(burst) :]
            if not spread and not burst:
                break
            one = await _round(filled, pid, url, watcher, written, spread, burst, args.interval)
            rounds.append(one)
        if args.rate and args.sustain and args.sustain_runs:
            result["sustained"] = await _sustained(filled, pid, watcher, names, args)
    finally:
        await watcher.stop()
        _note("watcher stopped")
    result["rounds"] = rounds
    # the scaling table reads the first round as before
    if rounds:
        result.update(rounds[0])
    return result


async def _sustained(
    filled: Filled, pid: int, watcher: Watcher, fresh: list[str], args: argparse.Namespace
) -> list[Obj]:
    """``--sustain-runs`` runs of ``--sustain`` s at ``--rate`` evictions/s, recycling the
    Workloads (benchmarks/sustained.py); the first run recycles those the rounds evicted."""
    runs: list[Obj] = []
    pool = list(fresh)
    dirty = {w: watcher.made[w] for w in sorted(filled.admitted) if w in watcher.made}
    dirty = {w: cp for w, cp in dirty.items() if w not in set(fresh)}

    def hook(callback: Callable[[str, str, float], None] | None) -> None:
        watcher.on_added = callback

    for run in range(args.sustain_runs):
        one = await sustained.phase(
            filled,
            NS,
            pool=pool,
            dirty=dirty,
            rate=args.rate,
            seconds=args.sustain,
            cpu=lambda: cpu_seconds(pid),
            hook=hook,
        )
        _note(f"sustained run {run + 1}: {one['n']} offered, {one['missing']} missing")
        runs.append(one)
        pool, dirty = one.pop("pool_after"), {}
        await asyncio.sleep(1.0)
    return runs


async def _spread(
    filled: Filled, names: list[str], interval: float, written: dict[str, float]
) -> list[float]:
    """Evict ``names`` one every ``interval`` seconds; each eviction's write time in ms."""
    write_ms: list[float] = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i, name in enumerate(names):
        delay = start + i * interval - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        written[name] = time.perf_counter()
        await filled.evict(name)
        write_ms.append((time.perf_counter() - written[name]) * 1000)
    return write_ms


async def _round(
    filled: Filled,
    pid: int,
    url: str,
    watcher: Watcher,
    written: dict[str, float],
    spread: list[str],
    burst: list[str],
    interval: float,
) -> Obj:
    keys_before = await keys_handled(url)
    cpu_before = cpu_seconds(pid)
    system_before = cpu_split(pid)[1]
    spread_start = time.perf_counter()
    write_ms = await _spread(filled, spread, interval, written)
    _note("spread written")
    await watcher.wait_for(spread, within=30)
    _note(f"spread seen: {sum(n in watcher.seen for n in spread)}/{len(spread)}")
    spread_cpu = cpu_seconds(pid) - cpu_before
    spread_system = cpu_split(pid)[1] - system_before
    spread_s = time.perf_counter() - spread_start
    await asyncio.sleep(1.0)  # let the bridge settle before the burst: the work that follows
    # the last Checkpoint (status, member pods, Events) is in the "incl. 1 s after" figures
    spread_all_cpu = cpu_seconds(pid) - cpu_before
    spread_keys = await keys_handled(url) - keys_before

    async def one(name: str) -> None:
        written[name] = time.perf_counter()
        await filled.evict(name)

    cpu_before = cpu_seconds(pid)
    burst_start = time.perf_counter()
    await asyncio.gather(*(one(n) for n in burst))
    burst_written = time.perf_counter() - burst_start
    _note("burst written")
    await watcher.wait_for(burst, within=30)
    _note(f"burst seen: {sum(n in watcher.seen for n in burst)}/{len(burst)}")
    await asyncio.sleep(1.0)  # the work each eviction causes after its Checkpoint
    burst_cpu = cpu_seconds(pid) - cpu_before

    def latencies(group: list[str]) -> list[float]:
        return [(watcher.seen[n] - written[n]) * 1000 for n in group if n in watcher.seen]

    burst_last = [watcher.seen[n] for n in burst if n in watcher.seen]
    return {
        "spread": latencies(spread),
        "spread_n": len(spread),
        "spread_cpu_ms": spread_cpu * 1000 / max(1, len(spread)),
        "spread_system_ms": spread_system * 1000 / max(1, len(spread)),
        "spread_all_cpu_ms": spread_all_cpu * 1000 / max(1, len(spread)),
        "spread_keys": spread_keys / max(1, len(spread)),
        "spread_s": spread_s,
        "burst_cpu_ms": burst_cpu * 1000 / max(1, len(burst)),
        "write_ms": write_ms,
        "burst": latencies(burst),
        "burst_n": len(burst),
        "burst_written_ms": burst_written * 1000,
        "burst_all_ms": (max(burst_last) - burst_start) * 1000 if burst_last else float("nan"),
    }


def _note(what: str) -> None:
    """Progress on stderr (the numbers go to stdout)."""
    print(f"    {time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


# --- report ---------------------------------------------------------------------------------


def machine() -> list[str]:
    model = "?"
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return [
        f"machine: {os.cpu_count()} CPUs ({model}), {mem} RAM, python {platform.python_version()}",
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
    ]


def _ms(values: list[float]) -> str:
    if not values:
        return f"{'-':>7s} {'-':>7s} {'-':>7s}"
    return f"{_pct(values, 0.5):7.1f} {_pct(values, 0.99):7.1f} {max(values):7.1f}"


def report(results: list[Obj]) -> None:
    print()
    print("footprint: the bridge process after caches synced and the start-up sweep drained")
    print(
        f"  {'pods':>6s} {'wls':>5s} {'VmRSS MB':>9s} {'VmHWM MB':>9s} {'ready s':>8s}"
        f" {'idle s':>7s} {'cpu s':>6s} {'q full':>6s} {'RSS after evictions':>20s}"
    )
    for r in results:
        after = r.get("after", {}).get("VmRSS")
        print(
            f"  {r['pods']:6d} {r['workloads']:5d} {r['VmRSS'] / 1024:9.1f}"
            f" {r['VmHWM'] / 1024:9.1f} {r['ready_s']:8.2f} {r['idle_s']:7.2f}"
            f" {r['startup_cpu_s']:6.2f} {r['queue_full']:6d}"
            f" {(f'{after / 1024:.1f} MB' if after else '-'):>20s}"
        )
    print()
    print("reaction: eviction write -> Checkpoint ADDED on a watch, ms")
    print(
        f"  {'pods':>6s} {'wls':>5s} {'n':>4s} {'p50':>7s} {'p99':>7s} {'max':>7s}"
        f"  {'burst n':>7s} {'p50':>7s} {'p99':>7s} {'max':>7s} {'all':>7s}"
        f" {'write p50':>9s} {'cpu/evict':>9s}"
    )
    for r in results:
        if "spread" not in r:
            continue
        print(
            f"  {r['pods']:6d} {r['workloads']:5d} {len(r['spread']):4d} {_ms(r['spread'])}"
            f"  {len(r['burst']):7d} {_ms(r['burst'])} {r['burst_all_ms']:7.1f}"
            f" {_pct(r['write_ms'], 0.5):9.2f} {r['spread_cpu_ms']:9.2f}"
        )
        missing = r["spread_n"] - len(r["spread"]) + r["burst_n"] - len(r["burst"])
        if missing:
            print(f"    !! {missing} Checkpoints never appeared within 30 s")
    print()
    by_size = {r["pods"]: r for r in results}
    if 5000 in by_size and by_size[5000].get("spread"):
        p99 = _pct(by_size[5000]["spread"], 0.99)
        verdict = "met" if p99 < 100 else "NOT met"
        print(f"  reaction p99 at 5,000 pods = {p99:.1f} ms (target < 100 ms): {verdict}")
    if 10000 in by_size:
        rss = by_size[10000]["VmRSS"] / 1024
        verdict = "met" if rss < 300 else "NOT met"
        print(f"  RSS at 10,000 pods = {rss:.0f} MB (target < 300 MB): {verdict}")
    for r in results:
        if r.get("rounds"):
            targets(r)
    sized = [r for r in results if r["pods"]]
    if len(sized) >= 2:
        first, last = sized[0], sized[-1]
        growth = last["pods"] / first["pods"]
        base_rss = results[0]["VmRSS"] if results[0]["pods"] == 0 else 0
        rss_growth = (last["VmRSS"] - base_rss) / max(1, first["VmRSS"] - base_rss)
        print(
            f"  scaling {first['pods']} -> {last['pods']} pods (x{growth:.1f}):"
            f" RSS{' above the empty bridge' if base_rss else ''} x{rss_growth:.1f},"
            f" sync-to-idle x{last['idle_s'] / max(first['idle_s'], 1e-9):.1f}"
            + (
                f", reaction p50 x{_pct(last['spread'], 0.5) / _pct(first['spread'], 0.5):.1f}"
                if first.get("spread") and last.get("spread")
                else ""
            )
        )


def targets(r: Obj) -> None:
    """Issue 14 target 2 at this size: medians over the rounds, beside the targets."""
    rounds = r["rounds"]
    verdict = {True: "met", False: "NOT met"}
    spread_cpu = statistics.median(x["spread_cpu_ms"] for x in rounds)
    burst_cpu = statistics.median(x["burst_cpu_ms"] for x in rounds)
    last = statistics.median(x["burst_all_ms"] for x in rounds)
    print(f"  at {r['pods']} pods, {len(rounds)} rounds (each: spread, then a burst):")
    print(
        "    bridge CPU per eviction (spread, to its last Checkpoint) = "
        + " / ".join(f"{x['spread_cpu_ms']:.1f}" for x in rounds)
        + f" ms, median {spread_cpu:.1f} ms"
    )
    idle = r.get("idle_cpu_ms_per_s", 0.0)
    net = statistics.median(
        x["spread_cpu_ms"] - idle * x["spread_s"] / max(1, x["spread_n"]) for x in rounds
    )
    print(
        f"    of which idle: the bridge spends {idle:.1f} ms of CPU per second doing nothing"
        f" (Lease, bookmarks); net of it, median {net:.1f} ms per eviction"
    )
    system = statistics.median(x["spread_system_ms"] for x in rounds)
    print(
        "    of which in the kernel (system time: sockets, epoll, wake-ups) = "
        + " / ".join(f"{x['spread_system_ms']:.1f}" for x in rounds)
        + f" ms, median {system:.1f} ms per eviction"
    )
    spread_all = statistics.median(x["spread_all_cpu_ms"] for x in rounds)
    print(
        "    target 2a: bridge CPU per eviction, all the work it causes (spread, incl. 1 s"
        " after) = "
        + " / ".join(f"{x['spread_all_cpu_ms']:.1f}" for x in rounds)
        + f" ms, median {spread_all:.1f} ms (target <= 4 ms): {verdict[spread_all <= 4]};"
        " keys handled per eviction " + " / ".join(f"{x['spread_keys']:.1f}" for x in rounds)
    )
    print(
        "    bridge CPU per eviction (burst, incl. 1 s after) = "
        + " / ".join(f"{x['burst_cpu_ms']:.1f}" for x in rounds)
        + f" ms, median {burst_cpu:.1f} ms"
    )
    print(
        f"    burst of {rounds[0]['burst_n']}: last Checkpoint after "
        + " / ".join(f"{x['burst_all_ms']:.0f}" for x in rounds)
        + f" ms, median {last:.0f} ms (target < 250 ms): {verdict[last < 250]}"
    )
    print(
        "      (the emulator, in this process, took "
        + " / ".join(f"{x['burst_written_ms']:.0f}" for x in rounds)
        + " ms to accept the 50 eviction writes themselves)"
    )
    runs = r.get("sustained")
    if runs:
        print(
            f"    sustained, {len(runs)} runs (Workloads recycled: readmitted, Checkpoint"
            " deleted; benchmarks/sustained.py):"
        )
        p99s, rates = [], []
        for one in runs:
            ms = one["ms"]
            p99 = _pct(ms, 0.99) if ms else float("nan")
            p99s.append(p99)
            rates.append(one["n"] / one["offered_s"])
            print(
                f"      {one['n']} evictions in {one['offered_s']:.1f} s ({rates[-1]:.0f}/s,"
                f" {one['starved']} ticks starved), p50 {_pct(ms, 0.5) if ms else 0:.1f} ms,"
                f" p99 {p99:.1f} ms, max {max(ms) if ms else 0:.1f} ms, {one['missing']} missing,"
                f" {one['remade']} remade, CPU per eviction: bridge {one['cpu_ms']:.2f} ms,"
                f" this process (emulator, writes, watch) {one['emulator_cpu_ms']:.2f} ms"
                + (f"; errors: {one['errors']}" if one["errors"] else "")
            )
        p99 = statistics.median(p99s)
        rate = statistics.median(rates)
        seconds = statistics.median(one["offered_s"] for one in runs)
        cpu = statistics.median(one["cpu_ms"] for one in runs)
        missing = sum(one["missing"] for one in runs)
        met = p99 < 100 and rate >= 0.98 * 200 and seconds >= 29.5 and not missing
        print(
            f"    sustained: median of {len(runs)}: {rate:.0f} evictions/s for {seconds:.0f} s,"
            f" p99 {p99:.1f} ms, CPU {cpu:.2f} ms per eviction, {missing} missing"
            f" (target: 200/s for 30 s, p99 < 100 ms): {verdict[met]}"
        )


async def run(args: argparse.Namespace) -> None:
    for line in machine():
        print(line)
    print(
        f"pods per Workload: {PODS_PER_WORKLOAD}; evictions: {args.evictions} spread"
        f" ({args.interval * 1000:.0f} ms apart) + {args.burst} at once;"
        f" pod shape: {args.pod_shape}"
    )
    results = []
    for pods in args.sizes:
        result = await one_size(pods, args)
        print(
            f"  {pods} pods: filled in {result['fill_s']:.1f}s,"
            f" bridge ready {result['ready_s']:.1f}s,"
            f" idle {result['idle_s']:.1f}s, RSS {result['VmRSS'] / 1024:.1f} MB",
            flush=True,
        )
        results.append(result)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(results)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_bridge")
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[5000],
        help="comma-separated pod counts (Workloads = pods / 5); 0 = the empty bridge; the "
        "scaling table of docs/benchmarks.md: 0,1000,2500,5000,10000",
    )
    parser.add_argument("--evictions", type=int, default=100, help="spread evictions per round")
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of spread + burst")
    parser.add_argument(
        "--rate", type=float, default=200.0, help="sustained phase: evictions/s (0: none)"
    )
    parser.add_argument(
        "--sustain",
        type=float,
        default=30.0,
        help="sustained phase: seconds of evictions at --rate, Workloads recycled",
    )
    parser.add_argument(
        "--sustain-runs", type=int, default=3, help="sustained phase: runs (median printed)"
    )
    parser.add_argument(
        "--pod-shape",
        choices=["small", "recorded"],
        default="recorded",
        help="small: a minimal running pod (~1.9 KB JSON); recorded: the spec and status of "
        "the recorded kubelet pod tests/fixtures/bridge/kubelet-sigterm-saved.json (~4 KB)",
    )
    parser.add_argument("--sync-timeout", type=float, default=180.0)
    parser.add_argument(
        "--profile",
        type=pathlib.Path,
        help="cProfile the bridge process (CPU time) and write the stats here when it stops; "
        "the figures are then the profiled bridge's",
    )
    parser.add_argument(
        "--sample",
        type=pathlib.Path,
        help="sample the bridge with py-spy (on PATH), collapsed stacks here: during the "
        "evictions, or with --profile-from start during the start-up",
    )
    parser.add_argument(
        "--profile-from",
        choices=["start", "evictions"],
        default="start",
        help="with --profile or --sample: from the process start, or only once the start-up sweep "
        "has drained (the evictions)",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
