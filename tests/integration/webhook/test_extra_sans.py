"""Issue 20 item 5: a webhook registered by URL (``clientConfig.url: https://<ip>:<port>/...``, as
on hosted control planes, local clusters and the real-control-plane tier) is called at an
address the Service names do not cover, so the self-managed certificate must carry it.

The real ``webhook.__main__.serve`` runs against the API emulator with
``KONTINUE_WEBHOOK_EXTRA_SANS``; it writes its certificate, patches caBundle into a
ValidatingWebhookConfiguration registered by URL, and the emulated apiserver calls that URL
verifying the certificate against the caBundle for the IP address (Python's ssl, as Go's
crypto/tls does: an IP in the URL must match an IP SAN). Without the setting the same call
fails certificate verification — the control that shows the check is real.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from emulator.apiserver import server
from kontinue import keys
from kontinue.kube import cacheset, client, errors, resources, watching
from tests import fixtures
from webhook import __main__ as main
from webhook import certs, settings

SYSTEM = "kontinue-system"
WEBHOOK_USER = f"system:serviceaccount:{SYSTEM}:kontinue-webhook"
FAST = watching.Backoff(initial=0.01, factor=2.0, cap=0.1, jitter=0.5)

BAD_POLICY = {
    "apiVersion": keys.API_VERSION,
    "kind": "CheckpointPolicy",
    "metadata": {"name": "both"},
    "spec": {"storage": {"pvc": {"claimName": "x"}, "hostPath": {"path": "/x"}}},
}


def _by_url(url: str) -> dict[str, object]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "kontinue-webhook"},
        "webhooks": [
            {
                "name": "checkpointpolicies.validate.kontinue.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {"url": url + "/validate"},
                "rules": [
                    {
                        "apiGroups": [keys.GROUP],
                        "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["checkpointpolicies"],
                        "scope": "Cluster",
                    }
                ],
            }
        ],
    }


async def _bundle_published(emulated: server.ApiServer, serving: asyncio.Task[Any]) -> None:
    admin = emulated.client()
    async with asyncio.timeout(15):
        while True:
            if serving.done():
                serving.result()
            configuration = await admin.get(resources.VALIDATING_WEBHOOKS, "kontinue-webhook")
            if configuration["webhooks"][0]["clientConfig"].get("caBundle"):
                return
            await asyncio.sleep(0.05)  # noqa: ASYNC110 - polling the emulated API


@pytest.fixture
async def emulated() -> AsyncIterator[server.ApiServer]:
    async with server.ApiServer(bookmark_interval=0.2) as api_server:
        admin = api_server.client()
        for path in sorted((fixtures.MANIFESTS / "crds").glob("kontinue.dev_*.yaml")):
            api_server.install_crd(fixtures.load_one(path))
        await admin.create(
            resources.NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}},
        )
        await admin.create(
            resources.SECRETS, fixtures.load_one(fixtures.MANIFESTS / "webhook/secret.yaml")
        )
        yield api_server


async def _serving_by_url(
    emulated: server.ApiServer, extra_sans: tuple[str, ...]
) -> tuple[asyncio.Task[Any], asyncio.Event, socket.socket, str, Any]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    url = f"https://127.0.0.1:{sock.getsockname()[1]}"
    await emulated.client().create(resources.VALIDATING_WEBHOOKS, _by_url(url))
    config = settings.Settings(
        namespace=SYSTEM,
        image="registry.example/kontinue:test",
        cert_poll_seconds=3600,
        drain_seconds=0,
        queue_systems=(),
        extra_sans=extra_sans,
    )
    api_client = await client.api_client_from_dict(emulated.kubeconfig(WEBHOOK_USER))
    stop = asyncio.Event()
    serving = asyncio.create_task(
        main.serve(
            config,
            stop=stop,
            api_client=api_client,
            sock=sock,
            cache_options=cacheset.CacheOptions(backoff=FAST),
        )
    )
    await _bundle_published(emulated, serving)
    return serving, stop, sock, url, api_client


async def test_the_apiserver_calls_a_url_registered_webhook_at_its_ip(
    emulated: server.ApiServer,
) -> None:
    serving, stop, sock, url, api_client = await _serving_by_url(
        emulated, ("127.0.0.1", "webhook.example")
    )
    try:
        with pytest.raises(errors.Invalid, match="checkpointpolicies.validate.kontinue.dev"):
            await emulated.client().create(resources.CHECKPOINT_POLICIES, BAD_POLICY)

        secret = await emulated.client().get(
            resources.SECRETS, "kontinue-webhook-tls", namespace=SYSTEM
        )
        leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "webhook.example" in sans.get_values_for_type(x509.DNSName)
        assert "kontinue-webhook.kontinue-system.svc" in sans.get_values_for_type(x509.DNSName)

        # and a plain TLS client verifying the IP SAN, no server_hostname override
        trust = base64.b64decode(secret["data"]["ca.crt"]).decode()
        context = ssl.create_default_context(cadata=trust)
        async with (
            aiohttp.ClientSession() as session,
            session.get(url + "/healthz", ssl=context) as response,
        ):
            assert response.status == 200
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)
        await api_client.close()
        sock.close()


async def test_without_the_ip_san_the_apiserver_cannot_call_it(
    emulated: server.ApiServer,
) -> None:
    serving, stop, sock, _, api_client = await _serving_by_url(emulated, ())
    try:
        with pytest.raises(errors.ApiError, match="failed calling webhook") as raised:
            await emulated.client().create(resources.CHECKPOINT_POLICIES, BAD_POLICY)
        assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value) or "certificate" in str(
            raised.value
        )
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)
        await api_client.close()
        sock.close()


def test_adding_an_extra_san_reissues_the_serving_certificate() -> None:
    before = settings.Settings()
    after = settings.Settings(extra_sans=("10.0.0.7", "webhook.example"))
    bundle = certs.new_bundle(names=before.hostnames)
    assert certs.needs_renewal(bundle, names=before.hostnames) == ""
    assert "10.0.0.7" in certs.needs_renewal(bundle, names=after.hostnames)


def test_extra_sans_setting() -> None:
    config = settings.Settings.from_env(
        {"KONTINUE_WEBHOOK_EXTRA_SANS": " 10.0.0.7, webhook.example ,::1"}
    )
    assert config.extra_sans == ("10.0.0.7", "webhook.example", "::1")
    assert config.hostnames[-3:] == ["10.0.0.7", "webhook.example", "::1"]
    for bad in ("under_score.example", "a b", "-x.example"):
        with pytest.raises(ValueError, match="KONTINUE_WEBHOOK_EXTRA_SANS"):
            settings.Settings.from_env({"KONTINUE_WEBHOOK_EXTRA_SANS": bad})
