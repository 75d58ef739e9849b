"""``python -m emulator.demo.cli_session``: the session shown in docs/cli.md, captured for real.

Starts the demo's cluster (2 nodes x 4 GPUs, Kueue, Kontinue's real webhook and bridge, the
reference trainer in real processes) over HTTPS, writes a kubeconfig, and runs a sequence of
``kubectl kontinue`` commands — the installed console script, as a subprocess — printing each
command and its output as a console transcript (Markdown on stdout, or with ``--update
docs/cli.md`` into its session block). Between commands it only does what a user would do
with kubectl: create Jobs, wait. tests/integration/demo/test_cli_session.py captures it again
and compares it with docs/cli.md, all but what differs from run to run (:func:`normalized`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from emulator import gpus, nodes
from emulator.demo import scenario, stack, timeline
from emulator.jobs import backoff
from kontinue import keys
from kontinue.kube import resources

Obj = dict[str, Any]
SCRIPT = Path(sys.executable).with_name("kubectl-kontinue")
OPTIONS = scenario.Options(rate=5.0, checkpoint_seconds=0.5, grace_seconds=6)


class Session:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.lines: list[str] = []

    async def run(self, *args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            str(SCRIPT) if SCRIPT.exists() else shutil.which("kubectl-kontinue") or "false",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
        text = out.decode().rstrip()
        self.lines.append(f"$ kubectl kontinue {' '.join(args)}")
        if text:
            self.lines.append(text)
        if proc.returncode:
            self.lines.append(f"# (exit code {proc.returncode})")
        self.lines.append("")
        print(self.lines[-3] if len(self.lines) > 2 else "", file=sys.stderr, flush=True)
        return text


async def _running(admin: Any, job: str) -> Obj | None:
    listed = await admin.list(
        resources.PODS, namespace=scenario.NAMESPACE, label_selector={keys.JOB_NAME_LABEL: job}
    )
    for pod in listed["items"]:
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Running" and not pod["metadata"].get("deletionTimestamp"):
            return dict(pod)
    return None


async def _until_running(admin: Any, job: str, *, within: float = 120) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while await _running(admin, job) is None:
        if loop.time() > deadline:
            raise TimeoutError(f"{job} did not run")
        await asyncio.sleep(0.2)


async def _until_unschedulable(admin: Any, job: str, *, within: float = 120) -> None:
    """A pod of ``job`` exists and the scheduler said it fits no node."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        listed = await admin.list(
            resources.PODS, namespace=scenario.NAMESPACE, label_selector={keys.JOB_NAME_LABEL: job}
        )
        for pod in listed["items"]:
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                    return
        if loop.time() > deadline:
            raise TimeoutError(f"{job} was not found unschedulable")
        await asyncio.sleep(0.2)


async def _until_done(admin: Any, job: str, *, within: float = 120) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        got = await admin.get(resources.JOBS, job, namespace=scenario.NAMESPACE)
        if (got.get("status") or {}).get("succeeded"):
            return
        if loop.time() > deadline:
            raise TimeoutError(f"{job} did not finish")
        await asyncio.sleep(0.5)


