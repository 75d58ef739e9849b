"""Fixtures of the real-control-plane tier (marker ``realcp``; docs/testing.md).

One control plane per pytest session (etcd, kube-apiserver and kube-controller-manager v1.36.2
from ``KUBEBUILDER_ASSETS``; kube-scheduler when a test asks for ``scheduler``), one namespace
per test. Without the assets every test here is skipped and the run's summary says so in one
line; with ``KONTINUE_REQUIRE_REALCP=1`` (``.ci/run`` sets it) missing assets fail the run.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml

from kontinue.kube import api, client
from tests.realcp import controlplane, processes
from tests.realcp.install import Variant

HERE = Path(__file__).parent
REPO = HERE.parent.parent
CRD_DIRS = (
    REPO / "manifests" / "crds",
    REPO / "tests" / "fixtures" / "upstream" / "kueue" / "crds",
    REPO / "tests" / "fixtures" / "upstream" / "volcano" / "crds",
)

_not_run: list[str] = []


def crd_names(directory: Path) -> list[str]:
    return [
        doc["metadata"]["name"]
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "CustomResourceDefinition"
    ]


def crd_source(directory: Path) -> list[str]:
    """kubectl's flag for a directory: kustomize (``-k``) where it has a kustomization."""
    if (directory / "kustomization.yaml").exists():
        return ["-k", str(directory)]
    return ["-f", str(directory)]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.realcp)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _not_run:
        terminalreporter.write_line(
            f"real-control-plane tier (tests/realcp): NOT RUN — {_not_run[0]}", yellow=True
        )


@pytest.fixture(scope="session")
def control_plane() -> Iterator[controlplane.ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager on 127.0.0.1 for the whole session."""
    try:
        assets = controlplane.find_assets()
    except controlplane.AssetsMissing as exc:
        if os.environ.get("KONTINUE_REQUIRE_REALCP") == "1":
            pytest.fail(f"KONTINUE_REQUIRE_REALCP=1 but {exc}", pytrace=False)
        _not_run.append(str(exc))
        pytest.skip(f"real-control-plane tier not run: {exc}")
    plane = controlplane.start(assets)
    try:
        plane.start_controller_manager()
        yield plane
    finally:
        controlplane.remove(plane)


@pytest.fixture(scope="session")
def scheduler(control_plane: controlplane.ControlPlane) -> controlplane.ControlPlane:
    """The same control plane with the real kube-scheduler running."""
    control_plane.start_scheduler()
    return control_plane


@pytest.fixture(scope="session")
def crds(control_plane: controlplane.ControlPlane) -> controlplane.ControlPlane:
    """Kontinue's CRDs and the upstream Kueue and Volcano CRDs, applied server-side, Established."""
    for directory in CRD_DIRS:
        control_plane.kubectl("apply", "--server-side", *crd_source(directory))
    control_plane.wait_established([n for d in CRD_DIRS for n in crd_names(d)])
    return control_plane


@pytest.fixture
async def admin(control_plane: controlplane.ControlPlane) -> AsyncIterator[api.Api]:
    """The product's own client (kubernetes-asyncio over real HTTPS) as ``system:masters``."""
    api_client = await client.api_client_from_dict(control_plane.kubeconfig())
    try:
        yield api.Api(api_client, field_manager="realcp-test")
    finally:
        await api_client.close()


@pytest.fixture
def namespace(
    control_plane: controlplane.ControlPlane, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace for one test, deleted (not waited for) afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug}-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@contextlib.contextmanager
def installed_overlay(
    plane: controlplane.ControlPlane, overlay: str
) -> Iterator[processes.Installed]:
    """``overlay`` (``kueue``, ``volcano``, ``both``) in a fresh namespace, URL-registered, and
    its webhook running; every program the test starts in ``installed.programs`` is stopped."""
    installed = processes.install(
        plane, Variant(overlay, namespace=f"kontinue-{secrets.token_hex(3)}")
    )
    try:
        installed.programs["webhook"] = processes.start_webhook(installed)
        yield installed
    finally:
        installed.uninstall_webhooks()
        for program in installed.programs.values():
            program.stop()
        plane.kubectl("delete", "namespace", installed.namespace, "--wait=false")


@pytest.fixture
def kontinue(crds: controlplane.ControlPlane) -> Iterator[processes.Installed]:
    """The kueue overlay (:func:`installed_overlay`)."""
    with installed_overlay(crds, "kueue") as installed:
        yield installed
