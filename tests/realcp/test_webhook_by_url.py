"""Issue 20 item 5 on a real kube-apiserver v1.36.2: a webhook registered by URL.

The real ``webhook.__main__.serve`` (self-managed certificate, ``KONTINUE_WEBHOOK_EXTRA_SANS``)
runs in this process on 127.0.0.1, writes its CA and serving certificate into a Secret, and
patches ``caBundle`` into a ValidatingWebhookConfiguration registered with
``clientConfig.url: https://127.0.0.1:<port>/validate``. kube-apiserver then calls it for a
Checkpoint CREATE, verifying the certificate for the IP address of the URL (Go's
crypto/tls: an IP host must match an IP SAN). With the IP among the extra SANs the webhook's
denial comes back; without it the apiserver cannot call the webhook at all (x509 error).
"""

from __future__ import annotations

import asyncio
import secrets
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kontinue import keys
from kontinue.kube import api, cacheset, client, errors, resources, watching
from tests import fixtures
from tests.realcp import controlplane
from webhook import __main__ as main
from webhook import settings

FAST = watching.Backoff(initial=0.05, factor=2.0, cap=0.5, jitter=0.5)


def _claiming_another_namespace(namespace: str) -> dict[str, Any]:
    """A Checkpoint the CRD schema accepts and only the webhook refuses (issue 11 item 2)."""
    return {
        "apiVersion": keys.API_VERSION,
        "kind": "Checkpoint",
        "metadata": {"name": "cp-evil", "namespace": namespace},
        "spec": {
            "lineage": {
                "namespace": "team-b",
                "ownerKind": "Job",
                "ownerName": "train",
                "ownerUid": "5f0c4a9e-0000-4000-8000-000000000001",
            },
            "trigger": {"source": "Manual", "reason": "Test", "time": "2026-12-03T10:00:00Z"},
            "members": [{"podName": "p", "podUid": "u"}],
        },
    }


def _registration(name: str, url: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "checkpoints.validate.kontinue.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {"url": url + "/validate"},
                "rules": [
                    {
                        "apiGroups": [keys.GROUP],
                        "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE"],
                        "resources": ["checkpoints"],
                        "scope": "Namespaced",
                    }
                ],
            }
        ],
    }


@pytest.fixture
async def by_url(
    crds: controlplane.ControlPlane, admin: api.Api, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[api.Api, str]]:
    """The webhook serving on 127.0.0.1, registered by URL; ``request.param`` = extra SANs."""
    extra: tuple[str, ...] = request.param
    name = f"kontinue-url-{secrets.token_hex(3)}"
    secret = fixtures.load_one(fixtures.MANIFESTS / "webhook/secret.yaml")
    secret["metadata"]["namespace"] = namespace
    await admin.create(resources.SECRETS, secret, namespace=namespace)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    url = f"https://127.0.0.1:{sock.getsockname()[1]}"
    await admin.create(resources.VALIDATING_WEBHOOKS, _registration(name, url))
    config = settings.Settings(
        namespace=namespace,
        mutating_configuration="",
        validating_configuration=name,
        image="registry.example/kontinue:test",
        cert_poll_seconds=3600,
        drain_seconds=0,
        queue_systems=(),
        extra_sans=extra,
    )
    api_client = await client.api_client_from_dict(crds.kubeconfig())
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
    try:
        async with asyncio.timeout(30):
            while True:
                if serving.done():
                    serving.result()
                hook = (await admin.get(resources.VALIDATING_WEBHOOKS, name))["webhooks"][0]
                if hook["clientConfig"].get("caBundle"):
                    break
                await asyncio.sleep(0.1)  # noqa: ASYNC110 - polling the real API
        yield admin, namespace
    finally:
        await admin.delete(resources.VALIDATING_WEBHOOKS, name)
        stop.set()
        await asyncio.wait_for(serving, 15)
        await api_client.close()
        sock.close()


@pytest.mark.parametrize("by_url", [("127.0.0.1",)], indirect=True)
async def test_kube_apiserver_calls_a_webhook_registered_by_ip_url(
    by_url: tuple[api.Api, str],
) -> None:
    admin, namespace = by_url
    with pytest.raises(errors.Invalid) as raised:
        await admin.create(
            resources.CHECKPOINTS, _claiming_another_namespace(namespace), namespace=namespace
        )
    message = str(raised.value)
    assert 'admission webhook "checkpoints.validate.kontinue.dev" denied' in message
    assert "spec.lineage.namespace" in message


@pytest.mark.parametrize("by_url", [()], indirect=True)
async def test_without_the_ip_san_kube_apiserver_cannot_call_it(
    by_url: tuple[api.Api, str],
) -> None:
    admin, namespace = by_url
    with pytest.raises(errors.ApiError) as raised:
        await admin.create(
            resources.CHECKPOINTS, _claiming_another_namespace(namespace), namespace=namespace
        )
    message = str(raised.value)
    assert "failed calling webhook" in message
    assert "x509" in message or "certificate" in message
