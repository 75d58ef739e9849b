"""The emulated kube-scheduler's pure decisions (emulator.scheduling), table-driven."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from emulator import quantity, scheduling

Object = dict[str, Any]


def node(
    name: str, *, gpus: int = 4, cpu: str = "8", labels: dict[str, str] | None = None
) -> Object:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {},
        "status": {
            "allocatable": {
                "cpu": cpu,
                "memory": "32Gi",
                "pods": "110",
                "nvidia.com/gpu": str(gpus),
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    *,
    gpus: int = 1,
    priority: int = 0,
    on: str = "",
    phase: str = "Running",
    deleting: bool = False,
    nominated: str = "",
    start: str = "2026-12-02T10:00:00Z",
    **spec: Any,
) -> Object:
    meta: Object = {"name": name, "uid": f"uid-{name}", "creationTimestamp": start}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T11:00:00Z"
    status: Object = {"phase": phase if on else "Pending", "startTime": start}
    if nominated:
        status["nominatedNodeName"] = nominated
    return {
        "metadata": meta,
        "spec": {
            "nodeName": on,
            "priority": priority,
            "schedulerName": "default-scheduler",
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
            **spec,
        },
        "status": status,
    }


def test_requests_sum_containers_take_the_largest_init_and_add_sidecars() -> None:
    p = {
        "spec": {
            "initContainers": [
                {"name": "big-init", "resources": {"requests": {"cpu": "3"}}},
                {
                    "name": "sidecar",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "500m"}},
                },
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}},
                {"name": "b", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "2"}}},
            ],
        }
    }
    assert scheduling.pod_requests(p) == {
        "cpu": Fraction(3),  # max(1 + 1 + 0.5 sidecar, 3 init) = 3
        "nvidia.com/gpu": Fraction(2),  # limits stand in for absent requests
        "pods": Fraction(1),
    }


@pytest.mark.parametrize(
    ("expression", "labels", "matches"),
    [
        ({"key": "gpu", "operator": "In", "values": ["h100"]}, {"gpu": "h100"}, True),
        ({"key": "gpu", "operator": "In", "values": ["h100"]}, {"gpu": "a100"}, False),
        ({"key": "gpu", "operator": "In", "values": ["h100"]}, {}, False),
        ({"key": "gpu", "operator": "NotIn", "values": ["h100"]}, {"gpu": "a100"}, True),
        ({"key": "gpu", "operator": "NotIn", "values": ["h100"]}, {}, True),
        ({"key": "gpu", "operator": "Exists"}, {"gpu": ""}, True),
        ({"key": "gpu", "operator": "Exists"}, {}, False),
        ({"key": "gpu", "operator": "DoesNotExist"}, {}, True),
        ({"key": "gpu", "operator": "DoesNotExist"}, {"gpu": "x"}, False),
        ({"key": "count", "operator": "Gt", "values": ["2"]}, {"count": "4"}, True),
        ({"key": "count", "operator": "Lt", "values": ["2"]}, {"count": "4"}, False),
    ],
)
def test_required_node_affinity_operators(
    expression: Object, labels: dict[str, str], matches: bool
) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    }
    candidate = pod("p", affinity=affinity)
    assert scheduling.matches_node(candidate, node("n", labels=labels)) is matches


def test_affinity_terms_are_ored_and_node_selector_is_anded() -> None:
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }
    candidate = pod("p", affinity=affinity, nodeSelector={"gpu": "h100"})
    assert scheduling.matches_node(candidate, node("n", labels={"zone": "b", "gpu": "h100"}))
    assert not scheduling.matches_node(candidate, node("n", labels={"zone": "b"}))
    assert not scheduling.matches_node(candidate, node("n", labels={"zone": "c", "gpu": "h100"}))


def test_unknown_operator_names_the_field() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Near"}]}]
            }
        }
    }
    with pytest.raises(ValueError, match="matchExpressions operator: unsupported value 'Near'"):
        scheduling.matches_node(pod("p", affinity=affinity), node("n"))


def test_terminating_pods_hold_resources_terminal_pods_do_not() -> None:
    nodes = [node("n", gpus=2)]
    leaving = pod("leaving", gpus=1, on="n", deleting=True)
    done = pod("done", gpus=1, on="n", phase="Failed")
    running = pod("running", gpus=1, on="n")
    fit = scheduling.find_fit(pod("new", gpus=1), nodes, [leaving, done, running])
    assert fit.node is None
    assert fit.message(1) == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    fit = scheduling.find_fit(pod("new", gpus=1), nodes, [done, running])
    assert fit.node == "n"


def test_a_nominated_higher_priority_pod_keeps_its_room() -> None:
    nodes = [node("n", gpus=1)]
    preemptor = pod("high", priority=1000, nominated="n")
    low = pod("replacement", priority=100)
    assert scheduling.find_fit(low, nodes, [preemptor, low]).node is None
    assert scheduling.find_fit(preemptor, nodes, [preemptor, low]).node == "n"


def test_fit_prefers_the_node_with_most_free_gpus_and_counts_reasons() -> None:
    nodes = [
        node("busy", gpus=4),
        node("free", gpus=4),
        node("cpu-only", gpus=0),
        node("elsewhere", labels={"zone": "b"}),
    ]
    pods = [pod("x", gpus=3, on="busy")]
    fit = scheduling.find_fit(pod("p", nodeSelector={"zone": "a"}), nodes, pods)
    assert fit.node is None
    assert fit.message(4) == (
        "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
    )
    fit = scheduling.find_fit(pod("p", gpus=2), nodes, pods)
    assert fit.node in ("free", "elsewhere")
    assert fit.reasons == {
        "busy": ["Insufficient nvidia.com/gpu"],
        "cpu-only": ["Insufficient nvidia.com/gpu"],
    }


def test_victims_are_the_fewest_lowest_priority_pods() -> None:
    n = node("n", gpus=4)
    pods = [
        pod("p10", gpus=2, on="n", priority=10),
        pod("p20", gpus=1, on="n", priority=20),
        pod("p30", gpus=1, on="n", priority=30),
    ]
    victims = scheduling.select_victims(pod("high", gpus=2, priority=100), n, pods)
    assert [v["metadata"]["name"] for v in victims or []] == ["p10"]
    victims = scheduling.select_victims(pod("high", gpus=3, priority=100), n, pods)
    assert [v["metadata"]["name"] for v in victims or []] == ["p20", "p10"]
    assert scheduling.select_victims(pod("mid", gpus=4, priority=25), n, pods) is None


def test_equal_priority_and_terminating_pods_are_never_victims() -> None:
    n = node("n", gpus=1)
    assert (
        scheduling.select_victims(pod("a", priority=5), n, [pod("b", priority=5, on="n")]) is None
    )
    leaving = pod("leaving", priority=1, on="n", deleting=True)
    assert scheduling.select_victims(pod("a", priority=5), n, [leaving]) is None


def test_no_second_preemption_while_the_first_victims_terminate() -> None:
    high = pod("high", priority=1000, nominated="n")
    leaving = pod("victim", priority=1, on="n", deleting=True)
    assert not scheduling.eligible_to_preempt(high, [high, leaving])
    assert scheduling.eligible_to_preempt(high, [high])
    never = pod("polite", priority=1000, preemptionPolicy="Never")
    assert not scheduling.eligible_to_preempt(never, [never])


def test_preemption_picks_the_node_with_the_least_important_victims() -> None:
    nodes = [node("a", gpus=1), node("b", gpus=1)]
    pods = [pod("on-a", on="a", priority=50), pod("on-b", on="b", priority=10)]
    plan = scheduling.plan_preemption(pod("high", priority=100), nodes, pods)
    assert plan is not None
    assert plan.node == "b"
    assert [v["metadata"]["name"] for v in plan.victims] == ["on-b"]


def test_preemption_failure_message_like_v1_36() -> None:
    nodes = [node("n", gpus=1)]
    fit = scheduling.find_fit(pod("p"), nodes, [pod("q", on="n", priority=5)])
    assert scheduling.preemption_failure_message(fit, total=1) == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. no new claims to deallocate, "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )


def test_queue_order_is_priority_then_age() -> None:
    pods = [
        pod("old-low", priority=1, start="2026-12-02T09:00:00Z"),
        pod("new-high", priority=9, start="2026-12-02T10:00:00Z"),
        pod("old-high", priority=9, start="2026-12-02T08:00:00Z"),
    ]
    ordered = [p["metadata"]["name"] for p in scheduling.queue_order(pods)]
    assert ordered == ["old-high", "new-high", "old-low"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("2", Fraction(2)),
        ("1.5", Fraction(3, 2)),
        ("2Gi", Fraction(2 * 2**30)),
        ("1k", Fraction(1000)),
        ("1e3", Fraction(1000)),
        (4, Fraction(4)),
    ],
)
def test_quantities_are_exact(text: object, value: Fraction) -> None:
    assert quantity.parse(text) == value


def test_bad_quantity_is_quoted() -> None:
    with pytest.raises(quantity.InvalidQuantity, match="quantity '2 GB' is not a Kubernetes"):
        quantity.parse("2 GB")


def test_only_pending_ungated_pods_of_this_scheduler_are_scheduled() -> None:
    name = "default-scheduler"
    assert scheduling.wants_scheduling(pod("p"), scheduler_name=name)
    assert not scheduling.wants_scheduling(pod("p", on="n"), scheduler_name=name)
    assert not scheduling.wants_scheduling(pod("p", deleting=True), scheduler_name=name)
    gated = pod("p", schedulingGates=[{"name": "kueue.x-k8s.io/topology"}])
    assert not scheduling.wants_scheduling(gated, scheduler_name=name)
    other = pod("p", schedulerName="volcano")
    assert not scheduling.wants_scheduling(other, scheduler_name=name)
    assert scheduling.wants_scheduling(other, scheduler_name="volcano")
