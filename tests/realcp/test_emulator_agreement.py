"""Where the API emulator and the real kube-apiserver v1.36.2 must agree (docs/testing.md lists
every difference found and its fix). Each case writes the same object to both and compares what
comes back."""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

from emulator.apiserver import server
from kontinue.kube import api, resources
from tests import fixtures
from tests.realcp import controlplane


def _webhook_service() -> dict[str, Any]:
    (service,) = fixtures.load_all(fixtures.MANIFESTS / "webhook" / "service.yaml")
    return service


async def test_service_defaults_and_cluster_ip(admin: api.Api, namespace: str) -> None:
    """Found with the Service-link fix: the emulator allocated no cluster IP (so a kubelet
    could add no link variables) and defaulted nothing."""
    body = _webhook_service()
    body["metadata"]["namespace"] = namespace
    real = await admin.create(resources.SERVICES, copy.deepcopy(body), namespace=namespace)
    async with server.ApiServer() as emulated:
        await emulated.client().create(
            resources.NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        fake = await emulated.client().create(
            resources.SERVICES, copy.deepcopy(body), namespace=namespace
        )
    keys = (
        "type",
        "sessionAffinity",
        "internalTrafficPolicy",
        "ipFamilies",
        "ipFamilyPolicy",
        "ports",
    )
    assert {k: fake["spec"].get(k) for k in keys} == {k: real["spec"].get(k) for k in keys}
    for spec, service_range in (
        (real["spec"], controlplane.SERVICE_CIDR),
        (fake["spec"], "10.96.0.0/12"),
    ):
        assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network(service_range)
        assert spec["clusterIPs"] == [spec["clusterIP"]]
