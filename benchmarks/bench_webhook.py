"""Benchmark: the admission webhook's /mutate over HTTPS next to a bare aiohttp TLS echo.

Run: ``python -m benchmarks.bench_webhook`` (``make bench``). Prints numbers; asserts nothing.

What is measured, in one run, for two servers that share everything but the handler:

* **webhook**: ``webhook.app.create_app`` exactly as served (review parsing, opt-in from an
  in-memory snapshot, restore decision, patch building, response encoding), certificate from
  ``webhook.certs``, context from ``webhook.tls``;
* **bare**: an aiohttp app on the same kind of TLS context whose handler reads the body and
  echoes it back: the floor of aiohttp + TLS + JSON-sized bodies on this machine.

Each server runs in its own subprocess (as it would in its own pod), one at a time; the client
(aiohttp, keep-alive connections, verifying our CA, like kube-apiserver's webhook client over
HTTP/1.1) runs in this process. Bodies rotate over three realistic Pod AdmissionReviews built
from the recorded job-controller pod CREATE (tests/fixtures/webhook/admission/03-…): opted in
with a restore, opted in with a cold start, and not opted in.

1. Throughput: closed loop, ``--concurrency`` connections, for ``--seconds``.
2. Latency at a fixed offered rate (``--rate``, default 200 req/s), open loop (a request is
   sent every 1/rate s whether or not earlier ones finished), p50/p99/max.

Targets (issue 14 item 4; each judged on the median of ``--rounds`` rounds, printed beside it):
webhook throughput >= 70% of bare; webhook p99 < 3 ms at 200 req/s; a pod that is not opted in
costs <= 1.3x the bare endpoint's server CPU (3. below).

3. Not opted in alone: closed loop with only the not-opted-in review, server CPU per request.

``--floor`` (the default; ``--no-floor`` leaves it out) adds a third server to the throughput
and not-opted-in rounds: the webhook's listener, limits and body read as served, whose
``/mutate`` parses the review's JSON (as every answer must) and answers a constant ``allowed``:
the most a webhook that parses each review on this stack could reach before it decides anything
(issue 14: what bounds targets 4a and 4c; docs/benchmarks.md, "Target 4, third pass").

The webhook is served with telemetry as ``webhook/__main__.py`` sets it up
(``kontinue.telemetry.setup``: the Prometheus meter and a tracer from the ``OTEL_*``
environment), without the Event sink (it needs an API server).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pathlib
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import aiohttp
from aiohttp import web

from kontinue import keys, telemetry
from kontinue.models import base, checkpoint, core, kueue
from kontinue.models import policy as policy_model
from webhook import app as app_module
from webhook import certs, limits, review, settings, state, tls

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECORDED = (
    ROOT / "tests/fixtures/webhook/admission/03-job-unsuspend-create-pod-by-job-controller.json"
)
Obj = dict[str, Any]


# --- the workload -----------------------------------------------------------------------------


def _review(*, queue: str, owner_uid: str, uid: str) -> Obj:
    review: Obj = json.loads(RECORDED.read_text())
    review["request"]["uid"] = uid
    pod = review["request"]["object"]
    pod["metadata"]["labels"][keys.KUEUE_CLUSTER_QUEUE_LABEL] = queue
    pod["metadata"]["ownerReferences"][0]["uid"] = owner_uid
    return review


def bodies() -> dict[str, bytes]:
    """The three request bodies, by scenario."""
    return {
        "restore": json.dumps(_review(queue="cq-gpu", owner_uid="uid-restore", uid="r-1")).encode(),
        "cold": json.dumps(_review(queue="cq-gpu", owner_uid="uid-cold", uid="c-1")).encode(),
        "not-opted-in": json.dumps(
            _review(queue="cq-plain", owner_uid="uid-plain", uid="n-1")
        ).encode(),
    }


def snapshot() -> state.Snapshot:
    """A cluster with two queues, a policy, GPU nodes and a lineage with checkpoint history."""
    lineage = checkpoint.Lineage(
        namespace="default", owner_kind="Job", owner_name="train-a", owner_uid="uid-restore"
    )
    checkpoints = []
    for i in range(5):  # retention keeps a few per lineage; one of them failed
        checkpoints.append(
            checkpoint.load(
                {
                    "metadata": {"name": f"train-a-{i}", "namespace": "default"},
                    "spec": {
                        "lineage": lineage.model_dump(by_alias=True),
                        "trigger": {
                            "source": "Kueue",
                            "reason": "Preempted",
                            "time": f"2026-12-02T1{i}:00:00Z",
                        },
                        "members": [{"podName": f"p{i}", "podUid": f"uid-{i}", "index": 0}],
                        "fingerprint": {
                            "gpuProduct": "NVIDIA-A100-SXM4-80GB",
                            "cudaDriverMajor": "550",
                            "gpuCount": 1,
                        },
                    },
                    "status": {"phase": "Failed" if i == 4 else "Succeeded"},
                }
            )
        )
    nodes = [
        base.parse(
            core.Node,
            {
                "metadata": {
                    "name": f"gpu-{n}",
                    "labels": {
                        keys.GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB",
                        keys.CUDA_DRIVER_MAJOR_LABEL: "550",
                    },
                },
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
        )
        for n in range(50)
    ]
    return state.Snapshot.of(
        cluster_queues=[
            base.parse(
                kueue.ClusterQueue,
                {"metadata": {"name": "cq-gpu", "labels": {keys.ENABLED_LABEL: "true"}}},
            ),
            base.parse(kueue.ClusterQueue, {"metadata": {"name": "cq-plain"}}),
        ],
        policies=[policy_model.DEFAULT],
        checkpoints=checkpoints,
        nodes=nodes,
        # the default policy's claim exists, so pods take the whole path (webhook/claims.py)
        claims=[("default", "kontinue")],
    )


# --- servers (subprocesses) ---------------------------------------------------------------------


async def _echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read(), content_type="application/json")


_FLOOR_ANSWER = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",'
    b'"response":{"uid":"f","allowed":true}}'
)


async def _floor(request: web.Request) -> web.Response:
    """Read the body as the webhook does, parse it, answer a constant (``--floor``)."""
    async with request.app[app_module.GUARD].read_body(request) as body:
        review.load(body)
    return web.Response(body=_FLOOR_ANSWER, content_type="application/json")


async def _serve(kind: str, cert_dir: pathlib.Path, profile: pathlib.Path | None = None) -> None:
    serving = tls.ServingCertificate()
    serving.load((cert_dir / "tls.crt").read_bytes(), (cert_dir / "tls.key").read_bytes())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    site: web.BaseSite
    if kind == "webhook":
        # Telemetry as webhook/__main__.py serves it: a meter whose instruments the Prometheus
        # registry reads, and a tracer from the OTEL_* environment (no exporter unless set).
        tel = telemetry.setup("kontinue-webhook", record_unexported=False)
        application = app_module.create_app(
            settings.Settings(),
            state=snapshot(),
            meter=tel.meter,
            registry=tel.registry,
            tracer=tel.tracer,
        )
        runner = app_module.runner(application)  # as served: through webhook/limits.py
        await runner.setup()
        site = app_module.site(runner, ssl_context=serving.context, sock=sock)
    elif kind == "floor":
        config = settings.Settings()
        application = web.Application(client_max_size=config.limits.max_body)
        application[app_module.SETTINGS] = config
        application[app_module.GUARD] = limits.Guard(config.limits)
        application.router.add_post("/mutate", _floor)
        runner = app_module.runner(application)
        await runner.setup()
        site = app_module.site(runner, ssl_context=serving.context, sock=sock)
    else:
        application = web.Application(client_max_size=settings.Settings().limits.max_body)
        application.router.add_post("/mutate", _echo)
        runner = web.AppRunner(application, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.SockSite(runner, sock, ssl_context=serving.context)
    await site.start()
    gc.collect()  # as webhook.__main__.serve does once it is up
    gc.freeze()
    # CPU time, not wall time: on a shared machine a descheduled process would otherwise charge
    # the wait to whatever call it was in.
    profiler = cProfile.Profile(time.process_time) if profile is not None else None
    if profiler is not None:
        profiler.enable()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until EOF
    if profiler is not None and profile is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    await runner.cleanup()


# --- client ---------------------------------------------------------------------------------


def _context(trust: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=trust.decode())


async def _check(session: aiohttp.ClientSession, url: str, body: bytes, kind: str) -> None:
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        answer = await r.json()
        assert r.status == 200, r.status
    if kind == "webhook":
        assert "uid" in answer["response"], answer


async def throughput(
    url: str, trust: bytes, payloads: list[bytes], *, concurrency: int, seconds: float, kind: str
) -> tuple[float, int]:
    done = 0
    connector = aiohttp.TCPConnector(ssl=_context(trust), limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        for body in payloads:  # warm up: connections, caches, code paths
            await _check(session, url, body, kind)
        stop_at = time.perf_counter() + seconds

        async def worker(offset: int) -> None:
            nonlocal done
            i = offset
            while time.perf_counter() < stop_at:
                body = payloads[i % len(payloads)]
                async with session.post(
                    url, data=body, headers={"Content-Type": "application/json"}
                ) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status}")
                done += 1
                i += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - started
    return done / elapsed, done


async def latency(
    url: str, trust: bytes, payloads: list[bytes], *, rate: float, count: int
) -> dict[str, list[float]]:
    """Open loop at ``rate``; latencies in ms by scenario index."""
    by_kind: dict[str, list[float]] = {str(i): [] for i in range(len(payloads))}
    failures = 0
    connector = aiohttp.TCPConnector(ssl=_context(trust), limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:
        # open a pool of warm connections first, as a running apiserver has
        await asyncio.gather(*(_check(session, url, payloads[0], "") for _ in range(8)))

        async def one(i: int) -> None:
            nonlocal failures
            body = payloads[i % len(payloads)]
            started = time.perf_counter()
            try:
                async with session.post(
                    url, data=body, headers={"Content-Type": "application/json"}
                ) as response:
                    await response.read()
                    ok = response.status == 200
            except aiohttp.ClientError:
                ok = False
            if not ok:
                failures += 1
                return
            by_kind[str(i % len(payloads))].append((time.perf_counter() - started) * 1000)

        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        for i in range(count):
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    if failures:
        raise RuntimeError(f"{failures} requests failed")
    return by_kind


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class _Server:
    def __init__(
        self, kind: str, cert_dir: pathlib.Path, profile: pathlib.Path | None = None
    ) -> None:
        self.kind = kind
        extra = ["--profile", str(profile)] if profile is not None else []
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_webhook",
                "--serve",
                kind,
                "--cert-dir",
                str(cert_dir),
                *extra,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"{kind} server did not start: {line!r}")
        self.url = f"https://localhost:{int(line.split()[1])}/mutate"

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used (Linux /proc)."""
        fields = pathlib.Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1]
        utime, stime = fields.split()[11:13]
        return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


