"""Kontinue's settings are immune to the Service-link variables a kubelet injects.

With ``enableServiceLinks`` left on, a real kubelet v1.36.2 gave the webhook
``KONTINUE_WEBHOOK_PORT=tcp://<cluster IP>:443`` (for the Service ``kontinue-webhook``), which the
webhook read as its own port and exited. Now: no setting's name matches any name a Service can
produce (:data:`emulator.kubelet.servicelinks.LINK_NAME`), the Deployments turn service links off,
and each settings module, given the Deployment's env plus the exact variables a kubelet adds for
every Service the manifests create, parses to the same settings as without them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from emulator.kubelet import servicelinks
from queue_bridge import settings as bridge_settings
from tests import fixtures
from tests.unit import test_manifests
from webhook import settings as webhook_settings

MODULES = {"webhook": webhook_settings, "bridge": bridge_settings}


def _documents() -> list[dict[str, Any]]:
    """What the base installs (tests/realcp renders every overlay with the real kustomize)."""
    return test_manifests._documents(fixtures.MANIFESTS / "base")


def _names_read(module: Any) -> set[str]:
    source = Path(module.__file__).read_text()
    return set(re.findall(r"\"(KONTINUE_[A-Z0-9_]+)\"", source))


@pytest.mark.parametrize("component", MODULES)
def test_no_setting_name_is_a_service_link_name(component: str) -> None:
    names = _names_read(MODULES[component])
    assert names, "no KONTINUE_* names found"
    clashing = sorted(n for n in names if servicelinks.LINK_NAME.match(n))
    assert clashing == []


def test_the_deployments_turn_service_links_off() -> None:
    deployments = [d for d in _documents() if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {"kontinue-webhook", "kontinue-bridge"}
    for deployment in deployments:
        assert deployment["spec"]["template"]["spec"]["enableServiceLinks"] is False


@pytest.mark.parametrize("component", MODULES)
def test_settings_ignore_what_a_kubelet_injects_for_the_manifests_services(component: str) -> None:
    docs = _documents()
    services = [
        dict(d, spec={**d["spec"], "clusterIP": f"10.96.0.{i + 10}"})
        for i, d in enumerate(x for x in docs if x["kind"] == "Service")
    ]
    assert services
    namespace = "kontinue-system"
    for service in services:
        service["metadata"] = {**service["metadata"], "namespace": namespace}
    # As if service links were on (the default), and the kubernetes Service of default too.
    injected = servicelinks.variables(
        [
            *services,
            {
                "metadata": {"name": "kubernetes", "namespace": "default"},
                "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443}]},
            },
        ],
        namespace=namespace,
    )
    assert injected["KONTINUE_WEBHOOK_PORT"].startswith("tcp://")
    deployment = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == f"kontinue-{component}"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    own = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    own["KONTINUE_NAMESPACE"] = namespace  # the downward API
    settings_type = MODULES[component].Settings
    assert settings_type.from_env({**injected, **own}) == settings_type.from_env(own)
