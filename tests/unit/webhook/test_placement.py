"""The placement a user's move asks for (webhook/placement.py), through ``admission.mutate_pod``.

A pod restoring from a Checkpoint that carries ``kontinue.dev/move`` gets the node affinity the
move asked for, ANDed with what restore steering adds; a pod restoring from a set without it
(a later eviction's) gets nothing: the request is honoured once.
"""

from __future__ import annotations

from typing import Any

from kontinue import keys, moving
from kontinue.models import checkpoint
from tests.unit.webhook import support
from tests.unit.webhook.test_mutating import _mutate, _with_checkpoints
from webhook import placement

Obj = dict[str, Any]


def _moved(cp: checkpoint.Checkpoint, move: moving.Move) -> checkpoint.Checkpoint:
    cp.metadata.annotations = {moving.ANNOTATION: move.encode()}
    return cp


def _expressions(pod: Obj) -> list[list[Obj]]:
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return [t["matchExpressions"] for t in terms]


def test_a_pod_restoring_from_a_move_goes_where_the_move_asked() -> None:
    pod = support.kueue_pod()
    cp = _moved(
        support.make_checkpoint(
            "moved", lineage=support.lineage_of(pod), fingerprint={"gpuProduct": "H100"}
        ),
        moving.Move(by="move", to_node="n2"),
    )
    snap = _with_checkpoints(pod, cp, nodes=[support.gpu_node("n2", product="H100")])
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    assert support.pod_errors(out) == []
    assert out["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "moved"
    assert _expressions(out) == [
        [
            {"key": keys.GPU_PRODUCT_LABEL, "operator": "In", "values": ["H100"]},
            {"key": keys.HOSTNAME_LABEL, "operator": "In", "values": ["n2"]},
        ]
    ]


def test_away_from_is_anded_into_every_existing_term() -> None:
    pod = support.kueue_pod()
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        }
    }
    cp = _moved(
        support.make_checkpoint("drained", lineage=support.lineage_of(pod)),
        moving.Move(by="drain", away_from="n1"),
    )
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, cp)).patch)
    away = {"key": keys.HOSTNAME_LABEL, "operator": "NotIn", "values": ["n1"]}
    assert _expressions(out) == [
        [{"key": "zone", "operator": "In", "values": ["a"]}, away],
        [{"key": "zone", "operator": "In", "values": ["b"]}, away],
    ]


def test_a_later_set_without_the_move_places_nothing() -> None:
    pod = support.kueue_pod()
    owner = support.lineage_of(pod)
    older = _moved(
        support.make_checkpoint("moved", lineage=owner, minutes_ago=20),
        moving.Move(by="move", to_node="n2"),
    )
    newer = support.make_checkpoint("preempted", lineage=owner, minutes_ago=5)
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, older, newer)).patch)
    assert out["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "preempted"
    assert "affinity" not in out["spec"]


def test_a_cold_start_places_nothing_and_no_move_changes_no_patch() -> None:
    pod = support.kueue_pod()
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod)).patch)
    assert "affinity" not in out["spec"]
    ops: list[Obj] = [{"op": "add", "path": "/x", "value": 1}]
    assert placement.with_move(ops, spec={}, move=None) == ops
    assert placement.with_move(ops, spec={}, move=moving.Move(by="move")) == ops


def test_the_move_annotation_round_trips_and_rejects_what_we_did_not_write() -> None:
    move = moving.Move(by="defrag", to_node="gpu-b")
    assert moving.decode(move.encode()) == move
    assert move.encode() == '{"by":"defrag","toNode":"gpu-b"}'
    for bad in (
        "",
        "x",
        "[]",
        '{"by":"kill"}',
        '{"by":"move","toNode":""}',
        '{"by":"move","toNode":"a","awayFrom":"b"}',
        '{"by":"move","toNode":3}',
    ):
        assert moving.decode(bad) is None, bad
