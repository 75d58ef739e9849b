"""The bridge's work-queue keys: ``(kind, namespace, name)``, one kind per handler.

``Disruption`` keys name a lineage (the value of its ``kontinue.dev/lineage`` annotation), not
an object; the other kinds name the object their handler reconciles
(:mod:`queue_bridge.handlers`).
"""

from __future__ import annotations

from typing import Any

Key = tuple[str, str, str]
WORKLOAD = "Workload"
CHECKPOINT = "Checkpoint"
POD = "Pod"
JOB = "Job"
VOLCANO_JOB = "VolcanoJob"
ADMISSION_CHECK = "AdmissionCheck"
DISRUPTION = "Disruption"
SWEEP_ORDER = (ADMISSION_CHECK, JOB, VOLCANO_JOB, CHECKPOINT, WORKLOAD, DISRUPTION, POD)
"""The order of a new leader's full sweep (as the keys are added; urgent keys run first)."""
URGENT = (WORKLOAD, DISRUPTION)
"""The kinds whose handlers create Checkpoints: handed to workers before the others
(:mod:`queue_bridge.queueing`), so a burst of evictions is not queued behind the follow-up keys
(Checkpoint status, member pods) of its first Checkpoints."""


def urgent(key: Key) -> bool:
    return key[0] in URGENT


def key(kind: str, obj: Any) -> Key:
    """The key of a cached object: its kind, namespace ("" if cluster-scoped) and name."""
    meta = obj.metadata
    return (kind, meta.namespace or "", meta.name or "")
