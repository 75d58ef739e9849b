"""Benchmark: the webhook under hostile clients, and what legitimate reviews see meanwhile.

Run: ``python -m benchmarks.bench_hostile`` (``make bench``). Prints numbers; asserts nothing.
Recorded in docs/benchmarks.md with the machine. Three scenarios, one after the other, each with
a fresh server:

* ``slow`` (issue 11 item 3): ``--slow`` connections that send request headers a line a second
  and never finish them, and ``--stalled`` connections that declare an 8 MiB body and, unless
  refused within 50 ms, send it up to its last byte and stall. A client the server closes
  reconnects after 1 s (``Retry-After``), so the hostile connections stay near 500 for the run.
  Target: webhook RSS < 200 MiB and p99 of legitimate reviews < 10 ms, in the same run.
* ``mixed`` (issue 20 item 4): ``--hostile`` connections, each sending in a closed loop absurd
  but well-formed reviews (a pod with 100,000 ``null`` ownerReferences, 501 KB, as found; a pod
  with 1,000 empty ownerReferences; 20,000 annotations; a Checkpoint with 100,000 ``null``
  members), interleaved with the legitimate reviews. Target: benign p99 < 10 ms.
* ``none``: the same legitimate client with no hostile client, for comparison (what the
  machine alone costs the benign p99 at that moment).

Each scenario runs ``--runs`` times (default 3, the scenarios interleaved), and the summary
prints the median benign p99 and the median of the peak RSS beside the targets.

Processes: the webhook (``webhook.app`` exactly as served, through ``webhook.limits``, its
certificate from ``webhook.certs``, cluster state from ``benchmarks.bench_webhook.snapshot``)
runs in its own subprocess, as in its pod; the hostile clients in a second, at ``nice 10``
(``--nice``: in a real attack their CPU is not on the webhook's node; on one 2-core machine they
would otherwise take the CPU the webhook is measured on); the legitimate
client in this one: one kept-alive TLS connection (as kube-apiserver keeps them), sending the
three recorded-pod reviews of ``bench_webhook`` in turn, alternating ``/mutate`` and
``/validate``, one every 10 ms; the webhook's ``VmRSS`` is read from ``/proc`` every 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import json
import os
import pathlib
import random
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import aiohttp

from benchmarks import bench_webhook
from kontinue import keys, telemetry
from webhook import app as app_module
from webhook import certs, settings, tls

MiB = 1024 * 1024
Obj = dict[str, Any]


# --- the webhook (subprocess) -------------------------------------------------------------------


async def _serve(cert_dir: pathlib.Path) -> None:
    serving = tls.ServingCertificate()
    serving.load((cert_dir / "tls.crt").read_bytes(), (cert_dir / "tls.key").read_bytes())
    # KONTINUE_WEBHOOK_* limits from the environment, as the Deployment would set them
    config = settings.Settings.from_env()
    tel = telemetry.setup("kontinue-webhook", record_unexported=False)  # as webhook/__main__.py
    application = app_module.create_app(
        config,
        state=bench_webhook.snapshot(),
        meter=tel.meter,
        registry=tel.registry,
        tracer=tel.tracer,
    )
    runner = app_module.runner(application)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    site = app_module.site(runner, ssl_context=serving.context, sock=sock)
    await site.start()
    gc.collect()  # as webhook.__main__.serve does once it is up
    gc.freeze()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until EOF
    print("REFUSED " + json.dumps(application[app_module.GUARD].refused), flush=True)
    await runner.cleanup()


# --- hostile clients (subprocess) ---------------------------------------------------------------


class Held:
    """Hostile connections open right now, and the most at once."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.opened = 0
        self.answers: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def connection(self, port: int, context: ssl.SSLContext) -> Any:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost"
        )
        self.now += 1
        self.opened += 1
        self.peak = max(self.peak, self.now)
        try:
            yield reader, writer
        finally:
            self.now -= 1
            writer.close()

    def answered(self, data: bytes) -> None:
        status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "closed"
        self.answers[status] = self.answers.get(status, 0) + 1


def _quiet(task: asyncio.Task[bytes]) -> None:
    """Retrieve a read's exception (a reset connection) so it is not reported at exit."""
    if not task.cancelled():
        task.exception()


