"""Render Kontinue's install manifests with the real kustomize (``kubectl kustomize``).

A *variant* is one of the overlays under ``manifests/overlays/`` as a user would adapt it: the
overlay's own kustomization copied into a scratch directory (its relative paths rebased, nothing
else changed), then optionally the cert-manager component added, the namespace changed (the one
line docs/install.md says to edit) and an ``images`` entry set.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.realcp import controlplane

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
OVERLAYS = ("kueue", "volcano", "both")
CERT_MANAGER = MANIFESTS / "webhook" / "cert-manager"
IMAGE = "ghcr.io/kontinue/kontinue"


@dataclasses.dataclass(frozen=True)
class Variant:
    overlay: str
    namespace: str = "kontinue-system"
    cert_manager: bool = False
    image: str | None = None  # "NAME:TAG" for kustomize's images (newName + newTag)

    def kustomization(self, where: Path) -> dict[str, Any]:
        source = MANIFESTS / "overlays" / self.overlay
        kustomization: dict[str, Any] = yaml.safe_load((source / "kustomization.yaml").read_text())

        def rebase(ref: str) -> str:
            return os.path.relpath(source / ref, where)

        kustomization["resources"] = [rebase(r) for r in kustomization.get("resources", [])]
        kustomization["components"] = [rebase(c) for c in kustomization.get("components", [])]
        # Patch files: kustomize loads files only from under the kustomization's own directory,
        # so the copy carries their text inline (same patches, same order).
        kustomization["patches"] = [
            {
                **{k: v for k, v in p.items() if k != "path"},
                "patch": (source / p["path"]).read_text(),
            }
            if "path" in p
            else p
            for p in kustomization.get("patches", [])
        ]
        if self.cert_manager:
            kustomization["components"].append(os.path.relpath(CERT_MANAGER, where))
        kustomization["namespace"] = self.namespace
        if self.image:
            name, tag = self.image.rsplit(":", 1)
            kustomization["images"] = [{"name": IMAGE, "newName": name, "newTag": tag}]
        return kustomization

    def render(self, plane: controlplane.ControlPlane) -> list[dict[str, Any]]:
        return [doc for doc in yaml.safe_load_all(self.render_text(plane)) if doc]

    def render_text(self, plane: controlplane.ControlPlane) -> str:
        with tempfile.TemporaryDirectory(prefix="kontinue-variant-") as tmp:
            where = Path(tmp)
            (where / "kustomization.yaml").write_text(yaml.safe_dump(self.kustomization(where)))
            return plane.kubectl("kustomize", str(where)).stdout


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name} in the rendered manifests")


def containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        container
        for doc in docs
        if doc["kind"] == "Deployment"
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]
