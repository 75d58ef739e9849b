"""Which containers are the workload (kontinue.workload): annotation, accelerators, first."""

from __future__ import annotations

from typing import Any

import pytest

from kontinue import fingerprint, keys, workload
from kontinue.models import core

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


PROXY_DIGEST = "sha256:" + "a" * 64
TRAINER_DIGEST = "sha256:" + "b" * 64
RAN_DIGEST = "sha256:" + "c" * 64


def _pod(trainer_resources: dict[str, Any] | None, annotation: str | None) -> core.Pod:
    trainer: dict[str, Any] = {"name": "trainer", "image": f"reg/trainer@{TRAINER_DIGEST}"}
    if trainer_resources:
        trainer["resources"] = trainer_resources
    return core.Pod.model_validate(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "annotations": {keys.WORKLOAD_CONTAINERS_ANNOTATION: annotation}
                if annotation
                else {},
            },
            "spec": {
                "containers": [
                    {"name": "istio-proxy", "image": f"reg/proxy@{PROXY_DIGEST}"},
                    trainer,
                ]
            },
        }
    )


@pytest.mark.parametrize(
    ("resources", "annotation"),
    [(GPU, None), (None, "trainer")],
    ids=["by-accelerator", "by-annotation"],
)
def test_the_fingerprints_image_digest_is_the_workload_containers(
    resources: dict[str, Any] | None, annotation: str | None
) -> None:
    """Issue 20 item 1: the fingerprint's digest is the workload container's, not that of a
    proxy listed first (which made every restore compare the proxy's image)."""
    pod = _pod(resources, annotation)
    assert fingerprint.of(pod).image_digest == TRAINER_DIGEST
    ran = pod.model_copy(
        update={
            "status": core.PodStatus.model_validate(
                {
                    "containerStatuses": [
                        {"name": "istio-proxy", "imageID": f"reg/proxy@{PROXY_DIGEST}"},
                        {"name": "trainer", "imageID": f"reg/trainer@{RAN_DIGEST}"},
                    ]
                }
            )
        }
    )
    assert fingerprint.of(ran).image_digest == RAN_DIGEST  # what the kubelet says it ran
