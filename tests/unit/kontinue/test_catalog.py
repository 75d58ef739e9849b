"""The catalog's decisions: which checkpoint to restore, which to expire, and fingerprints."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from kontinue import catalog, keys
from kontinue.models import checkpoint, core, policy
from tests import fixtures

T0 = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.UTC)
LINEAGE = checkpoint.Lineage(
    namespace="ns", owner_kind="Job", owner_name="train", owner_uid="uid-1"
)
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def cp(
    name: str,
    minute: int,
    phase: str = "Succeeded",
    *,
    failed_restores: int = 0,
    owner_uid: str = "uid-1",
    namespace: str = "ns",
    product: str | None = A100,
    driver: str | None = "550",
    gpus: int | None = 1,
    digest: str | None = None,
) -> checkpoint.Checkpoint:
    return checkpoint.Checkpoint(
        metadata={"name": name, "namespace": namespace},
        spec=checkpoint.CheckpointSpec(
            lineage=LINEAGE.model_copy(update={"owner_uid": owner_uid, "namespace": namespace}),
            trigger=checkpoint.Trigger(
                source=checkpoint.TriggerSource.KUEUE,
                reason="Preempted",
                time=T0 + datetime.timedelta(minutes=minute),
            ),
            members=[checkpoint.Member(pod_name=f"{name}-pod", pod_uid=f"{name}-uid")],
            fingerprint=checkpoint.Fingerprint(
                image_digest=digest, gpu_product=product, cuda_driver_major=driver, gpu_count=gpus
            ),
        ),
        status=checkpoint.CheckpointStatus(
            phase=checkpoint.Phase(phase), failed_restores=failed_restores
        ),
    )


def node(
    product: str | None = A100,
    driver: str | None = "550",
    *,
    ready: str = "True",
    unschedulable: bool = False,
) -> core.Node:
    labels = {}
    if product:
        labels[keys.GPU_PRODUCT_LABEL] = product
    if driver:
        labels[keys.CUDA_DRIVER_MAJOR_LABEL] = driver
    return core.Node.model_validate(
        {
            "metadata": {"name": f"n-{product}-{driver}", "labels": labels},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }
    )


POD_FP = checkpoint.Fingerprint(gpu_count=1)
A100_LABELS = {keys.GPU_PRODUCT_LABEL: A100, keys.CUDA_DRIVER_MAJOR_LABEL: "550"}


def choose(
    checkpoints: list[checkpoint.Checkpoint],
    *,
    nodes: list[core.Node] | None = None,
    pod_fp: checkpoint.Fingerprint = POD_FP,
    pol: policy.CheckpointPolicy = policy.DEFAULT,
) -> catalog.RestoreDecision:
    return catalog.choose_restore(
        checkpoints,
        lineage=LINEAGE,
        policy=pol,
        pod_fingerprint=pod_fp,
        nodes=[node()] if nodes is None else nodes,
    )


def _policy(**spec: Any) -> policy.CheckpointPolicy:
    return policy.load({"metadata": {"name": "p"}, "spec": spec})


# name -> (checkpoints, restore-from or None, wait-for or None, fallback_from, reason part)
RESTORE_CASES: dict[
    str, tuple[list[checkpoint.Checkpoint], str | None, str | None, list[str], str]
] = {
    "none": ([], None, None, [], "no checkpoint of ns/Job/train"),
    "newest-succeeded": ([cp("c1", 1), cp("c2", 2)], "c2", None, [], "restore from c2"),
    "order-by-trigger-not-input": ([cp("c2", 2), cp("c1", 1)], "c2", None, [], "c2"),
    "failed-newest-falls-back": ([cp("c1", 1), cp("c2", 2, "Failed")], "c1", None, [], "c1"),
    "only-failed": ([cp("c1", 1, "Failed")], None, None, [], "no Succeeded checkpoint"),
    "expired-ignored": ([cp("c1", 1, "Expired")], None, None, [], "no checkpoint of"),
    "expired-newest-ignored": ([cp("c1", 1), cp("c2", 2, "Expired")], "c1", None, [], "c1"),
    "stranger-same-name": (
        [cp("c1", 1, owner_uid="old-uid")],
        None,
        None,
        [],
        "no checkpoint of",
    ),
    "other-namespace": ([cp("c1", 1, namespace="other")], None, None, [], "no checkpoint"),
    "failed-restores-fall-back": (
        [cp("c1", 1), cp("c2", 2, failed_restores=2)],
        "c1",
        None,
        ["c2"],
        "c2: 2 failed restores",
    ),
    "failed-restores-under-limit": (
        [cp("c1", 1), cp("c2", 2, failed_restores=1)],
        "c2",
        None,
        [],
        "c2",
    ),
    "all-failed-restores-cold": (
        [cp("c1", 1, failed_restores=3), cp("c2", 2, failed_restores=2)],
        None,
        None,
        ["c2", "c1"],
        "no usable checkpoint: c2: 2 failed restores; c1: 3 failed restores",
    ),
    "newest-saving-wait": (
        [cp("c1", 1), cp("c2", 2, "InProgress")],
        None,
        "c2",
        [],
        "wait for c2 (InProgress) to finish saving, then restore from it; if it fails, from c1",
    ),
    "newest-pending-wait-no-fallback": (
        [cp("c2", 2, "Pending")],
        None,
        "c2",
        [],
        "no older checkpoint to fall back to",
    ),
    "older-in-progress-superseded": (
        [cp("c1", 1, "InProgress"), cp("c2", 2)],
        "c2",
        None,
        [],
        "c2",
    ),
    "wrong-product-falls-back": (
        [cp("c1", 1), cp("c2", 2, product=H100)],
        "c1",
        None,
        ["c2"],
        f"c2: no Ready node has {keys.GPU_PRODUCT_LABEL}={H100}",
    ),
    "wrong-driver-cold": (
        [cp("c1", 1, driver="535")],
        None,
        None,
        ["c1"],
        f"{keys.CUDA_DRIVER_MAJOR_LABEL}=535",
    ),
    "gpu-count-mismatch": (
        [cp("c1", 1, gpus=8)],
        None,
        None,
        ["c1"],
        "c1: gpuCount 8 != pod's 1",
    ),
    "saving-but-incompatible-then-older": (
        [cp("c1", 1), cp("c2", 2, "InProgress", gpus=2)],
        "c1",
        None,
        ["c2"],
        "c2: gpuCount 2 != pod's 1",
    ),
}


@pytest.mark.parametrize(
    ("checkpoints", "restore", "wait", "fallback_from", "reason"),
    list(RESTORE_CASES.values()),
    ids=list(RESTORE_CASES),
)
def test_choose_restore(
    checkpoints: list[checkpoint.Checkpoint],
    restore: str | None,
    wait: str | None,
    fallback_from: list[str],
    reason: str,
) -> None:
    decision = choose(checkpoints)

    assert (decision.checkpoint.name if decision.checkpoint else None) == restore
    assert (decision.wait_for.name if decision.wait_for else None) == wait
    assert decision.fallback_from == fallback_from
    assert reason in decision.reason
    assert decision.cold_start == (restore is None and wait is None)
    if restore or wait:
        assert decision.required_node_labels == A100_LABELS
    else:
        assert decision.required_node_labels == {}


def test_wait_carries_the_fallback_checkpoint() -> None:
    decision = choose([cp("c0", 0), cp("c1", 1, failed_restores=5), cp("c2", 2, "InProgress")])
    assert decision.wait_for is not None
    assert decision.wait_for.name == "c2"
    assert decision.fallback is not None
    assert decision.fallback.name == "c0"
    assert decision.fallback_from == ["c1"]


def test_fallback_must_fit_the_nodes_the_awaited_one_needs() -> None:
    """The pod is placed once: a fallback on other GPUs than the awaited one is no fallback."""
    nodes = [node(), node(H100)]
    decision = choose(
        [cp("c0", 0), cp("c1", 1, product=H100), cp("c2", 2, "InProgress")], nodes=nodes
    )
    assert decision.wait_for is not None
    assert decision.fallback is not None
    assert decision.fallback.name == "c0"
    assert decision.fallback_from == ["c1"]
    assert "c1: gpuProduct NVIDIA-H100-80GB-HBM3 != awaited checkpoint's" in decision.reason
    assert decision.required_node_labels == A100_LABELS


def test_fallback_labels_join_the_awaited_ones_on_one_node() -> None:
    awaited = cp("c2", 2, "InProgress", driver=None)  # product recorded, driver not
    older = cp("c1", 1, product=None, driver="535")  # driver recorded, product not
    joint = {keys.GPU_PRODUCT_LABEL: A100, keys.CUDA_DRIVER_MAJOR_LABEL: "535"}

    split = choose([older, awaited], nodes=[node(A100, "550"), node(H100, "535")])
    assert split.fallback is None
    assert split.required_node_labels == {keys.GPU_PRODUCT_LABEL: A100}

    together = choose([older, awaited], nodes=[node(A100, "535")])
    assert together.fallback is not None
    assert together.required_node_labels == joint


def test_restore_attempts_come_from_policy() -> None:
    lenient = _policy(restore={"attemptsBeforeFallback": 5})
    decision = choose([cp("c1", 1), cp("c2", 2, failed_restores=4)], pol=lenient)
    assert decision.checkpoint is not None
    assert decision.checkpoint.name == "c2"


NODE_CASES: dict[str, tuple[list[core.Node], bool]] = {
    "matching-ready": ([node()], True),
    "no-nodes": ([], False),
    "matching-not-ready": ([node(ready="False")], False),
    "matching-unknown": ([node(ready="Unknown")], False),
    "matching-cordoned": ([node(unschedulable=True)], False),
    "product-on-one-driver-on-another": ([node(A100, "535"), node(H100, "550")], False),
    "one-of-many": ([node(H100), node(None, None), node()], True),
}


@pytest.mark.parametrize(("nodes", "usable"), list(NODE_CASES.values()), ids=list(NODE_CASES))
def test_gpu_labels_must_be_on_one_ready_node(nodes: list[core.Node], usable: bool) -> None:
    decision = choose([cp("c1", 1)], nodes=nodes)
    assert (decision.checkpoint is not None) is usable
    assert decision.required_node_labels == (A100_LABELS if usable else {})


COMPAT_CASES: dict[
    str, tuple[list[str], checkpoint.Checkpoint, checkpoint.Fingerprint, bool, dict[str, str]]
] = {
    "digest-equal": (
        list(policy.CompatibilityKey),
        cp("c", 1, digest=DIGEST_A),
        checkpoint.Fingerprint(image_digest=DIGEST_A, gpu_count=1),
        True,
        A100_LABELS,
    ),
    "digest-differs": (
        list(policy.CompatibilityKey),
        cp("c", 1, digest=DIGEST_A),
        checkpoint.Fingerprint(image_digest=DIGEST_B, gpu_count=1),
        False,
        {},
    ),
    "digest-unrecorded-on-pod": (
        list(policy.CompatibilityKey),
        cp("c", 1, digest=DIGEST_A),
        POD_FP,
        True,
        A100_LABELS,
    ),
    "digest-unrecorded-on-checkpoint": (
        list(policy.CompatibilityKey),
        cp("c", 1),
        checkpoint.Fingerprint(image_digest=DIGEST_B, gpu_count=1),
        True,
        A100_LABELS,
    ),
    "digest-not-a-policy-key": (
        ["gpuCount"],
        cp("c", 1, digest=DIGEST_A),
        checkpoint.Fingerprint(image_digest=DIGEST_B, gpu_count=1),
        True,
        {},
    ),
    "gpu-count-not-a-key": (["imageDigest"], cp("c", 1, gpus=4), POD_FP, True, {}),
    "only-product-key": (["gpuProduct"], cp("c", 1), POD_FP, True, {keys.GPU_PRODUCT_LABEL: A100}),
    "product-key-other-product-everywhere": (
        ["gpuProduct"],
        cp("c", 1, product=H100),
        POD_FP,
        False,
        {},
    ),
    "cpu-checkpoint-no-labels-needed": (
        list(policy.CompatibilityKey),
        cp("c", 1, product=None, driver=None, gpus=0),
        checkpoint.Fingerprint(gpu_count=0),
        True,
        {},
    ),
    "pod-pins-other-product": (
        list(policy.CompatibilityKey),
        cp("c", 1),
        checkpoint.Fingerprint(gpu_product=H100, gpu_count=1),
        False,
        {},
    ),
    "no-keys": (
        [],
        cp("c", 1, product=H100, gpus=8, digest=DIGEST_A),
        checkpoint.Fingerprint(image_digest=DIGEST_B, gpu_count=1),
        True,
        {},
    ),
}


@pytest.mark.parametrize(
    ("compat", "candidate", "pod_fp", "usable", "labels"),
    list(COMPAT_CASES.values()),
    ids=list(COMPAT_CASES),
)
def test_compatibility_keys(
    compat: list[str],
    candidate: checkpoint.Checkpoint,
    pod_fp: checkpoint.Fingerprint,
    usable: bool,
    labels: dict[str, str],
) -> None:
    decision = choose([candidate], pod_fp=pod_fp, pol=_policy(compatibility=compat))
    assert (decision.checkpoint is not None) is usable
    assert decision.required_node_labels == labels
    if not usable:
        assert decision.reason.startswith("no usable checkpoint: c: ")


# name -> (checkpoints, keep, in_use, names expired newest first)
RETENTION_CASES: dict[str, tuple[list[checkpoint.Checkpoint], int, list[str], list[str]]] = {
    "under-keep": ([cp("c1", 1), cp("c2", 2)], 3, [], []),
    "over-keep": ([cp(f"c{i}", i) for i in range(5)], 3, [], ["c1", "c0"]),
    "keep-one": ([cp("c1", 1), cp("c2", 2)], 1, [], ["c1"]),
    "failed-older-than-good": ([cp("f0", 0, "Failed"), cp("c1", 1)], 3, [], ["f0"]),
    "failed-newer-than-good-stays": ([cp("c1", 1), cp("f2", 2, "Failed")], 3, [], []),
    "failed-without-good-stays": ([cp("f1", 1, "Failed"), cp("f2", 2, "Failed")], 3, [], []),
    "saving-never": (
        [cp(f"c{i}", i) for i in range(3)] + [cp("p0", -1, "InProgress")],
        1,
        [],
        ["c1", "c0"],
    ),
    "expired-not-again": ([cp("e0", 0, "Expired"), cp("c1", 1)], 1, [], []),
    "newest-usable-kept-beyond-keep": (
        [cp("c1", 1), cp("c2", 2, failed_restores=2)],
        1,
        [],
        [],
    ),
    "in-use-kept": ([cp(f"c{i}", i) for i in range(3)], 1, ["c0"], ["c1"]),
    "per-lineage": (
        [cp("a1", 1), cp("a2", 2), cp("b1", 1, owner_uid="uid-2"), cp("b2", 2, owner_uid="uid-2")],
        1,
        [],
        ["a1", "b1"],
    ),
}


@pytest.mark.parametrize(
    ("checkpoints", "keep", "in_use", "expired"),
    list(RETENTION_CASES.values()),
    ids=list(RETENTION_CASES),
)
def test_retention(
    checkpoints: list[checkpoint.Checkpoint], keep: int, in_use: list[str], expired: list[str]
) -> None:
    doomed = catalog.retention(checkpoints, policy=_policy(retention={"keep": keep}), in_use=in_use)
    assert sorted(c.name for c in doomed) == sorted(expired)


def test_retention_never_expires_what_choose_restore_picks() -> None:
    """Whatever the mix, the checkpoint a restore would pick is never up for expiry."""
    phases = ["Succeeded", "Failed", "InProgress", "Expired"]
    for keep in (1, 2):
        for seed in range(64):
            mix = [
                cp(
                    f"c{i}",
                    i,
                    phases[(seed >> (2 * i)) % 4 if i < 3 else 0],
                    failed_restores=(seed + i) % 3,
                )
                for i in range(4)
            ]
            pol = _policy(retention={"keep": keep})
            picked = choose(mix, pol=pol)
            doomed = {c.name for c in catalog.retention(mix, policy=pol)}
            for chosen in (picked.checkpoint, picked.wait_for, picked.fallback):
                assert chosen is None or chosen.name not in doomed, (keep, seed)


EXPIRY_CASES: dict[str, tuple[bool, list[str], list[str], list[str]]] = {
    "owner-live": (True, ["uid-1"], [], []),
    "owner-gone": (True, [], [], ["c1", "f2"]),
    "owner-finished": (True, ["uid-1"], ["uid-1"], ["c1", "f2"]),
    "policy-keeps-them": (False, [], [], []),
}


@pytest.mark.parametrize(
    ("expire", "live", "finished", "expired"), list(EXPIRY_CASES.values()), ids=list(EXPIRY_CASES)
)
def test_expire_on_owner_gone(
    expire: bool, live: list[str], finished: list[str], expired: list[str]
) -> None:
    mix = [cp("c1", 1), cp("f2", 2, "Failed"), cp("p3", 3, "InProgress"), cp("e0", 0, "Expired")]
    doomed = catalog.expire_on_owner_gone(
        mix,
        policy=_policy(retention={"expireOnCompletion": expire}),
        live_owner_uids=live,
        finished_owner_uids=finished,
    )
    assert sorted(c.name for c in doomed) == expired


def _recorded_pod(name: str) -> core.Pod:
    data = json.loads((fixtures.FIXTURES / "bridge" / f"{name}.json").read_text())
    return core.Pod.model_validate(data)


def _with_status_image(pod: core.Pod, image_id: str, image: str | None = None) -> core.Pod:
    data = pod.model_dump(by_alias=True, exclude_unset=True, mode="json")
    data["status"]["containerStatuses"][0]["imageID"] = image_id
    if image is not None:
        data["spec"]["containers"][0]["image"] = image
    return core.Pod.model_validate(data)


def test_fingerprint_of_recorded_victim_on_gpu_node() -> None:
    """The real preemption victim asks for one GPU; its image has no repository digest."""
    pod = _recorded_pod("pod-disruption-preemption-by-scheduler")
    found = catalog.fingerprint_of(pod, node())
    assert found == checkpoint.Fingerprint(
        image_digest=None, gpu_product=A100, cuda_driver_major="550", gpu_count=1
    )


@pytest.mark.parametrize(
    ("image_id", "image", "digest"),
    [
        (f"registry.example/trainer@{DIGEST_A}", None, DIGEST_A),
        (f"docker-pullable://registry.example/trainer@{DIGEST_B}", None, DIGEST_B),
        (DIGEST_A, None, None),  # local image ID (kubelet recording 03), not a repo digest
        ("", f"registry.example/trainer@{DIGEST_B}", DIGEST_B),  # pinned in spec
        ("", "registry.example/trainer:v1", None),
        (f"r@{DIGEST_A}", f"r@{DIGEST_B}", DIGEST_A),  # what ran wins over what was asked
    ],
    ids=["containerd", "docker-pullable", "local-id", "spec-pinned", "tag-only", "status-wins"],
)
def test_fingerprint_image_digest(image_id: str, image: str | None, digest: str | None) -> None:
    pod = _with_status_image(
        _recorded_pod("pod-disruption-preemption-by-scheduler"), image_id, image
    )
    assert catalog.fingerprint_of(pod, None).image_digest == digest


@pytest.mark.parametrize(
    ("containers", "count"),
    [
        ([{"name": "a"}], 0),
        ([{"name": "a", "resources": {"limits": {keys.GPU_RESOURCE: "2"}}}], 2),
        ([{"name": "a", "resources": {"requests": {keys.GPU_RESOURCE: 4}}}], 4),
        (
            [
                {"name": "a", "resources": {"limits": {keys.GPU_RESOURCE: "2"}}},
                {"name": "b", "resources": {"limits": {keys.GPU_RESOURCE: "1"}}},
            ],
            3,
        ),
    ],
    ids=["cpu", "limits", "requests-int", "two-containers"],
)
def test_fingerprint_gpu_count(containers: list[dict[str, Any]], count: int) -> None:
    pod = core.Pod.model_validate({"spec": {"containers": containers}})
    found = catalog.fingerprint_of(pod)
    assert (found.gpu_count, found.gpu_product, found.image_digest) == (count, None, None)


def test_fingerprint_rejects_fractional_gpus() -> None:
    pod = core.Pod.model_validate(
        {
            "spec": {
                "containers": [{"name": "a", "resources": {"limits": {keys.GPU_RESOURCE: "500m"}}}]
            }
        }
    )
    with pytest.raises(ValueError, match=r"nvidia.com/gpu quantity '500m'"):
        catalog.fingerprint_of(pod)
