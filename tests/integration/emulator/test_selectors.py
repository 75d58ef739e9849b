"""List with label and field selectors over HTTP (every operator of apimachinery's grammar)."""

from __future__ import annotations

import pytest

from kontinue.kube import api, errors, resources
from tests.integration.emulator.conftest import pod


@pytest.fixture
async def pods(kube: api.Api) -> None:
    await kube.create(resources.PODS, pod("a", node="n1", labels={"tier": "gpu", "team": "x"}))
    await kube.create(resources.PODS, pod("b", node="n2", labels={"tier": "cpu"}))
    await kube.create(resources.PODS, pod("c", node=None))
    await kube.patch(
        resources.PODS,
        "b",
        {"status": {"phase": "Running"}},
        content_type=api.MERGE_PATCH,
        namespace="default",
        subresource="status",
    )


@pytest.mark.usefixtures("pods")
@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("tier=gpu", ["a"]),
        ("tier==gpu", ["a"]),
        ("tier!=gpu", ["b", "c"]),
        ("tier in (gpu, cpu)", ["a", "b"]),
        ("tier notin (gpu)", ["b", "c"]),
        ("team", ["a"]),
        ("!team", ["b", "c"]),
        ("tier,!team", ["b"]),
        ("tier in (gpu,cpu),team=x", ["a"]),
    ],
)
async def test_label_selectors(kube: api.Api, selector: str, names: list[str]) -> None:
    listed = await kube.list(resources.PODS, namespace="default", label_selector=selector)
    assert [p["metadata"]["name"] for p in listed["items"]] == names


@pytest.mark.usefixtures("pods")
@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("metadata.name=b", ["b"]),
        ("metadata.namespace=default,metadata.name!=b", ["a", "c"]),
        ("spec.nodeName=n1", ["a"]),
        ("spec.nodeName=", ["c"]),
        ("spec.nodeName!=", ["a", "b"]),
        ("status.phase=Running", ["b"]),
        ("status.phase!=Running", ["a", "c"]),
    ],
)
async def test_field_selectors(kube: api.Api, selector: str, names: list[str]) -> None:
    listed = await kube.list(resources.PODS, namespace="default", field_selector=selector)
    assert [p["metadata"]["name"] for p in listed["items"]] == names


@pytest.mark.usefixtures("pods")
async def test_unsupported_field_is_a_400_naming_it(kube: api.Api) -> None:
    with pytest.raises(
        errors.ClientError, match="field label not supported: spec.priority"
    ) as caught:
        await kube.list(resources.PODS, namespace="default", field_selector="spec.priority=1")
    assert caught.value.status == 400


@pytest.mark.usefixtures("pods")
async def test_cluster_wide_list_and_pagination(kube: api.Api) -> None:
    await kube.create(resources.NAMESPACES, {"metadata": {"name": "other"}})
    await kube.create(resources.PODS, pod("d", namespace="other"))
    everything = await kube.list(resources.PODS)
    assert len(everything["items"]) == 4
    first = await kube.list(resources.PODS, limit=3)
    assert len(first["items"]) == 3
    rest = await kube.list(resources.PODS, limit=3, continue_=first["metadata"]["continue"])
    names = [p["metadata"]["name"] for p in first["items"] + rest["items"]]
    assert sorted(names) == ["a", "b", "c", "d"]
    assert "continue" not in rest["metadata"]
