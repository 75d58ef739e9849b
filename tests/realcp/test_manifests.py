"""Proof 2: every overlay renders with the real kustomize and applies server-side.

``kueue``, ``volcano`` and ``both``, each with and without the cert-manager component, in
``kontinue-system`` and in another namespace: ``kubectl kustomize`` renders them, ``kubectl apply
--server-side`` accepts every object on kube-apiserver v1.36.2, and no ``kontinue-system`` is
left anywhere when the namespace is changed in the one place docs/install.md names. One
``images`` entry moves every container image and ``KONTINUE_IMAGE`` together.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realcp import controlplane, processes
from tests.realcp.install import IMAGE, OVERLAYS, Variant, containers, find

NOWHERE = "https://127.0.0.1:9"  # the discard port: nothing listens, nothing leaves the host
CERT_MANAGER_CRDS = Path(__file__).parents[1] / "fixtures" / "cert-manager" / "crds.yaml"

# Every overlay with and without cert-manager in another namespace, and the default install.
VARIANTS = [
    Variant(overlay, namespace="other", cert_manager=cert_manager)
    for overlay in OVERLAYS
    for cert_manager in (False, True)
] + [Variant("kueue")]


@pytest.fixture(scope="module")
def cert_manager_crds(crds: controlplane.ControlPlane) -> controlplane.ControlPlane:
    crds.kubectl("apply", "--server-side", "-f", str(CERT_MANAGER_CRDS))
    crds.wait_established(["issuers.cert-manager.io", "certificates.cert-manager.io"])
    return crds


@pytest.fixture
def webhook_configurations_removed(control_plane: controlplane.ControlPlane) -> Iterator[None]:
    """The rendered webhook configurations point at a Service nothing serves: remove them after
    the test, so later tests in this session are not sent to it."""
    yield
    control_plane.kubectl(
        "delete",
        "mutatingwebhookconfiguration,validatingwebhookconfiguration",
        "kontinue-webhook",
        "--ignore-not-found",
    )


@pytest.mark.parametrize(
    "variant",
    VARIANTS,
    ids=[
        f"{v.overlay}{'+cert-manager' if v.cert_manager else ''}-in-{v.namespace}" for v in VARIANTS
    ],
)
@pytest.mark.usefixtures("webhook_configurations_removed")
def test_overlay_renders_and_applies_server_side(
    cert_manager_crds: controlplane.ControlPlane, variant: Variant
) -> None:
    if variant.namespace == "other":
        variant = Variant(
            variant.overlay,
            namespace=f"kontinue-{secrets.token_hex(3)}",
            cert_manager=variant.cert_manager,
        )
    text = variant.render_text(cert_manager_crds)
    docs = variant.render(cert_manager_crds)
    ns = variant.namespace
    if ns != "kontinue-system":
        assert "kontinue-system" not in text, "a hard-coded namespace is left"
    assert find(docs, "Namespace", ns)
    for doc in docs:
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert {s["namespace"] for s in doc["subjects"]} == {ns}, doc["metadata"]["name"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        configuration = find(docs, kind, "kontinue-webhook")
        for webhook in configuration["webhooks"]:
            assert webhook["clientConfig"]["service"]["namespace"] == ns
            excluded = [
                e["values"]
                for e in webhook.get("namespaceSelector", {}).get("matchExpressions", [])
                if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"
            ]
            if webhook["name"].startswith(("pods.", "jobs.")):
                assert excluded == [["kube-system", ns]], webhook["name"]
        annotations = configuration["metadata"].get("annotations", {})
        if variant.cert_manager:
            assert annotations["cert-manager.io/inject-ca-from"] == f"{ns}/kontinue-webhook"
        else:
            assert "cert-manager.io/inject-ca-from" not in annotations
    if variant.cert_manager:
        assert find(docs, "Certificate", "kontinue-webhook")["spec"]["dnsNames"] == [
            f"kontinue-webhook.{ns}.svc",
            f"kontinue-webhook.{ns}.svc.cluster.local",
        ]

    # For real with the webhooks registered by a loopback URL nothing serves (a Service
    # reference is never dialled in this tier) ...
    applied = cert_manager_crds.kubectl(
        "apply",
        "--server-side",
        "--field-manager=kontinue-install",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(processes.url_registered(docs, NOWHERE)),
    )
    assert "error" not in applied.stderr.lower(), applied.stderr
    # ... and exactly as rendered, dry-run on the server (admission and validation, nothing
    # stored).
    cert_manager_crds.kubectl(
        "apply",
        "--server-side",
        "--field-manager=kontinue-install",
        "--dry-run=server",
        "-f",
        "-",
        stdin=text,
    )
    lines = [line for line in applied.stdout.splitlines() if line.strip()]
    assert len(lines) == len(docs), applied.stdout
    # Every namespaced object landed in the chosen namespace.
    listed = json.loads(
        cert_manager_crds.kubectl(
            "get",
            "deployments,services,serviceaccounts,secrets,roles,rolebindings,poddisruptionbudgets",
            "-n",
            ns,
            "-l",
            "app.kubernetes.io/name=kontinue",
            "-o",
            "json",
        ).stdout
    )["items"]
    assert {(o["kind"], o["metadata"]["name"]) for o in listed} >= {
        ("Deployment", "kontinue-webhook"),
        ("Deployment", "kontinue-bridge"),
        ("Service", "kontinue-webhook"),
    }
    if ns != "kontinue-system":
        cert_manager_crds.kubectl("delete", "namespace", ns, "--wait=false")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_images_entry_moves_every_image_and_kontinue_image(
    control_plane: controlplane.ControlPlane, overlay: str
) -> None:
    default = Variant(overlay).render(control_plane)
    images = {c["image"] for c in containers(default)}
    assert len(images) == 1
    assert images.pop().startswith(IMAGE + ":")
    moved = Variant(overlay, image="registry.example/kontinue:v9").render(control_plane)
    for container in containers(moved):
        assert container["image"] == "registry.example/kontinue:v9"
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        if container["name"] == "webhook":
            assert env["KONTINUE_IMAGE"] == "registry.example/kontinue:v9"
        # Values that are not the image stay as they were.
        assert env.get("KONTINUE_QUEUE_SYSTEMS") in ("kueue", "kueue,volcano", "volcano")


def _template_pod(docs: list[dict[str, Any]], namespace: str) -> dict[str, Any]:
    template = find(docs, "Deployment", "kontinue-webhook")["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "webhook-", "namespace": namespace},
        "spec": template["spec"],
    }


@pytest.mark.usefixtures("webhook_configurations_removed")
def test_critical_pods_are_admitted_thanks_to_the_shipped_quota(
    cert_manager_crds: controlplane.ControlPlane, namespace: str
) -> None:
    """The tier's apiserver limits system-cluster-critical pods to namespaces with a matching
    quota (as GKE does): the Deployment's pod is refused in a namespace without the shipped
    ResourceQuota and admitted in Kontinue's own namespace."""
    plane = cert_manager_crds
    variant = Variant("kueue", namespace=f"kontinue-{secrets.token_hex(3)}")
    docs = variant.render(plane)
    plane.kubectl(
        "apply",
        "--server-side",
        "--field-manager=kontinue-install",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(processes.url_registered(docs, NOWHERE)),
    )
    # Only admission by quota is under test here: no Kontinue webhook.
    plane.kubectl(
        "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "kontinue-webhook"
    )
    plane.kubectl("create", "serviceaccount", "kontinue-webhook", "-n", namespace)
    refused = plane.kubectl(
        "create", "-f", "-", stdin=json.dumps(_template_pod(docs, namespace)), check=False
    )
    assert refused.returncode != 0
    assert "insufficient quota to match these scopes" in refused.stderr
    ns = variant.namespace
    deadline = time.monotonic() + 30
    while (
        not json.loads(
            plane.kubectl(
                "get", "resourcequota", "kontinue-critical-pods", "-n", ns, "-o", "json"
            ).stdout
        )
        .get("status", {})
        .get("hard")
    ):
        assert time.monotonic() < deadline, "the quota controller never filled status.hard"
        time.sleep(0.3)
    admitted = json.loads(
        plane.kubectl(
            "create", "-o", "json", "-f", "-", stdin=json.dumps(_template_pod(docs, ns))
        ).stdout
    )
    assert admitted["spec"]["priorityClassName"] == "system-cluster-critical"
    plane.kubectl("delete", "namespace", ns, "--wait=false")
