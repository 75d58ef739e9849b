"""Which containers are the workload (kontinue.workload): annotation, accelerators, first."""

from __future__ import annotations

from typing import Any

import pytest

from kontinue import keys, workload

GPU = {"limits": {keys.GPU_RESOURCE: "1"}}
AMD = {"requests": {"amd.com/gpu": 2}}
Containers = list[tuple[str, dict[str, Any] | None]]


@pytest.mark.parametrize(
    ("containers", "annotation", "names", "reason", "warned"),
    [
        ([("istio-proxy", None), ("trainer", None)], None, ("istio-proxy",), "first", False),
        ([("istio-proxy", None), ("trainer", GPU)], None, ("trainer",), "accelerator", False),
        ([("a", GPU), ("b", AMD)], None, ("a", "b"), "accelerator", False),
        ([("a", {"limits": {keys.GPU_RESOURCE: "0"}}), ("b", None)], None, ("a",), "first", False),
        ([("vault", None), ("trainer", None)], "trainer", ("trainer",), "annotation", False),
        ([("x", None), ("y", None), ("z", None)], " z , x ", ("x", "z"), "annotation", False),
        ([("proxy", None), ("trainer", GPU)], "trainr", ("trainer",), "accelerator", True),
        ([("proxy", None), ("trainer", None)], "nope", ("proxy",), "first", True),
        ([], None, (), "first", False),
    ],
    ids=[
        "order-only",
        "gpu-wins-over-order",
        "every-accelerated",
        "zero-gpu-is-none",
        "annotation",
        "annotation-spec-order",
        "typo-falls-to-gpu",
        "typo-falls-to-first",
        "no-containers",
    ],
)
def test_choose(
    containers: Containers,
    annotation: str | None,
    names: tuple[str, ...],
    reason: str,
    warned: bool,
) -> None:
    choice = workload.choose(containers, annotation)
    assert (choice.names, choice.reason) == (names, reason)
    assert bool(choice.warnings) is warned
    if warned:
        assert "match no container" in choice.warnings[0]


def test_of_spec_reads_the_annotation_and_resources() -> None:
    spec = {"containers": [{"name": "log"}, {"name": "train", "resources": GPU}]}
    assert workload.of_spec(spec, None).names == ("train",)
    assert workload.of_spec(spec, {keys.WORKLOAD_CONTAINERS_ANNOTATION: "log"}).names == ("log",)
