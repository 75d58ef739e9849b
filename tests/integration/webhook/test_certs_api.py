"""webhook.certs' API edges against the emulator through the real kubernetes-asyncio client:
the Secret (create, adopt, renew, replicas racing) and caBundle (only our named configurations).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest

from emulator.apiserver import server
from kontinue.kube import api, client, resources
from tests import fixtures
from webhook import certs, settings

SYSTEM = "kontinue-system"
NAMES = settings.Settings().hostnames


@pytest.fixture
async def kube() -> AsyncIterator[tuple[server.ApiServer, api.Api]]:
    async with server.ApiServer() as emulated:
        await emulated.client().create(
            resources.NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}},
        )
        api_client = await client.api_client_from_dict(emulated.kubeconfig())
        try:
            yield emulated, api.Api(api_client)
        finally:
            await api_client.close()


async def _secret(kube: api.Api) -> dict[str, Any]:
    found: dict[str, Any] = await kube.get(resources.SECRETS, "tls", namespace=SYSTEM)
    return found


async def test_absent_secret_is_created_then_adopted(
    kube: tuple[server.ApiServer, api.Api],
) -> None:
    _, remote = kube
    first = await certs.ensure_secret(remote, namespace=SYSTEM, name="tls", names=NAMES)
    assert certs.from_secret_data((await _secret(remote))["data"]) == first
    again = await certs.ensure_secret(remote, namespace=SYSTEM, name="tls", names=NAMES)
    assert again == first


async def test_empty_manifest_secret_is_filled_and_keeps_its_metadata(
    kube: tuple[server.ApiServer, api.Api],
) -> None:
    _, remote = kube
    empty = fixtures.load_one(fixtures.MANIFESTS / "webhook/secret.yaml")
    empty["metadata"]["name"] = "tls"
    await remote.create(resources.SECRETS, empty)
    bundle = await certs.ensure_secret(remote, namespace=SYSTEM, name="tls", names=NAMES)
    stored = await _secret(remote)
    assert stored["metadata"]["labels"] == empty["metadata"]["labels"]
    assert certs.from_secret_data(stored["data"]) == bundle


async def test_replicas_racing_end_with_one_certificate(
    kube: tuple[server.ApiServer, api.Api],
) -> None:
    _, remote = kube
    await remote.create(
        resources.SECRETS,
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls", "namespace": SYSTEM}},
    )
    bundles = await asyncio.gather(
        *(certs.ensure_secret(remote, namespace=SYSTEM, name="tls", names=NAMES) for _ in range(4))
    )
    stored = certs.from_secret_data((await _secret(remote))["data"])
    assert all(b == stored for b in bundles)


async def test_expiring_certificate_is_renewed_under_the_same_ca(
    kube: tuple[server.ApiServer, api.Api],
) -> None:
    _, remote = kube
    first = await certs.ensure_secret(remote, namespace=SYSTEM, name="tls", names=NAMES)
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=340)
    renewed = await certs.ensure_secret(
        remote, namespace=SYSTEM, name="tls", names=NAMES, now=later
    )
    assert renewed.serving != first.serving
    assert renewed.ca == first.ca
    assert certs.needs_renewal(renewed, names=NAMES, now=later) == ""
    assert certs.from_secret_data((await _secret(remote))["data"]) == renewed


def _configuration(kind: str, name: str, hooks: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": hook,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": {"url": "https://127.0.0.1:1/x"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ],
            }
            for hook in hooks
        ],
    }


async def test_ca_bundle_goes_into_only_our_named_configurations(
    kube: tuple[server.ApiServer, api.Api],
) -> None:
    emulated, remote = kube
    admin = emulated.client()
    mutating = resources.MUTATING_WEBHOOKS
    validating = resources.VALIDATING_WEBHOOKS
    await admin.create(
        mutating, _configuration("MutatingWebhookConfiguration", "ours", ["a.x", "b.x"])
    )
    await admin.create(
        validating, _configuration("ValidatingWebhookConfiguration", "ours-v", ["c.x"])
    )
    await admin.create(
        mutating, _configuration("MutatingWebhookConfiguration", "someone-else", ["d.x"])
    )
    bundle = certs.new_bundle(names=NAMES)
    changed = await certs.patch_ca_bundle(
        remote, trust=bundle.trust, mutating="ours", validating="ours-v"
    )
    assert changed == 3
    encoded = base64.b64encode(bundle.trust).decode()
    for resource, name in ((mutating, "ours"), (validating, "ours-v")):
        for hook in (await admin.get(resource, name))["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == encoded
    other = await admin.get(mutating, "someone-else")
    assert "caBundle" not in other["webhooks"][0]["clientConfig"]
    # idempotent: nothing to write the second time
    assert (
        await certs.patch_ca_bundle(
            remote, trust=bundle.trust, mutating="ours", validating="ours-v"
        )
        == 0
    )
    # a configuration that is not installed is skipped, not an error
    assert (
        await certs.patch_ca_bundle(remote, trust=bundle.trust, mutating="gone", validating=None)
        == 0
    )
