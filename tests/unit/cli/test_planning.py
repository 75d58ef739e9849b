"""Pure planners of ``move``, ``drain`` and ``defrag`` (kubectl_kontinue/planning.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kontinue import keys
from kontinue.models import base, checkpoint, core, kueue
from kubectl_kontinue import gathering, planning

NS = "team"
Obj = dict[str, Any]


def _node(name: str, gpus: int = 4, *, cordoned: bool = False) -> core.Node:
    return base.parse(
        core.Node,
        {
            "metadata": {"name": name},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"allocatable": {keys.GPU_RESOURCE: str(gpus)}},
        },
    )


def _pod(
    name: str, node: str | None, gpus: int, *, job: str | None = None, plumbed: bool = True
) -> core.Pod:
    job = job or name
    annotations = {}
    if plumbed:
        annotations = {
            keys.LINEAGE_ANNOTATION: f"{NS}/Job/{job}/uid-{job}",
            keys.COLD_START_REASON_ANNOTATION: "no Succeeded checkpoint",
        }
    return base.parse(
        core.Pod,
        {
            "metadata": {
                "name": f"{name}-pod",
                "namespace": NS,
                "uid": f"pod-{name}",
                "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "lq", keys.JOB_NAME_LABEL: job},
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job,
                        "uid": f"uid-{job}",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "c", "resources": {"limits": {keys.GPU_RESOURCE: str(gpus)}}}
                ],
            },
            "status": {"phase": "Running" if node else "Pending"},
        },
    )


def _world(
    pods: list[core.Pod],
    nodes: list[core.Node],
    *,
    opted_in: bool = True,
    checkpoints: list[checkpoint.Checkpoint] | None = None,
) -> gathering.World:
    labels = {keys.ENABLED_LABEL: "true"} if opted_in else {}
    return gathering.World(
        namespace=None,
        pods=pods,
        nodes=nodes,
        checkpoints=checkpoints or [],
        cluster_queues=[
            base.parse(kueue.ClusterQueue, {"metadata": {"name": "cq", "labels": labels}})
        ],
        local_queues=[
            base.parse(
                kueue.LocalQueue,
                {"metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}},
            )
        ],
    )


def _failed_set(job: str) -> checkpoint.Checkpoint:
    return checkpoint.load(
        {
            "metadata": {"name": f"{job}-1", "namespace": NS},
            "spec": {
                "lineage": {
                    "namespace": NS,
                    "ownerKind": "Job",
                    "ownerName": job,
                    "ownerUid": f"uid-{job}",
                },
                "trigger": {
                    "source": "Scheduler",
                    "reason": "PreemptionByScheduler",
                    "time": "2026-12-03T09:00:00Z",
                },
                "members": [{"podName": "old", "podUid": "old-uid"}],
            },
            "status": {"phase": "Failed", "message": "1/1 members failed: SIGKILL"},
        }
    )


NODES = [_node("a"), _node("b")]


def test_defrag_moves_the_fewest_jobs_that_free_one_node() -> None:
    # a: s1, s2 (2 free); b: s3, s4 with 2 GPUs (1 free): 3 free in total, a 3-GPU job fits
    # nowhere. Freeing a moves one job (s1 or s2: 1 GPU, to b); freeing b needs s4 (2 GPUs) and
    # a has room for it: also one job, but 2 GPUs moved, so a wins.
    pods = [
        _pod("s1", "a", 1),
        _pod("s2", "a", 1),
        _pod("s3", "b", 1),
        _pod("s4", "b", 2),
        _pod("urgent", None, 3, plumbed=False),
    ]
    plan = planning.plan_defrag(_world(pods, NODES), target="job/urgent", namespace=NS)
    assert (plan.node, plan.need, plan.free_before) == ("a", 3, {"a": 2, "b": 1})
    assert [(r.lineage.owner, r.from_node, r.to_node, r.gpus) for r in plan.relocations] == [
        ("job/s1", "a", "b", 1)
    ]


def test_defrag_plan_details() -> None:
    pods = [
        _pod("s1", "a", 1),
        _pod("s2", "a", 1),
        _pod("s3", "b", 1),
        _pod("s4", "b", 1),
        _pod("urgent", None, 4, plumbed=False),
    ]
    nodes = [_node("a"), _node("b"), _node("c", 2)]
    plan = planning.plan_defrag(_world(pods, nodes), target="pod/urgent-pod", namespace=NS)
    assert plan.free_before == {"a": 2, "b": 2, "c": 2}
    assert plan.node == "a"
    assert sorted((r.lineage.owner, r.to_node) for r in plan.relocations) == [
        ("job/s1", "b"),
        ("job/s2", "c"),
    ]


@pytest.mark.parametrize(
    ("pods", "nodes", "opted_in", "message"),
    [
        (
            [_pod("s1", "a", 1), _pod("urgent", None, 2, plumbed=False)],
            NODES,
            True,
            "already fits on a, b",
        ),
        (
            [_pod("s1", "a", 3), _pod("s2", "b", 3), _pod("urgent", None, 4, plumbed=False)],
            NODES,
            True,
            "has 2 free in total: this is a shortage",
        ),
        (
            [_pod("s1", "a", 2), _pod("s2", "b", 2), _pod("urgent", None, 4, plumbed=False)],
            NODES,
            False,
            "no set of movable pods frees a node",
        ),
        ([_pod("s1", "a", 1)], NODES, True, "pod urgent-pod not found"),
        ([_pod("urgent", "a", 1, plumbed=False)], NODES, True, "has no pending pod"),
    ],
)
def test_defrag_refusals(
    pods: list[core.Pod], nodes: list[core.Node], opted_in: bool, message: str
) -> None:
    with pytest.raises(planning.Refusal, match=message):
        planning.plan_defrag(
            _world(pods, nodes, opted_in=opted_in), target="pod/urgent-pod", namespace=NS
        )


def test_move_defaults_to_away_from_its_node_and_checks_nodes() -> None:
    world = _world([_pod("s1", "a", 1)], NODES + [_node("c", cordoned=True)])
    plan = planning.plan_move(world, owner="job/s1", namespace=NS, to_node=None, away_from=None)
    assert (plan.move.to_node, plan.move.away_from, plan.gpus) == (None, "a", 1)
    for to_node, message in (
        ("z", "node z does not exist"),
        ("c", "node c is cordoned"),
        ("a", "already runs on a"),
    ):
        with pytest.raises(planning.Refusal, match=message):
            planning.plan_move(world, owner="job/s1", namespace=NS, to_node=to_node, away_from=None)
    with pytest.raises(planning.Refusal, match=r"does not run on b"):
        planning.plan_move(world, owner="job/s1", namespace=NS, to_node=None, away_from="b")


def test_move_refuses_a_failed_newest_set_and_a_queue_not_opted_in() -> None:
    failed = _world([_pod("s1", "a", 1)], NODES, checkpoints=[_failed_set("s1")])
    with pytest.raises(planning.Refusal, match=r"s1-1, Failed: 1/1 members failed: SIGKILL"):
        planning.plan_move(failed, owner="job/s1", namespace=NS, to_node=None, away_from=None)
    out = _world([_pod("s1", "a", 1)], NODES, opted_in=False)
    with pytest.raises(
        planning.Refusal, match=r"job/s1 is not opted in \(Kueue \w+ cq has not opted in\)"
    ):
        planning.plan_move(out, owner="job/s1", namespace=NS, to_node=None, away_from=None)


def test_move_refuses_a_job_saving_right_now_and_one_without_a_running_pod() -> None:
    saving = _failed_set("s1")
    saving.status.phase = checkpoint.Phase.IN_PROGRESS
    saving.status.message = None
    busy = _world([_pod("s1", "a", 1)], NODES, checkpoints=[saving])
    with pytest.raises(
        planning.Refusal, match=r"^job/s1 is saving right now \(Checkpoint s1-1 InProgress\)$"
    ):
        planning.plan_move(busy, owner="job/s1", namespace=NS, to_node=None, away_from=None)
    unscheduled = _world([_pod("s1", None, 1)], NODES)
    with pytest.raises(planning.Refusal, match=r"job/s1 has pods not scheduled yet \(s1-pod\)"):
        planning.plan_move(unscheduled, owner="job/s1", namespace=NS, to_node=None, away_from=None)


def test_drain_moves_opted_in_pods_evicts_the_rest_and_refuses_bare_pods() -> None:
    daemon = _pod("ds", "a", 0, plumbed=False)
    assert daemon.metadata.owner_references is not None
    daemon.metadata.owner_references[0].kind = "DaemonSet"
    plain = _pod("plain", "a", 1, plumbed=False)
    broken = _pod("broken", "a", 1)
    world = _world(
        [_pod("s1", "a", 1), _pod("s2", "b", 1), daemon, plain, broken],
        NODES,
        checkpoints=[_failed_set("broken")],
    )
    plan = planning.plan_drain(world, node="a", force=False)
    assert [m.pod.name for m in plan.moves] == ["s1-pod"]
    assert plan.moves[0].move.away_from == "a"
    assert [p.name for p in plan.evictions] == ["broken-pod", "plain-pod"]
    assert [(p.name, why) for p, why in plan.ignored] == [("ds-pod", "DaemonSet-managed")]
    (warning,) = plan.warnings
    assert warning.startswith(f"{NS}/broken-pod: evicted without a move: the newest checkpoint")
    bare = _pod("bare", "a", 0, plumbed=False)
    bare.metadata.owner_references = None
    with pytest.raises(planning.Refusal, match=r"without a controller .*team/bare-pod.*--force"):
        planning.plan_drain(_world([bare], NODES), node="a", force=False)
    assert [
        p.name for p in planning.plan_drain(_world([bare], NODES), node="a", force=True).evictions
    ] == ["bare-pod"]
