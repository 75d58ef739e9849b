"""Kontinue on the emulated cluster: installed from the repository's manifests, its two
deployables running as tasks of this process, each under its own service account.

The one wiring the demo (emulator/demo/stack.py), the end-to-end tests
(tests/integration/bridge/test_end_to_end.py, test_volcano_preemptions.py, the webhook's cluster
tests) and the soak (tests/soak/stack.py) share:

- :func:`install`: our CRDs (``manifests/crds``), the ``kontinue-system`` namespace, the webhook's
  empty TLS Secret and its webhook configurations (``manifests/webhook``), as ``kubectl apply``
  of the manifests would create them;
- :func:`start_webhook`: the real webhook (``webhook.__main__.serve``) on a local HTTPS socket,
  registered as the address of its Service, so the emulated apiserver calls it over HTTPS as
  kube-apiserver calls it;
- :func:`start_bridge`: one replica of the real bridge (``queue_bridge.app.run``), over HTTP
  through kubernetes-asyncio, its health server (``/healthz``, ``/metrics``) on a local socket;
- :func:`shut_down`: stop them together (each drains as on SIGTERM), then release their clients
  and sockets.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from emulator.apiserver import server
from kontinue import telemetry
from kontinue.kube import cacheset, client, resources
from queue_bridge import app as bridge_app
from queue_bridge import settings as bridge_settings
from webhook import __main__ as webhook_main
from webhook import settings as webhook_settings

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
SYSTEM = "kontinue-system"
WEBHOOK_USER = f"system:serviceaccount:{SYSTEM}:kontinue-webhook"
BRIDGE_USER = f"system:serviceaccount:{SYSTEM}:kontinue-bridge"
WEBHOOK_SERVICE = (SYSTEM, "kontinue-webhook", 443)
"""The webhook configurations' ``clientConfig.service`` (manifests/webhook/webhooks.yaml)."""

Obj = dict[str, Any]


def _documents(path: Path) -> list[Obj]:
    with path.open() as stream:
        return [doc for doc in yaml.load_all(stream, Loader=yaml.CSafeLoader) if doc]


async def install(api: server.ApiServer) -> None:
    """Our CRDs, the system namespace, the webhook's TLS Secret and webhook configurations."""
    for path in sorted((MANIFESTS / "crds").glob("kontinue.dev_*.yaml")):
        (crd,) = _documents(path)
        api.install_crd(crd)
    admin = api.client()
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}}
    await admin.create(resources.NAMESPACES, namespace)
    (secret,) = _documents(MANIFESTS / "webhook" / "secret.yaml")
    await admin.create(resources.SECRETS, secret)
    for doc in _documents(MANIFESTS / "webhook" / "webhooks.yaml"):
        mutating = doc["kind"] == "MutatingWebhookConfiguration"
        await admin.create(
            resources.MUTATING_WEBHOOKS if mutating else resources.VALIDATING_WEBHOOKS, doc
        )


def local_socket() -> socket.socket:
    """A TCP socket bound to a free port on 127.0.0.1 (the server listens on it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def webhook_config(
    queue_systems: tuple[str, ...] | None = None, *, image: str = "kontinue/kontinue:dev"
) -> webhook_settings.Settings:
    """The webhook's settings on the emulator: no certificate polling, no drain wait
    (``queue_systems`` None: the webhook's default)."""
    config = webhook_settings.Settings(
        namespace=SYSTEM, image=image, cert_poll_seconds=3600, drain_seconds=0
    )
    if queue_systems is None:
        return config
    return dataclasses.replace(config, queue_systems=queue_systems)


@dataclasses.dataclass
class Deployable:
    """The webhook or one bridge replica, running as a task until ``stop`` is set."""

    task: asyncio.Task[int]
    stop: asyncio.Event
    api_client: Any
    sock: socket.socket
    url: str
    """``https://127.0.0.1:<port>`` (the webhook) or ``http://…`` (a bridge's health server)."""

    async def release(self) -> None:
        """Close its API client and socket (after its task ended)."""
        await self.api_client.close()
        self.sock.close()


async def start_webhook(
    api: server.ApiServer,
    config: webhook_settings.Settings,
    *,
    stop: asyncio.Event,
    cache_options: cacheset.CacheOptions,
    tel: telemetry.Telemetry | None = None,
    register: bool = True,
    name: str | None = None,
) -> Deployable:
    """Serve the webhook; ``register``: at once the address of its Service (else the caller
    registers ``url`` under :data:`WEBHOOK_SERVICE` when it wants the apiserver to call it)."""
    sock = local_socket()
    url = f"https://127.0.0.1:{sock.getsockname()[1]}"
    if register:
        api.service_urls[WEBHOOK_SERVICE] = url
    api_client = await client.api_client_from_dict(api.kubeconfig(WEBHOOK_USER))
    task = asyncio.create_task(
        webhook_main.serve(
            config,
            stop=stop,
            api_client=api_client,
            sock=sock,
            cache_options=cache_options,
            tel=tel,
        ),
        name=name,
    )
    return Deployable(task, stop, api_client, sock, url)


async def start_bridge(
    api: server.ApiServer,
    config: bridge_settings.Settings,
    *,
    stop: asyncio.Event,
    cache_options: cacheset.CacheOptions,
    tel: telemetry.Telemetry | None = None,
    started: asyncio.Future[bridge_app.Controller] | None = None,
    name: str | None = None,
) -> Deployable:
    """Run one bridge replica (leader-elected with any others on the same Lease); ``started``
    receives its controller once built."""
    sock = local_socket()
    api_client = await client.api_client_from_dict(api.kubeconfig(BRIDGE_USER))
    task = asyncio.create_task(
        bridge_app.run(
            config,
            stop=stop,
            api_client=api_client,
            sock=sock,
            started=started,
            cache_options=cache_options,
            tel=tel,
        ),
        name=name,
    )
    return Deployable(task, stop, api_client, sock, f"http://127.0.0.1:{sock.getsockname()[1]}")


async def shut_down(deployables: Sequence[Deployable], *, timeout: float) -> None:  # noqa: ASYNC109
    """Stop them all and wait up to ``timeout`` seconds for every task (their failures are not
    raised here), then release their clients and sockets -- also when the wait times out, so
    a slow stop does not leak them behind the timeout error."""
    for deployable in deployables:
        deployable.stop.set()
    try:
        await asyncio.wait_for(
            asyncio.gather(*(d.task for d in deployables), return_exceptions=True), timeout
        )
    finally:
        for deployable in deployables:
            await deployable.release()
