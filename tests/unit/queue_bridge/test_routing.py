"""Which Workloads a queue or policy change re-sweeps (queue_bridge.routing), on plain objects.

The Workloads are tests/fixtures/objects/workload-evicted.yaml renamed and re-queued: admitted
(``status.admission.clusterQueue``) or, after the quota release, only through their LocalQueue.
"""

from __future__ import annotations

from typing import Any

from kontinue import keys
from kontinue.kube import watching
from kontinue.models import kueue
from kontinue.models import policy as policy_model
from queue_bridge import routing
from tests import fixtures

WORKLOAD = fixtures.FIXTURES / "objects/workload-evicted.yaml"


def _workload(name: str, *, queue: str, admitted_to: str | None) -> kueue.Workload:
    raw = fixtures.load_one(WORKLOAD)
    raw["metadata"]["name"] = name
    raw["spec"]["queueName"] = queue
    if admitted_to is None:
        raw["status"]["admission"] = None
    else:
        raw["status"]["admission"]["clusterQueue"] = admitted_to
    return kueue.Workload.model_validate(raw)


def _cq(name: str, **labels: str) -> kueue.ClusterQueue:
    return kueue.ClusterQueue.model_validate(
        {"metadata": {"name": name, "labels": labels, "generation": 1}}
    )


def _lq(name: str, cluster_queue: str) -> kueue.LocalQueue:
    return kueue.LocalQueue.model_validate(
        {
            "metadata": {"name": name, "namespace": "research", "generation": 1},
            "spec": {"clusterQueue": cluster_queue},
        }
    )


def _policy(name: str) -> policy_model.CheckpointPolicy:
    return policy_model.CheckpointPolicy.model_validate({"metadata": {"name": name}})


WORKLOADS = [
    _workload("admitted-a", queue="lq-b", admitted_to="cq-a"),  # admission wins over the LQ
    _workload("queued-a", queue="lq-a", admitted_to=None),
    _workload("queued-b", queue="lq-b", admitted_to=None),
    _workload("admitted-b", queue="lq-a", admitted_to="cq-b"),
]
LOCAL_QUEUES = [_lq("lq-a", "cq-a"), _lq("lq-b", "cq-b")]
CLUSTER_QUEUES = [
    _cq("cq-a", **{keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "gpu"}),
    _cq("cq-b", **{keys.ENABLED_LABEL: "true"}),
]


def _affected(changed: Any) -> set[str]:
    found = routing.workloads_affected(WORKLOADS, LOCAL_QUEUES, CLUSTER_QUEUES, changed=changed)
    return {w.name for w in found}


def test_a_cluster_queue_change_sweeps_only_the_workloads_that_resolve_to_it() -> None:
    assert _affected(CLUSTER_QUEUES[0]) == {"admitted-a", "queued-a"}
    assert _affected(CLUSTER_QUEUES[1]) == {"queued-b", "admitted-b"}


def test_a_local_queue_change_sweeps_only_its_unadmitted_workloads() -> None:
    assert _affected(LOCAL_QUEUES[0]) == {"queued-a"}
    assert _affected(LOCAL_QUEUES[1]) == {"queued-b"}


def test_a_policy_change_sweeps_the_workloads_of_the_queues_naming_it() -> None:
    assert _affected(_policy("gpu")) == {"admitted-a", "queued-a"}
    assert _affected(_policy(keys.DEFAULT_POLICY_NAME)) == {"queued-b", "admitted-b"}
    assert _affected(_policy("unused")) == set()


def _event(type_: watching.EventType, old: Any, new: Any) -> watching.Event[Any]:
    return watching.Event(type=type_, obj=new, old=old)


def test_status_writes_of_a_queue_sweep_nothing() -> None:
    queue = CLUSTER_QUEUES[0]
    status_write = queue.model_copy(deep=True)
    relabelled = _cq("cq-a", **{keys.ENABLED_LABEL: "false"})
    assert not routing.opt_in_changed(_event("MODIFIED", queue, status_write))
    assert routing.opt_in_changed(_event("MODIFIED", queue, relabelled))
    assert routing.opt_in_changed(_event("ADDED", None, queue))
    assert routing.opt_in_changed(_event("DELETED", queue, queue))