async def _slow_headers(held: Held, port: int, context: ssl.SSLContext, stop: float) -> None:
    while time.monotonic() < stop:
        try:
            async with held.connection(port, context) as (reader, writer):
                writer.write(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n")
                read = asyncio.create_task(reader.read(4096))
                read.add_done_callback(_quiet)
                while not read.done() and time.monotonic() < stop:
                    writer.write(b"X-Slow: 1\r\n")
                    await asyncio.wait([read], timeout=1.0)
                if read.done():
                    held.answered(read.result())
                else:
                    read.cancel()
        except (OSError, ssl.SSLError):
            held.answered(b"")
        await asyncio.sleep(1.0)


async def _stalled_body(held: Held, port: int, context: ssl.SSLContext, stop: float) -> None:
    size = 8 * MiB
    chunk = b" " * (256 * 1024)
    while time.monotonic() < stop:
        try:
            async with held.connection(port, context) as (reader, writer):
                writer.write(
                    b"POST /validate HTTP/1.1\r\nHost: localhost\r\n"
                    b"Content-Type: application/json\r\n"
                    + f"Content-Length: {size}\r\n\r\n".encode()
                )
                read = asyncio.create_task(reader.read(4096))
                read.add_done_callback(_quiet)
                await asyncio.wait([read], timeout=0.05)  # refused at once: no body to send
                sent = 0
                while sent < size - 1 and not read.done() and time.monotonic() < stop:
                    piece = chunk[: min(len(chunk), size - 1 - sent)]
                    writer.write(piece)
                    sent += len(piece)
                    try:
                        await asyncio.wait_for(writer.drain(), timeout=2.0)
                    except TimeoutError:
                        break  # the server stopped reading (its buffer is full): stall here
                # stalled at the last byte: wait for the server's answer
                await asyncio.wait([read], timeout=max(0.0, stop - time.monotonic()))
                if read.done():
                    held.answered(read.result())
                else:
                    read.cancel()
        except (OSError, ssl.SSLError):
            held.answered(b"")
        await asyncio.sleep(1.0)


def hostile_reviews() -> list[bytes]:
    """Absurd but well-formed reviews (scenario ``mixed``)."""
    pod = bench_webhook._review(queue="cq-gpu", owner_uid="uid-restore", uid="h-1")
    out = []
    nulls = copy.deepcopy(pod)
    nulls["request"]["object"]["metadata"]["ownerReferences"] = [None] * 100_000
    out.append(nulls)
    empty = copy.deepcopy(pod)
    empty["request"]["object"]["metadata"]["ownerReferences"] = [{}] * 1000
    out.append(empty)
    annotated = copy.deepcopy(pod)
    annotated["request"]["object"]["metadata"]["annotations"] = {
        f"example.com/k{i}": "v" * 8 for i in range(20_000)
    }
    out.append(annotated)
    cp = copy.deepcopy(pod)
    cp["request"]["kind"] = {"group": keys.GROUP, "version": "v1alpha1", "kind": "Checkpoint"}
    cp["request"]["object"] = {
        "apiVersion": keys.API_VERSION,
        "kind": "Checkpoint",
        "metadata": {"name": "x", "namespace": "default"},
        "spec": {"members": [None] * 100_000},
    }
    out.append(cp)
    return [json.dumps(r).encode() for r in out]


async def _hostile_reviews(
    held: Held, port: int, context: ssl.SSLContext, stop: float, offset: int
) -> None:
    payloads = hostile_reviews()
    connector = aiohttp.TCPConnector(ssl=context, limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        i = offset
        while time.monotonic() < stop:
            body = payloads[i % len(payloads)]
            path = "/validate" if i % 2 else "/mutate"
            async with session.post(
                f"https://localhost:{port}{path}",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as response:
                await response.read()
                held.answers[str(response.status)] = held.answers.get(str(response.status), 0) + 1
            i += 1


async def _attack(port: int, trust: str, args: argparse.Namespace) -> None:
    # The attacker's CPU is not the webhook's node's in a real attack; on this one machine it is
    # niced so the kernel gives the webhook and the legitimate client the CPU first.
    os.nice(args.nice - os.nice(0))
    context = ssl.create_default_context(cadata=trust)
    held = Held()
    stop = time.monotonic() + args.seconds
    jobs = []
    for _ in range(args.slow):
        jobs.append(_slow_headers(held, port, context, stop))
    for _ in range(args.stalled):
        jobs.append(_stalled_body(held, port, context, stop))
    for i in range(args.hostile):
        jobs.append(_hostile_reviews(held, port, context, stop, i))
    random.shuffle(jobs)

    async def report() -> None:
        while time.monotonic() < stop:
            print(f"HELD {held.now}", flush=True)
            await asyncio.sleep(1.0)

    reporter = asyncio.create_task(report())
    tasks = []
    for job in jobs:  # ramp up over ~1 s rather than 500 handshakes in one tick
        tasks.append(asyncio.create_task(job))
        await asyncio.sleep(1.0 / max(1, len(jobs)))
    await asyncio.gather(*tasks, return_exceptions=True)
    reporter.cancel()
    print(
        "DONE " + json.dumps({"peak": held.peak, "opened": held.opened, "answers": held.answers}),
        flush=True,
    )


# --- the run (this process) ---------------------------------------------------------------------


def _rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _legit(port: int, trust: bytes, seconds: float) -> tuple[list[float], int]:
    payloads = list(bench_webhook.bodies().values())
    latencies: list[float] = []
    failures = 0
    context = ssl.create_default_context(cadata=trust.decode())
    connector = aiohttp.TCPConnector(ssl=context, limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        stop = time.monotonic() + seconds
        i = 0
        while time.monotonic() < stop:
            path = "/mutate" if i % 2 == 0 else "/validate"
            body = payloads[(i // 2) % len(payloads)]
            started = time.perf_counter()
            try:
                async with session.post(
                    f"https://localhost:{port}{path}",
                    data=body,
                    headers={"Content-Type": "application/json"},
                ) as response:
                    await response.read()
                    ok = response.status == 200
            except aiohttp.ClientError:
                ok = False
            elapsed = (time.perf_counter() - started) * 1000
            if ok:
                latencies.append(elapsed)
            else:
                failures += 1
            i += 1
            await asyncio.sleep(0.01)
    return latencies, failures


async def _scenario(
    name: str, args: argparse.Namespace, cert_dir: pathlib.Path
) -> dict[str, float]:
    me = [sys.executable, "-m", "benchmarks.bench_hostile"]
    server = await asyncio.create_subprocess_exec(
        *me, "--serve", str(cert_dir), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert server.stdout is not None
    assert server.stdin is not None
    port = int((await server.stdout.readline()).split()[1])
    await asyncio.sleep(0.5)
    baseline = _rss_mib(server.pid)
    attack_args = ["--slow", "0", "--stalled", "0", "--hostile", "0"]
    if name == "slow":
        attack_args = ["--slow", str(args.slow), "--stalled", str(args.stalled), "--hostile", "0"]
    elif name == "mixed":
        attack_args = ["--slow", "0", "--stalled", "0", "--hostile", str(args.hostile)]
    attack_args += ["--nice", str(args.nice)]
    total = args.warmup + args.seconds + 2
    attacker = await asyncio.create_subprocess_exec(
        *me,
        "--attack",
        str(port),
        str(cert_dir / "ca.crt"),
        "--seconds",
        str(total),
        *attack_args,
        stdout=asyncio.subprocess.PIPE,
    )
    held: list[int] = []
    done_line = ""

    async def follow() -> None:
        nonlocal done_line
        assert attacker.stdout is not None
        async for raw in attacker.stdout:
            line = raw.decode().strip()
            if line.startswith("HELD "):
                held.append(int(line.split()[1]))
            elif line.startswith("DONE "):
                done_line = line[5:]

    follower = asyncio.create_task(follow())
    rss: list[float] = []
    sampling = True

    async def sample() -> None:
        while sampling:
            rss.append(_rss_mib(server.pid))
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    await asyncio.sleep(args.warmup)
    trust = (cert_dir / "ca.crt").read_bytes()
    load_before = os.getloadavg()[0]
    latencies, failures = await _legit(port, trust, args.seconds)
    sampling = False
    await sampler
    await attacker.wait()
    await follower
    server.stdin.close()
    refused = (await server.stdout.read()).decode().strip()
    await asyncio.wait_for(server.wait(), 30)
    during = held[args.warmup : args.warmup + int(args.seconds)] or held or [0]
    print(
        f"== scenario {name} ({args.seconds:g} s measured after {args.warmup:g} s warm-up; "
        f"load average {load_before:.1f})"
    )
    if name == "slow":
        print(
            f"hostile connections: {args.slow} slow-header + {args.stalled} stalled 8 MiB "
            f"bodies; held open {min(during)}-{max(during)} during the measurement"
        )
    elif name == "none":
        print("hostile connections: none (the same legitimate client alone, for comparison)")
    else:
        print(
            f"hostile connections: {args.hostile}, each a closed loop of "
            f"{len(hostile_reviews())} absurd reviews "
            f"({', '.join(f'{len(b) // 1024} KiB' for b in hostile_reviews())})"
        )
    print(f"hostile answers (client side): {done_line}")
    print(f"webhook refusals: {refused.removeprefix('REFUSED ')}")
    print(
        f"webhook RSS: {baseline:.0f} MiB before, max {max(rss):.0f} MiB during (target < 200 MiB)"
    )
    if latencies:
        print(
            f"legitimate reviews: {len(latencies)} ok, {failures} failed; latency ms "
            f"p50 {_pct(latencies, 0.5):.2f}  p99 {_pct(latencies, 0.99):.2f}  "
            f"max {max(latencies):.2f} (target p99 < 10 ms)"
        )
    else:
        print(f"legitimate reviews: none answered, {failures} failed")
    return {
        "p99": _pct(latencies, 0.99) if latencies else float("inf"),
        "rss": max(rss),
        "load": load_before,
        "failed": float(failures),
    }


async def run(args: argparse.Namespace) -> None:
    if args.priority:
        # The webhook (started from here) and the legitimate client inherit it; the hostile
        # clients set their own niceness. See --priority.
        os.nice(args.priority)
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = pathlib.Path(tmp)
        bundle = certs.new_bundle(names=["localhost", "127.0.0.1"])
        (cert_dir / "tls.crt").write_bytes(bundle.serving.cert_pem)
        (cert_dir / "tls.key").write_bytes(bundle.serving.key_pem)
        (cert_dir / "ca.crt").write_bytes(bundle.trust)
        print(
            f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
            f"aiohttp {aiohttp.__version__}; hostile clients at nice {args.nice}, webhook and "
            f"legitimate client at nice {os.nice(0)}"
        )
        names = args.scenarios.split(",")
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for i in range(args.runs):
            print(f"-- run {i + 1} of {args.runs}")
            for name in names:  # interleaved, so the machine's load weighs on each alike
                runs[name].append(await _scenario(name, args, cert_dir))
        print()
        print(f"summary: median of {args.runs} runs (each run's figure in brackets)")
        for name in names:
            p99s = [r["p99"] for r in runs[name]]
            rss = [r["rss"] for r in runs[name]]
            loads = " / ".join(f"{r['load']:.1f}" for r in runs[name])
            p99 = statistics.median(p99s)
            print(
                f"  {name:5s} benign p99 {p99:.2f} ms "
                f"({' / '.join(f'{v:.2f}' for v in p99s)}; target < 10 ms: "
                f"{'met' if p99 < 10 else 'NOT met'}), webhook max RSS "
                f"{statistics.median(rss):.0f} MiB ({' / '.join(f'{v:.0f}' for v in rss)}; "
                f"target < 200 MiB: {'met' if statistics.median(rss) < 200 else 'NOT met'}); "
                f"load average {loads}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_hostile", description=__doc__)
    parser.add_argument("--scenarios", default="slow,mixed,none")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--nice", type=int, default=10, help="niceness of the hostile clients' process"
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=0,
        help="niceness increment for the webhook and the legitimate client (e.g. -10, as root: "
        "on a machine shared with other work, a stand-in for the webhook's own node)",
    )
    parser.add_argument("--slow", type=int, default=250)
    parser.add_argument("--stalled", type=int, default=250)
    parser.add_argument("--hostile", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--serve", metavar="CERT_DIR")
    parser.add_argument("--attack", nargs=2, metavar=("PORT", "CA"))
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(pathlib.Path(args.serve)))
    elif args.attack:
        trust = pathlib.Path(args.attack[1]).read_text()
        asyncio.run(_attack(int(args.attack[0]), trust, args))
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
