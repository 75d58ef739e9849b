"""manifests/webhook/networkpolicy.yaml: it selects exactly the webhook's pods, opens only the
port the webhook listens on, and keeps the pod network out (issue 11 item 3). Which addresses
may connect is decided by the network plugin; this checks what the policy says, with Python's
ipaddress standing in for the plugin's CIDR match."""

from __future__ import annotations

import ipaddress
from typing import Any

from tests import fixtures

WEBHOOK = fixtures.MANIFESTS / "webhook"


def _policy() -> dict[str, Any]:
    policy: dict[str, Any] = fixtures.load_one(WEBHOOK / "networkpolicy.yaml")
    return policy


def _admits(address: str, port: int) -> bool:
    ip = ipaddress.ip_address(address)
    for rule in _policy()["spec"]["ingress"]:
        if port not in [p["port"] for p in rule["ports"]]:
            continue
        for peer in rule["from"]:
            block = peer["ipBlock"]
            network = ipaddress.ip_network(block["cidr"])
            if ip.version != network.version or ip not in network:
                continue
            if not any(ip in ipaddress.ip_network(e) for e in block.get("except", [])):
                return True
    return False


def test_it_selects_the_webhook_pods_and_is_installed() -> None:
    deployment = next(
        d for d in fixtures.load_all(WEBHOOK / "deployment.yaml") if d["kind"] == "Deployment"
    )
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = _policy()["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert _policy()["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert "networkpolicy.yaml" in (WEBHOOK / "kustomization.yaml").read_text()
    port = deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert [p["port"] for r in _policy()["spec"]["ingress"] for p in r["ports"]] == [port]


def test_the_apiserver_and_nodes_may_connect_and_pods_may_not() -> None:
    assert _admits("172.18.0.2", 9443)  # kind's control-plane node: the apiserver
    assert _admits("203.0.113.9", 9443)  # a hosted control plane outside the cluster
    assert not _admits("10.244.1.17", 9443)  # a pod
    assert not _admits("fd00:10:244::5", 9443)  # a pod, IPv6
    assert not _admits("172.18.0.2", 8080)  # any other port