def _median_of(values: list[float], fmt: str) -> str:
    """``median (a / b / c)``: the figure a target is judged on, and the rounds behind it."""
    return f"{fmt.format(statistics.median(values))} ({' / '.join(fmt.format(v) for v in values)})"


async def run(args: argparse.Namespace) -> None:
    bundle = certs.new_bundle(names=["localhost", "127.0.0.1"])
    scenarios = bodies()
    if args.scenario != "all":
        scenarios = {args.scenario: scenarios[args.scenario]}
    names = list(scenarios)
    payloads = [scenarios[n] for n in names]
    python = sys.version.split()[0]
    print(f"machine: {os.cpu_count()} CPUs, python {python}, aiohttp {aiohttp.__version__}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("bodies: " + ", ".join(f"{n} {len(b)} B" for n, b in scenarios.items()))
    kinds = ("bare", "webhook")
    measured = (*kinds, "floor") if args.floor else kinds
    # Per round and server: requests, seconds, server CPU, client CPU; latencies by scenario.
    rounds: list[dict[str, dict[str, float]]] = []
    lat_rounds: list[dict[str, dict[str, list[float]]]] = []
    plain_rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = pathlib.Path(tmp)
        (cert_dir / "tls.crt").write_bytes(bundle.serving.cert_pem)
        (cert_dir / "tls.key").write_bytes(bundle.serving.key_pem)
        servers = {
            kind: _Server(kind, cert_dir, args.profile if kind == "webhook" else None)
            for kind in measured
        }
        try:
            # Rounds alternate the two servers, so a change in the machine's load (other
            # processes) during the run weighs on both alike rather than on one; each target is
            # judged on the median of the rounds' figures.
            for _ in range(args.rounds):
                one: dict[str, dict[str, float]] = {}
                for kind, server in servers.items():
                    cpu, client_cpu = server.cpu_seconds(), time.process_time()
                    rps, n = await throughput(
                        server.url,
                        bundle.trust,
                        payloads,
                        concurrency=args.concurrency,
                        seconds=args.seconds / args.rounds,
                        kind=kind,
                    )
                    one[kind] = {
                        "n": n,
                        "rps": rps,
                        "cpu": server.cpu_seconds() - cpu,
                        "client_cpu": time.process_time() - client_cpu,
                    }
                rounds.append(one)
            for _ in range(args.rounds):
                lat_one: dict[str, dict[str, list[float]]] = {}
                for kind in kinds:
                    lat_one[kind] = await latency(
                        servers[kind].url,
                        bundle.trust,
                        payloads,
                        rate=args.rate,
                        count=args.count // args.rounds,
                    )
                lat_rounds.append(lat_one)
            if args.scenario == "all":  # issue 14: a pod that is not opted in, alone
                plain = [bodies()["not-opted-in"]]
                for _ in range(args.rounds):
                    cpu_us = dict.fromkeys(servers, 0.0)
                    for kind, server in servers.items():
                        cpu = server.cpu_seconds()
                        _, n = await throughput(
                            server.url,
                            bundle.trust,
                            plain,
                            concurrency=args.concurrency,
                            seconds=args.seconds / args.rounds,
                            kind=kind,
                        )
                        cpu_us[kind] = (server.cpu_seconds() - cpu) / n * 1e6
                    plain_rounds.append(cpu_us)
        finally:
            for server in servers.values():
                server.stop()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    print()
    print(
        f"throughput (closed loop, {args.concurrency} keep-alive connections, "
        f"{args.seconds:.0f} s in {args.rounds} rounds alternating with the other server)"
    )
    for kind in measured:
        total = sum(r[kind]["n"] for r in rounds)
        server_cpu = sum(r[kind]["cpu"] for r in rounds)
        client_cpu = sum(r[kind]["client_cpu"] for r in rounds)
        rps_text = _median_of([r[kind]["rps"] for r in rounds], "{:.0f}")
        print(
            f"  {kind:8s} {rps_text} req/s  ({total:.0f} requests; CPU per request: "
            f"server {server_cpu / total * 1e6:.0f} us, client {client_cpu / total * 1e6:.0f} us)"
        )
    ratios = [r["webhook"]["rps"] / r["bare"]["rps"] * 100 for r in rounds]
    print(
        f"  target 4a: webhook / bare throughput = {_median_of(ratios, '{:.0f}%')}"
        f"   (target >= 70%, issue 14): {'met' if statistics.median(ratios) >= 70 else 'NOT met'}"
    )
    cpu_ratios = [
        (r["webhook"]["cpu"] / r["webhook"]["n"]) / (r["bare"]["cpu"] / r["bare"]["n"])
        for r in rounds
    ]
    print(f"  server CPU per request webhook / bare = {_median_of(cpu_ratios, '{:.2f}x')}")
    if args.floor:
        floors = [r["floor"]["rps"] / r["bare"]["rps"] * 100 for r in rounds]
        floor_cpu = [
            (r["floor"]["cpu"] / r["floor"]["n"]) / (r["bare"]["cpu"] / r["bare"]["n"])
            for r in rounds
        ]
        print(
            f"  floor (body read + JSON parse + constant answer) / bare: throughput "
            f"{_median_of(floors, '{:.0f}%')}, server CPU {_median_of(floor_cpu, '{:.2f}x')}"
        )
    print()
    print(f"latency at {args.rate:.0f} req/s offered, open loop, {args.count} requests, ms")
    print(f"  {'server':8s} {'scenario':14s} {'p50':>7s} {'p99':>7s} {'max':>7s}")
    for kind in kinds:
        every: list[float] = []
        for i, name in enumerate(names):
            values = [v for r in lat_rounds for v in r[kind][str(i)]]
            every += values
            print(
                f"  {kind:8s} {name:14s} {_pct(values, 0.5):7.2f} {_pct(values, 0.99):7.2f} "
                f"{max(values):7.2f}"
            )
        print(
            f"  {kind:8s} {'all':14s} {_pct(every, 0.5):7.2f} {_pct(every, 0.99):7.2f} "
            f"{max(every):7.2f}   mean {statistics.fmean(every):.2f}"
        )
    p99s = {
        kind: [_pct([v for vs in r[kind].values() for v in vs], 0.99) for r in lat_rounds]
        for kind in kinds
    }
    print(f"  bare p99 by round = {_median_of(p99s['bare'], '{:.2f}')} ms")
    p99 = statistics.median(p99s["webhook"])
    shown = _median_of(p99s["webhook"], "{:.2f}")
    print(
        f"  target 4b: webhook p99 at {args.rate:.0f} req/s = {shown}"
        f" ms   (target < 3 ms, issue 14): {'met' if p99 < 3 else 'NOT met'}"
    )
    if plain_rounds:
        print()
        plain_ratios = [r["webhook"] / r["bare"] for r in plain_rounds]
        print(
            f"not opted in alone ({args.rounds} rounds of {args.seconds / args.rounds:.1f} s each, "
            "closed loop): server CPU per request bare "
            f"{_median_of([r['bare'] for r in plain_rounds], '{:.0f}')} us, webhook "
            f"{_median_of([r['webhook'] for r in plain_rounds], '{:.0f}')} us"
            + (
                f", floor {_median_of([r['floor'] for r in plain_rounds], '{:.0f}')} us"
                if args.floor
                else ""
            )
        )
        verdict = "met" if statistics.median(plain_ratios) <= 1.3 else "NOT met"
        print(
            f"  target 4c: webhook / bare CPU, pod not opted in = "
            f"{_median_of(plain_ratios, '{:.2f}x')}   (target <= 1.3x, issue 14): {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_webhook")
    parser.add_argument("--serve", choices=["webhook", "bare", "floor"], help=argparse.SUPPRESS)
    parser.add_argument("--cert-dir", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--profile",
        type=pathlib.Path,
        help="cProfile the webhook server for the whole run; write the stats to this file "
        "(read with python -m pstats); the numbers are then the profiled server's",
    )
    parser.add_argument(
        "--floor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure the floor (default): the webhook's listener and body read, parsing "
        "the JSON and answering a constant (what bounds targets 4a and 4c)",
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--scenario",
        choices=["all", "restore", "cold", "not-opted-in"],
        default="all",
        help="send only this review (not-opted-in: issue 14's CPU-ratio target)",
    )
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.cert_dir, args.profile))
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
