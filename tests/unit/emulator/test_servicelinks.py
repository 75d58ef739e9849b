"""The emulated kubelet's Service-link variables (emulator/kubelet/servicelinks.py).

The expected set for ``kontinue-webhook`` is the one observed on a real kubelet v1.36.2 (port
443 named ``https``): ``_SERVICE_HOST``, ``_SERVICE_PORT``, ``_SERVICE_PORT_HTTPS`` and the
Docker-link ``_PORT``, ``_PORT_443_TCP`` with ``_PROTO``, ``_PORT``, ``_ADDR``.
"""

from __future__ import annotations

from typing import Any

from emulator.kubelet import servicelinks


def _service(name: str, namespace: str, ip: str, *ports: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterIP": ip, "ports": list(ports)},
    }


WEBHOOK = _service(
    "kontinue-webhook", "kontinue-system", "10.96.0.17", {"name": "https", "port": 443}
)
KUBERNETES = _service("kubernetes", "default", "10.96.0.1", {"name": "https", "port": 443})


def test_the_recorded_set_for_the_webhook_service() -> None:
    got = servicelinks.variables([WEBHOOK], namespace="kontinue-system")
    assert got == {
        "KONTINUE_WEBHOOK_SERVICE_HOST": "10.96.0.17",
        "KONTINUE_WEBHOOK_SERVICE_PORT": "443",
        "KONTINUE_WEBHOOK_SERVICE_PORT_HTTPS": "443",
        "KONTINUE_WEBHOOK_PORT": "tcp://10.96.0.17:443",
        "KONTINUE_WEBHOOK_PORT_443_TCP": "tcp://10.96.0.17:443",
        "KONTINUE_WEBHOOK_PORT_443_TCP_PROTO": "tcp",
        "KONTINUE_WEBHOOK_PORT_443_TCP_PORT": "443",
        "KONTINUE_WEBHOOK_PORT_443_TCP_ADDR": "10.96.0.17",
    }
    assert all(servicelinks.LINK_NAME.match(name) for name in got)


def test_only_the_pods_namespace_and_the_kubernetes_service() -> None:
    other = _service("elsewhere", "team-b", "10.96.0.9", {"port": 80})
    got = servicelinks.variables([WEBHOOK, KUBERNETES, other], namespace="kontinue-system")
    assert "KUBERNETES_SERVICE_HOST" in got
    assert "ELSEWHERE_SERVICE_HOST" not in got
    assert "KONTINUE_WEBHOOK_PORT" in got


def test_enable_service_links_false_leaves_only_the_kubernetes_service() -> None:
    got = servicelinks.variables(
        [WEBHOOK, KUBERNETES], namespace="kontinue-system", enable_service_links=False
    )
    assert got
    assert all(name.startswith("KUBERNETES_") for name in got)


def test_headless_and_unnamed_ports() -> None:
    headless = _service("db", "ns", "None", {"port": 5432})
    udp = _service("dns-cache", "ns", "10.96.0.10", {"port": 53, "protocol": "UDP"})
    got = servicelinks.variables([headless, udp], namespace="ns")
    assert not any(name.startswith("DB_") for name in got)
    assert got["DNS_CACHE_PORT"] == "udp://10.96.0.10:53"
    assert got["DNS_CACHE_PORT_53_UDP_PROTO"] == "udp"
    assert "DNS_CACHE_SERVICE_PORT_" not in "".join(got)  # no named port
