"""The environment variables a kubelet adds to every container for Services (pure).

kubernetes/kubernetes ``pkg/kubelet/kubelet_pods.go`` (``getServiceEnvVarMap``): the Services
of the pod's namespace when ``spec.enableServiceLinks`` is true (the default), and always the
``kubernetes`` Service of ``default``; only Services with a cluster IP (not headless).
``pkg/kubelet/envvars/envvars.go`` (``FromServices``, ``makeLinkVariables``) names them: the
Service name upper-cased with ``-`` as ``_`` (``kontinue-webhook`` → ``KONTINUE_WEBHOOK``), then
``_SERVICE_HOST``, ``_SERVICE_PORT`` (first port), ``_SERVICE_PORT_<PORT NAME>`` per named port,
and the Docker-link set ``_PORT`` (``tcp://IP:PORT`` of the first port) and, per port,
``_PORT_<port>_<PROTO>`` with ``_PROTO``, ``_PORT``, ``_ADDR``. Observed on a real kubelet
v1.36.2 for the Service ``kontinue-webhook`` (port 443 named ``https``): its webhook read
``KONTINUE_WEBHOOK_PORT=tcp://<cluster IP>:443`` as its own port and exited.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASTER_SERVICES = frozenset({"kubernetes"})

LINK_NAME = re.compile(
    r"^[A-Z][A-Z0-9_]*_("
    r"SERVICE_HOST|SERVICE_PORT|SERVICE_PORT_[A-Z0-9_]+|PORT|PORT_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?"
    r")$"
)
"""Every name ``FromServices`` can produce for some Service (any name, any port)."""


def env_name(name: str) -> str:
    return name.replace("-", "_").upper()


def _service_variables(service: Mapping[str, Any]) -> dict[str, str]:
    spec = service.get("spec") or {}
    ip = spec.get("clusterIP") or ""
    ports = spec.get("ports") or []
    if not ip or ip == "None" or not ports:
        return {}
    prefix = env_name(service["metadata"]["name"])
    out = {f"{prefix}_SERVICE_HOST": ip, f"{prefix}_SERVICE_PORT": str(ports[0]["port"])}
    for port in ports:
        if port.get("name"):
            out[f"{prefix}_SERVICE_PORT_{env_name(port['name'])}"] = str(port["port"])
    host = f"[{ip}]" if ":" in ip else ip
    for index, port in enumerate(ports):
        protocol = port.get("protocol") or "TCP"
        url = f"{protocol.lower()}://{host}:{port['port']}"
        if index == 0:
            out[f"{prefix}_PORT"] = url
        port_prefix = f"{prefix}_PORT_{port['port']}_{protocol.upper()}"
        out[port_prefix] = url
        out[f"{port_prefix}_PROTO"] = protocol.lower()
        out[f"{port_prefix}_PORT"] = str(port["port"])
        out[f"{port_prefix}_ADDR"] = ip
    return out


def variables(
    services: Iterable[Mapping[str, Any]], *, namespace: str, enable_service_links: bool = True
) -> dict[str, str]:
    """The Service-link variables of a pod in ``namespace`` (``getServiceEnvVarMap``)."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for service in services:
        meta = service["metadata"]
        name, ns = meta["name"], meta.get("namespace", "")
        if ns == "default" and name in MASTER_SERVICES:
            chosen.setdefault(name, service)
        elif ns == namespace and enable_service_links:
            chosen[name] = service
    out: dict[str, str] = {}
    for service in chosen.values():
        out.update(_service_variables(service))
    return out
