"""``python -m webhook`` as a real process: configuration errors, readiness, and SIGTERM.

The process reaches the API emulator (running in this test) through a kubeconfig file, exactly as
it would reach a cluster from outside one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from emulator.apiserver import server
from kontinue.kube import resources
from tests import fixtures

SYSTEM = "kontinue-system"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env.update(extra)
    return env


async def test_bad_setting_stops_the_process_naming_the_variable() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "webhook",
        env=_env(KONTINUE_WEBHOOK_PORT_NUMBER="https"),
        stderr=asyncio.subprocess.PIPE,
        cwd=fixtures.ROOT,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    assert b"KONTINUE_WEBHOOK_PORT_NUMBER: 'https' is not a port number" in stderr


@pytest.fixture
async def emulated() -> AsyncIterator[server.ApiServer]:
    async with server.ApiServer() as api:
        admin = api.client()
        for path in sorted((fixtures.MANIFESTS / "crds").glob("kontinue.dev_*.yaml")):
            api.install_crd(fixtures.load_one(path))
        for name in ("clusterqueues", "localqueues"):
            api.install_crd(
                fixtures.load_one(fixtures.UPSTREAM / f"kueue/crds/kueue.x-k8s.io_{name}.yaml")
            )
        await admin.create(
            resources.NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}},
        )
        await admin.create(
            resources.SECRETS, fixtures.load_one(fixtures.MANIFESTS / "webhook/secret.yaml")
        )
        yield api


async def _readyz(port: int, trust: bytes) -> int:
    context = ssl.create_default_context(cadata=trust.decode())
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"https://127.0.0.1:{port}/readyz",
            ssl=context,
            server_hostname="kontinue-webhook.kontinue-system.svc",
        ) as response,
    ):
        return response.status


async def test_process_becomes_ready_and_exits_cleanly_on_sigterm(
    emulated: server.ApiServer, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(emulated.kubeconfig(f"system:serviceaccount:{SYSTEM}:kontinue-webhook"))
    )
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "webhook",
        env=_env(
            KUBECONFIG=str(kubeconfig),
            KONTINUE_NAMESPACE=SYSTEM,
            KONTINUE_WEBHOOK_HOST="127.0.0.1",
            KONTINUE_WEBHOOK_PORT_NUMBER=str(port),
            KONTINUE_QUEUE_SYSTEMS="kueue",
            KONTINUE_WEBHOOK_DRAIN_SECONDS="0.2",
        ),
        stderr=asyncio.subprocess.PIPE,
        cwd=fixtures.ROOT,
    )
    try:
        admin = emulated.client()
        status = 0
        for _ in range(600):  # bounded: 30 s
            assert process.returncode is None, "webhook exited early"
            secret = await admin.get(resources.SECRETS, "kontinue-webhook-tls", namespace=SYSTEM)
            if "ca.crt" in (secret.get("data") or {}):
                try:
                    status = await _readyz(port, base64.b64decode(secret["data"]["ca.crt"]))
                except aiohttp.ClientConnectionError:
                    status = 0
                if status == 200:
                    break
            await asyncio.sleep(0.05)
        assert status == 200
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()[-2000:]
    log = stderr.decode()
    assert "serving" in log
    assert "draining for 0.2s" in log
