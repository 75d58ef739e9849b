"""Level-triggered and leader-elected: a restart or a takeover mid-checkpoint loses nothing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp

from kontinue.kube import errors, resources
from queue_bridge import app
from tests.integration.bridge.conftest import BRIDGE_USER, SYSTEM, Bridge, Cluster
from tests.waiting import eventually


async def _no_pods_left(cluster: Cluster, pods: list[dict[str, object]]) -> bool:
    names = [p["metadata"]["name"] for p in pods]  # type: ignore[index]
    return not any([await cluster.pod_exists(str(n)) for n in names])


async def _entry_point(
    cluster: Cluster, tmp_path: Path, **settings: str
) -> tuple[asyncio.subprocess.Process, int]:
    """``python -m queue_bridge`` as a real process with a kubeconfig for the emulated cluster,
    health on a free port (returned), extra ``KONTINUE_*`` settings from ``settings``."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(cluster.emulated.kubeconfig(BRIDGE_USER)))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "KONTINUE_NAMESPACE": SYSTEM,
        "KONTINUE_POD_NAME": "bridge-process",
        "KONTINUE_HEALTH_HOST": "127.0.0.1",
        "KONTINUE_HEALTH_PORT_NUMBER": str(port),
        "KONTINUE_METRICS_PORT_NUMBER": "0",
        **settings,
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "queue_bridge", env=env, stderr=asyncio.subprocess.PIPE
    )
    return process, port


async def test_a_restart_mid_checkpoint_resumes_from_cluster_state(cluster: Cluster) -> None:
    await cluster.queues()
    job = await cluster.job()
    workload = await cluster.workload(job)
    pods = await cluster.pods(job)
    first = await cluster.start_bridge("bridge-a")
    await cluster.evict(workload)

    async def created() -> bool:
        return len(await cluster.checkpoints()) == 1

    await eventually(created, what="Checkpoint created")
    for pod in pods:
        await cluster.delete_pod(pod)

    async def in_progress() -> bool:
        return await cluster.phase() == "InProgress"

    await eventually(in_progress, what="InProgress")
    assert await first.shutdown() == app.STOPPED
    # While no bridge runs, the members save and exit; the finalizer keeps their final status.
    for pod in pods:
        await cluster.terminate(pod)
    assert all([await cluster.pod_exists(p["metadata"]["name"]) for p in pods])

    await cluster.start_bridge("bridge-a")

    async def succeeded() -> bool:
        return await cluster.phase() == "Succeeded"

    await eventually(succeeded, what="Succeeded after the restart")

    async def gone() -> bool:
        return await _no_pods_left(cluster, pods)

    await eventually(gone, what="finalizers removed after the restart")
    assert len(await cluster.checkpoints()) == 1


async def test_two_replicas_one_leads_and_the_other_takes_over_mid_checkpoint(
    cluster: Cluster,
) -> None:
    await cluster.queues()
    job = await cluster.job()
    workload = await cluster.workload(job)
    pods = await cluster.pods(job)
    a = await cluster.start_bridge("bridge-a")
    b = await cluster.start_bridge("bridge-b")
    leader = await cluster.leader(a, b)
    standby = b if leader is a else a
    lease = await cluster.admin.get(resources.LEASES, "kontinue-bridge", namespace=SYSTEM)
    assert lease["spec"]["holderIdentity"] == leader.controller.config.identity

    await cluster.evict(workload)

    async def created() -> bool:
        return len(await cluster.checkpoints()) == 1

    await eventually(created, what="Checkpoint created by the leader")
    for pod in pods:
        await cluster.delete_pod(pod)
    await cluster.terminate(pods[0])

    await leader.kill()  # mid-checkpoint: one member done, one still saving
    await cluster.terminate(pods[1])

    async def took_over() -> bool:
        return standby.leading

    await eventually(took_over, within=10, what="the standby leads")

    async def terminal() -> bool:
        return await cluster.phase() == "Succeeded"

    await eventually(terminal, what="Succeeded under the new leader")

    async def gone() -> bool:
        return await _no_pods_left(cluster, pods)

    await eventually(gone, what="no pod keeps the finalizer")
    assert len(await cluster.checkpoints()) == 1
    lease = await cluster.admin.get(resources.LEASES, "kontinue-bridge", namespace=SYSTEM)
    assert lease["spec"]["holderIdentity"] == standby.controller.config.identity


async def test_health_endpoints_tell_ready_leader_from_standby(cluster: Cluster) -> None:
    a = await cluster.start_bridge("bridge-a")
    b = await cluster.start_bridge("bridge-b")
    leader = await cluster.leader(a, b)
    standby = b if leader is a else a
    async with aiohttp.ClientSession() as session:

        async def get(bridge: Bridge, path: str) -> tuple[int, str]:
            async with session.get(bridge.health_url + path) as response:
                return response.status, await response.text()

        assert await get(leader, "/readyz") == (200, "ok: leader\n")
        assert await get(standby, "/readyz") == (200, "ok: standby\n")
        assert await get(leader, "/healthz") == (200, "ok\n")


async def test_the_entry_point_leads_serves_health_and_releases_its_lease_on_sigterm(
    cluster: Cluster, tmp_path: Path
) -> None:
    process, port = await _entry_point(cluster, tmp_path)
    try:
        async with aiohttp.ClientSession() as session:

            async def leading() -> bool:
                assert process.returncode is None
                try:
                    async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                        return await response.text() == "ok: leader\n"
                except aiohttp.ClientConnectionError:
                    return False

            await eventually(leading, within=20, what="the process leads")
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()[-2000:]
    lease = await cluster.admin.get(resources.LEASES, "kontinue-bridge", namespace=SYSTEM)
    assert lease["spec"]["holderIdentity"] == ""  # released: a standby takes over at once


async def test_a_watch_task_that_ends_ends_the_replica(cluster: Cluster) -> None:
    """A root task ending on its own (here: cancelled by someone else) is not swallowed."""
    bridge = await cluster.start_bridge("bridge-a")
    await cluster.leader(bridge)
    [watch] = [t for t in asyncio.all_tasks() if t.get_name() == "watch:pods"]
    watch.cancel()
    assert await asyncio.wait_for(bridge.task, 10) == app.FAILED


async def test_the_entry_point_exits_1_once_logged_when_its_lease_is_taken(
    cluster: Cluster, tmp_path: Path
) -> None:
    process, _ = await _entry_point(
        cluster,
        tmp_path,
        KONTINUE_LEASE_DURATION_SECONDS="3",
        KONTINUE_LEASE_RENEW_SECONDS="0.3",
        KONTINUE_LEASE_DEADLINE_SECONDS="2",
    )
    try:

        async def held() -> bool:
            assert process.returncode is None
            try:
                lease = await cluster.admin.get(
                    resources.LEASES, "kontinue-bridge", namespace=SYSTEM
                )
            except errors.NotFound:
                return False
            return bool(lease["spec"].get("holderIdentity") == "bridge-process")

        await eventually(held, within=20, what="the process holds the Lease")
        # Another holder takes the Lease (as after a partition): renewals fail from now on.
        while True:
            lease = await cluster.admin.get(resources.LEASES, "kontinue-bridge", namespace=SYSTEM)
            lease["spec"].update(
                holderIdentity="thief",
                leaseDurationSeconds=3600,
                renewTime=lease["spec"]["renewTime"],
            )
            try:
                await cluster.admin.replace(resources.LEASES, lease)
                break
            except errors.Conflict:
                continue
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    log = stderr.decode()
    assert process.returncode == app.LOST, log[-2000:]
    assert log.count("root task leader-election ended; ending the process") == 1, log[-2000:]
