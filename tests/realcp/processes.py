"""Kontinue installed on the real control plane, its two programs run as local processes.

:func:`install` renders an overlay with the real kustomize (:mod:`tests.realcp.install`),
switches each webhook's ``clientConfig`` from the Service to ``https://127.0.0.1:PORT/<path>``
(the only change: nothing routes Service IPs here) and applies it server-side. The webhook and
the bridge then run as the console scripts the Deployments run (``kontinue-webhook``,
``kontinue-bridge``), authenticated as the ServiceAccounts the manifests create with TokenRequest
tokens (``kubectl create token``), so they get exactly the rendered RBAC.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.realcp import controlplane
from tests.realcp.install import Variant, find

BIN = Path(sys.executable).parent


def url_registered(docs: list[dict[str, Any]], url: str) -> list[dict[str, Any]]:
    """The same documents with every webhook's Service reference replaced by ``url`` + path."""
    out = []
    for doc in docs:
        if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            doc = {**doc, "webhooks": [dict(w) for w in doc["webhooks"]]}
            for webhook in doc["webhooks"]:
                path = webhook["clientConfig"]["service"].get("path", "")
                webhook["clientConfig"] = {"url": url + path}
        out.append(doc)
    return out


def install(
    plane: controlplane.ControlPlane, variant: Variant, *, webhook_port: int | None = None
) -> Installed:
    port = webhook_port or controlplane.free_port()
    docs = url_registered(variant.render(plane), f"https://127.0.0.1:{port}")
    plane.kubectl(
        "apply",
        "--server-side",
        "--field-manager=kontinue-install",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(docs),
    )
    return Installed(variant.namespace, port, docs, plane)


def token(plane: controlplane.ControlPlane, namespace: str, account: str) -> str:
    """A TokenRequest token of ``namespace/account`` (``kubectl create token``)."""
    return plane.kubectl(
        "create", "token", account, "-n", namespace, "--duration=2h"
    ).stdout.strip()


def token_kubeconfig(plane: controlplane.ControlPlane, namespace: str, account: str) -> Path:
    """A kubeconfig holding a TokenRequest token of ``namespace/account``."""
    return plane.kubeconfig_file(
        f"system:serviceaccount:{namespace}:{account}", token=token(plane, namespace, account)
    )


@dataclasses.dataclass
class Program:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    port: int = 0

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait (SIGKILL after ``timeout``); the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


@dataclasses.dataclass
class Installed:
    namespace: str
    webhook_port: int
    docs: list[dict[str, Any]]
    plane: controlplane.ControlPlane
    programs: dict[str, Program] = dataclasses.field(default_factory=dict)
    """What runs for this install (stopped by the ``kontinue`` fixture)."""

    def uninstall_webhooks(self) -> None:
        self.plane.kubectl(
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "kontinue-webhook",
            "--ignore-not-found",
        )


def _env(kubeconfig: Path, settings: dict[str, str]) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KONTINUE_", "KUBERNETES_")) and k != "KUBECONFIG"
    }
    return {**base, "KUBECONFIG": str(kubeconfig), **settings}


def start(
    plane: controlplane.ControlPlane,
    program: str,
    *,
    kubeconfig: Path,
    settings: dict[str, str],
    name: str | None = None,
) -> Program:
    name = name or program
    log = plane.workdir / f"{name}-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [str(BIN / program)],
            env=_env(kubeconfig, settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Program(name, popen, log)


def container_env(installed: Installed, deployment: str) -> dict[str, str]:
    """The literal env of the rendered Deployment's container (what a kubelet would set)."""
    (container,) = find(installed.docs, "Deployment", deployment)["spec"]["template"]["spec"][
        "containers"
    ]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    env["KONTINUE_NAMESPACE"] = installed.namespace  # fieldRef metadata.namespace
    return env


def start_webhook(installed: Installed, **settings: str) -> Program:
    plane = installed.plane
    env = {
        **container_env(installed, "kontinue-webhook"),
        "KONTINUE_WEBHOOK_HOST": "127.0.0.1",
        "KONTINUE_WEBHOOK_PORT_NUMBER": str(installed.webhook_port),
        "KONTINUE_WEBHOOK_EXTRA_SANS": "127.0.0.1",
        "KONTINUE_WEBHOOK_DRAIN_SECONDS": "0",
        **settings,
    }
    kubeconfig = token_kubeconfig(plane, installed.namespace, "kontinue-webhook")
    program = start(plane, "kontinue-webhook", kubeconfig=kubeconfig, settings=env)
    deadline = time.monotonic() + 60
    while not _ready(f"https://127.0.0.1:{installed.webhook_port}/readyz"):
        if program.popen.poll() is not None or time.monotonic() > deadline:
            program.stop()
            raise AssertionError(f"webhook not ready:\n{program.tail()}")
        time.sleep(0.2)
    return program


def start_bridge(installed: Installed, *, identity: str = "bridge-0", **settings: str) -> Program:
    plane = installed.plane
    port = controlplane.free_port()
    env = {
        **container_env(installed, "kontinue-bridge"),
        "KONTINUE_POD_NAME": identity,
        "KONTINUE_HEALTH_HOST": "127.0.0.1",
        "KONTINUE_HEALTH_PORT_NUMBER": str(port),
        "KONTINUE_METRICS_PORT_NUMBER": "0",
        **settings,
    }
    kubeconfig = token_kubeconfig(plane, installed.namespace, "kontinue-bridge")
    program = start(plane, "kontinue-bridge", kubeconfig=kubeconfig, settings=env, name=identity)
    program.port = port
    return program


def _ready(url: str) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # readiness only; the apiserver verifies for real
    with (
        contextlib.suppress(OSError, urllib.error.URLError),
        urllib.request.urlopen(url, context=context, timeout=2) as response,
    ):
        return bool(response.status == 200)
    return False


def bridge_ready(program: Program) -> bool:
    port = program.port
    with (
        contextlib.suppress(OSError, urllib.error.URLError),
        urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response,
    ):
        return bool(response.status == 200)
    return False
