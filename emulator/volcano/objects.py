"""The Volcano objects a user creates: a ``scheduling.volcano.sh/v1beta1`` Queue and a
``batch.volcano.sh/v1alpha1`` Job, for the demo (emulator/demo/systems.py) and the tests that
submit them (tests/integration/cluster/test_volcano.py,
tests/integration/bridge/test_volcano_preemptions.py).

Fields as in upstream's examples (tests/fixtures/upstream/volcano/examples) and types
(volcano-sh/apis ``pkg/apis/scheduling/v1beta1/types.go`` ``QueueSpec``,
``pkg/apis/batch/v1alpha1/job.go`` ``JobSpec`` / ``TaskSpec``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from emulator.volcano import jobs

Obj = dict[str, Any]


def queue(
    name: str,
    *,
    capability: Mapping[str, str],
    deserved: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
) -> Obj:
    """A reclaimable Queue of weight 1 (``labels`` None: the Queue carries no labels field)."""
    metadata: Obj = {"name": name}
    if labels is not None:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": jobs.SCHEDULING,
        "kind": "Queue",
        "metadata": metadata,
        "spec": {
            "weight": 1,
            "reclaimable": True,
            "capability": dict(capability),
            "deserved": dict(deserved),
        },
    }


def task(name: str, template: Obj, *, replicas: int = 1) -> Obj:
    return {"name": name, "replicas": replicas, "template": template}


def job(
    name: str,
    namespace: str,
    *,
    queue: str,
    tasks: Sequence[Obj],
    priority: str,
    policies: Sequence[Obj],
    min_available: int = 1,
    max_retry: int | None = None,
) -> Obj:
    """A Job for the ``volcano`` scheduler (``max_retry`` None: Volcano's default, 3)."""
    spec: Obj = {
        "schedulerName": "volcano",
        "queue": queue,
        "minAvailable": min_available,
        "priorityClassName": priority,
        "policies": copy.deepcopy(list(policies)),
        "tasks": list(tasks),
    }
    if max_retry is not None:
        spec["maxRetry"] = max_retry
    return {
        "apiVersion": jobs.BATCH,
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
