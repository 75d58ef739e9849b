"""Loading test fixtures (copied data, see tests/fixtures/README.md) and our manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
UPSTREAM = FIXTURES / "upstream"
MANIFESTS = ROOT / "manifests"


def load_all(path: Path) -> list[dict[str, Any]]:
    """Every YAML document in ``path`` (empty documents skipped)."""
    with path.open() as stream:
        return [doc for doc in yaml.load_all(stream, Loader=yaml.CSafeLoader) if doc]


def load_one(path: Path) -> dict[str, Any]:
    (doc,) = load_all(path)
    return doc


def crd_schema(path: Path, version: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one served version of the CRD in ``path``."""
    crd = load_one(path)
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(f"{path.name} serves no version {version}")


def upstream_examples(kind: str) -> list[dict[str, Any]]:
    """Every upstream example object of ``kind`` (Kueue and Volcano)."""
    found = []
    for path in sorted(UPSTREAM.glob("*/examples/*.yaml")):
        found += [doc for doc in load_all(path) if doc.get("kind") == kind]
    return found
