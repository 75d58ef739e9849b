"""Pure parts of the emulated Kueue: flavor assignment, preemption targets, pod-set merging,
Workload names (kubernetes-sigs/kueue flavorassigner, preemption, podset, workload_names)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from emulator.kueue import conditions, podsets, quota, workloads

Obj = dict[str, Any]


def cq(*flavors: tuple[str, int], policy: str = "LowerPriority") -> Obj:
    return {
        "metadata": {"name": "cq"},
        "spec": {
            "preemption": {"withinClusterQueue": policy},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {"name": n, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": q}]}
                        for n, q in flavors
                    ],
                }
            ],
        },
    }


def wl(
    name: str, gpus: int, *, priority: int = 0, admitted: str | None = None, at: str = ""
) -> Obj:
    obj: Obj = {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": at or "2026-01-01T00:00:00Z",
        },
        "spec": {
            "priority": priority,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }
    if admitted:
        conditions.set_quota_reservation(
            obj,
            {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {"nvidia.com/gpu": admitted},
                        "resourceUsage": {"nvidia.com/gpu": str(gpus)},
                        "count": 1,
                    }
                ],
            },
        )
        obj["status"]["conditions"][0]["lastTransitionTime"] = at or "2026-01-01T00:00:00Z"
    return obj


FLAVORS: dict[str, Obj] = {"a": {"spec": {}}, "b": {"spec": {}}}


def test_first_flavor_with_unused_quota_wins() -> None:
    queue = cq(("a", 4), ("b", 4))
    used = quota.total_usage([wl("x", 3, admitted="a")])
    got = quota.assign(wl("new", 2), queue, flavors=FLAVORS, used=used)
    assert (got.mode, got.flavors) == (quota.FIT, {"main": {"nvidia.com/gpu": "b"}})


def test_preempt_mode_when_only_nominal_quota_fits_and_nofit_beyond() -> None:
    queue = cq(("a", 4))
    used = quota.total_usage([wl("x", 4, admitted="a")])
    assert quota.assign(wl("new", 4), queue, flavors=FLAVORS, used=used).mode == quota.PREEMPT
    too_big = quota.assign(wl("huge", 8), queue, flavors=FLAVORS, used={})
    assert too_big.mode == quota.NO_FIT
    assert "insufficient quota for nvidia.com/gpu in flavor a" in too_big.message


def test_an_uncovered_resource_is_inadmissible() -> None:
    queue = cq(("a", 4))
    job = wl("cpu", 1)
    job["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"] = {
        "cpu": "1"
    }
    got = quota.assign(job, queue, flavors=FLAVORS, used={})
    assert (got.mode, got.message) == (quota.NO_FIT, "resource cpu unavailable in ClusterQueue")


def test_a_flavor_whose_node_labels_contradict_the_pod_is_skipped() -> None:
    queue = cq(("a", 4), ("b", 4))
    flavors = {
        "a": {"spec": {"nodeLabels": {"gpu": "h100"}}},
        "b": {"spec": {"nodeLabels": {"gpu": "a100"}}},
    }
    job = wl("pinned", 1)
    job["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {"gpu": "a100"}
    assert quota.assign(job, queue, flavors=flavors, used={}).flavors == {
        "main": {"nvidia.com/gpu": "b"}
    }


def test_victims_lowest_priority_then_newest_and_minimal_after_fill_back() -> None:
    queue = cq(("a", 4))
    admitted = [
        wl("old-low", 1, priority=1, admitted="a", at="2026-01-01T00:00:01Z"),
        wl("new-low", 1, priority=1, admitted="a", at="2026-01-01T00:00:02Z"),
        wl("mid", 2, priority=5, admitted="a", at="2026-01-01T00:00:00Z"),
    ]
    preemptor = wl("high", 2, priority=10)
    assignment = quota.assign(preemptor, queue, flavors=FLAVORS, used=quota.total_usage(admitted))
    names = [v["metadata"]["name"] for v in quota.targets(preemptor, assignment, queue, admitted)]
    assert names == ["new-low", "old-low"]
    one = wl("one", 1, priority=10)
    assignment = quota.assign(one, queue, flavors=FLAVORS, used=quota.total_usage(admitted))
    assert [v["metadata"]["name"] for v in quota.targets(one, assignment, queue, admitted)] == [
        "new-low"
    ]


def test_lower_priority_never_preempts_equal_priority() -> None:
    queue = cq(("a", 4))
    admitted = [wl("peer", 4, priority=5, admitted="a")]
    same = wl("same", 4, priority=5, at="2026-01-02T00:00:00Z")
    assignment = quota.assign(same, queue, flavors=FLAVORS, used=quota.total_usage(admitted))
    assert quota.targets(same, assignment, queue, admitted) == []
    newer = cq(("a", 4), policy="LowerOrNewerEqualPriority")
    later = wl("later", 4, priority=5, at="2026-02-01T00:00:00Z")  # peer is older: kept
    assert quota.targets(later, assignment, newer, admitted) == []
    assert [
        v["metadata"]["name"]
        for v in quota.targets(
            wl("ancient", 4, priority=5, at="2025-01-01T00:00:00Z"), assignment, newer, admitted
        )
    ] == ["peer"]


def test_schedule_admits_in_priority_order_and_waits_for_preemptions() -> None:
    queue = cq(("a", 4))
    admitted = [wl("low", 4, priority=1, admitted="a")]
    pending = [wl("mid", 4, priority=5), wl("top", 4, priority=9)]
    decision = quota.schedule(queue, flavors=FLAVORS, pending=pending, admitted=admitted)
    assert [(v["metadata"]["name"], p["metadata"]["name"]) for v, p in decision.preempt] == [
        ("low", "top")
    ]
    assert [(w["metadata"]["name"], r) for w, r, _ in decision.waiting] == [
        ("top", conditions.REASON_WAITING_FOR_PREEMPTED)
    ]
    assert decision.admit == []


def test_podset_updates_are_additive_and_conflicts_are_permanent() -> None:
    info = podsets.Info(node_selector={"nvidia.com/gpu.product": "H100"})
    info.merge(podsets.Info(node_selector={"nvidia.com/gpu.product": "H100", "zone": "a"}))
    assert info.node_selector == {"nvidia.com/gpu.product": "H100", "zone": "a"}
    with pytest.raises(
        podsets.Conflict, match="conflict for nodeSelector: conflict for key=nvidia.com/gpu.product"
    ):
        info.merge(podsets.Info(node_selector={"nvidia.com/gpu.product": "A100"}))


def test_restore_patch_nulls_what_admission_added() -> None:
    original = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": []}}
    admitted = podsets.merged_template(
        original,
        podsets.Info(labels={"kueue.x-k8s.io/podset": "main"}, node_selector={"gpu": "h100"}),
    )
    back = podsets.with_info(admitted, podsets.of_template(original))
    assert podsets.template_patch(admitted, back) == {
        "metadata": {"labels": {"kueue.x-k8s.io/podset": None}},
        "spec": {"nodeSelector": None},
    }


def test_workload_name_is_job_name_plus_five_hex_of_the_owner_hash() -> None:
    name = workloads.name_for("train", "1234")
    digest = hashlib.sha1(b"Job\nbatch\ntrain\n1234").hexdigest()[:5]
    assert name == f"job-train-{digest}"
    assert workloads.name_for("train", "5678") != name
    long = workloads.name_for("x" * 300, "1")
    assert len(long) == 253