async def capture(workdir: Path) -> str:
    specs = [nodes.NodeSpec(f"gpu-{x}", gpu=gpus.GpuProfile(count=4)) for x in "ab"]
    async with stack.running(
        workdir=workdir / "cluster",
        node_specs=specs,
        with_kontinue=True,
        policy=scenario.policy(OPTIONS),
        tls=True,
        pod_failure_backoff=backoff.DEFAULT_SECONDS,
    ) as system:
        admin = system.admin
        for obj in scenario.priority_classes():
            await admin.create(resources.PRIORITY_CLASSES, obj)
        await admin.create(
            resources.PRIORITY_CLASSES,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "urgent"},
                "value": 1000,
                "preemptionPolicy": "Never",
            },
        )
        for resource, obj in scenario.queues(8):
            await admin.create(resource, obj)
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(system.cluster.api.kubeconfig("alice")))
        session = Session(kubeconfig)
        await session.run("enable", "clusterqueue", scenario.CLUSTER_QUEUE, "--policy", "nfs")
        await session.run(
            "enable", "clusterqueue", scenario.CLUSTER_QUEUE, "--policy", scenario.POLICY
        )
        await scenario.wait_plumbed(system, OPTIONS)
        await session.run("status")
        for i in range(4):
            job = scenario.trainer_job(
                f"train-{i}", role=timeline.Role.SCAVENGER, gpus=1, steps=10**9, options=OPTIONS
            )
            await admin.create(resources.JOBS, job)
            await _until_running(admin, f"train-{i}")
        await asyncio.sleep(4)
        await session.run("list", "-o", "wide")
        urgent = scenario.trainer_job(
            "urgent", role=timeline.Role.PRIORITY, gpus=4, steps=25, options=OPTIONS
        )
        urgent["spec"]["template"]["spec"]["priorityClassName"] = "urgent"
        await admin.create(resources.JOBS, urgent)
        await _until_unschedulable(admin, "urgent")
        await session.run("defrag", "--for", "job/urgent", "--dry-run")
        await session.run("defrag", "--for", "job/urgent", "--wait")
        await _until_done(admin, "urgent")
        await asyncio.sleep(2)
        await session.run("move", "job/train-1", "--to-node", "gpu-a", "--wait")
        await asyncio.sleep(2)
        await session.run("list")
        await session.run("describe", "job/train-0")
        await session.run("drain", "gpu-a", "--wait")
        await session.run("list", "job/train-1", "-o", "yaml")
        return "\n".join(session.lines)


SESSION_HEADING = "## A session"
FENCE = "```console\n"


def session_block(doc: str) -> str:
    """The console block under :data:`SESSION_HEADING` in a Markdown document (docs/cli.md)."""
    start = doc.index(FENCE, doc.index(SESSION_HEADING)) + len(FENCE)
    return doc[start : doc.index("```", start)]


def splice(doc: str, transcript: str) -> str:
    """``doc`` with its session block replaced by ``transcript``."""
    start = doc.index(FENCE, doc.index(SESSION_HEADING)) + len(FENCE)
    end = doc.index("```", start)
    return doc[:start] + transcript.rstrip("\n") + "\n" + doc[end:]


_VOLATILE = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"), "TIME"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "UID"),
    (re.compile(r"\b([a-z]+(?:-\d+)?)-[0-9a-f]{10}\b"), r"\1-CHECKPOINT"),
    (re.compile(r"\b((?:train-\d+|urgent))-[a-z0-9]{5}\b"), r"\1-POD"),
    (re.compile(r"\bstep(:?) \d+"), r"step\1 N"),
    (re.compile(r"\b\d+(?:\.\d+)?(?:[dhm]\d*)?s?(?= ago\b)"), "AGE"),
    (re.compile(r"\b\d+(?:\.\d+)?(s|Ki|Mi|Gi| bytes)\b"), r"N\1"),
    (re.compile(r"\s+"), " "),
]


def normalized(transcript: str) -> list[tuple[str, tuple[str, ...]]]:
    """Per command, its output lines as a sorted tuple, with what differs from run to run
    (times, UIDs, generated names, steps, sizes, durations, column widths) replaced.

    Sorted: Events and saves that land in the same second may be listed in either order."""
    commands: list[tuple[str, list[str]]] = []
    for line in transcript.splitlines():
        for pattern, replacement in _VOLATILE:
            line = pattern.sub(replacement, line)
        line = line.strip()
        if line.startswith("$ "):
            commands.append((line, []))
        elif line and commands:
            commands[-1][1].append(line)
    return [(command, tuple(sorted(lines))) for command, lines in commands]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emulator.demo.cli_session", description=__doc__
    )
    parser.add_argument("--workdir", type=Path, help="keep the cluster's files here")
    parser.add_argument(
        "--update",
        type=Path,
        metavar="MARKDOWN",
        help=f"write the transcript into the console block under '{SESSION_HEADING}' "
        "(docs/cli.md) instead of printing it",
    )
    args = parser.parse_args(argv)
    if args.workdir is not None:
        transcript = asyncio.run(capture(args.workdir))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            transcript = asyncio.run(capture(Path(tmp)))
    if args.update is not None:
        args.update.write_text(splice(args.update.read_text(), transcript))
    else:
        print(transcript)
    return 0


if __name__ == "__main__":
    sys.exit(main())
