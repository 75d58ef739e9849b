"""The router's pod indexes (queue_bridge/routing.py): the sweep's Pod and Disruption keys, and a
Workload's lineage disruption keys, are what a scan of the pod cache gives, after any sequence
of pod events (applied through the real watch cache, store and subscribers)."""

from __future__ import annotations

import copy
import json
import random
from typing import Any, cast

from kontinue import keys, lineage
from kontinue.models import checkpoint, core
from queue_bridge import caches as caches_module
from queue_bridge import disruptions, kinds, queueing, routing
from tests import fixtures

VICTIM = fixtures.FIXTURES / "bridge/pod-disruption-preemption-by-scheduler.json"
OWNERS = [
    checkpoint.Lineage(namespace="team-a", owner_kind="Job", owner_name=n, owner_uid=f"u-{n}")
    for n in ("a", "b", "c")
]


def _scan(pods: list[core.Pod]) -> tuple[list[kinds.Key], list[kinds.Key]]:
    """The sweep's keys as a scan of every cached pod finds them (the rule before the index)."""
    matter = [kinds.key(kinds.POD, p) for p in pods if routing.pod_matters(p)]
    disrupted = [
        (kinds.DISRUPTION, p.namespace, p.metadata.annotation(keys.LINEAGE_ANNOTATION) or "")
        for p in pods
        if disruptions.has_disruption(p)
    ]
    return matter, disrupted


def _variant(base: dict[str, Any], name: str, rng: random.Random, version: int) -> dict[str, Any]:
    raw = copy.deepcopy(base)
    meta = raw["metadata"]
    meta.update(name=name, uid=f"uid-{name}", namespace=rng.choice(["team-a", "team-b"]))
    meta["resourceVersion"] = str(version)
    annotations = meta.setdefault("annotations", {})
    annotations.pop(keys.LINEAGE_ANNOTATION, None)
    if rng.random() < 0.8:
        annotations[keys.LINEAGE_ANNOTATION] = lineage.annotation_value(rng.choice(OWNERS))
    if rng.random() < 0.3:
        annotations[keys.RESTORE_FROM_ANNOTATION] = "cp-1"
    meta["finalizers"] = [keys.CHECKPOINT_FINALIZER] if rng.random() < 0.5 else []
    if rng.random() < 0.5:  # no DisruptionTarget condition
        raw["status"]["conditions"] = [
            c
            for c in raw["status"]["conditions"]
            if c["type"] != keys.POD_CONDITION_DISRUPTION_TARGET
        ]
    return raw


def test_the_sweep_and_lineage_keys_follow_the_pod_cache_through_any_events() -> None:
    rng = random.Random(14)
    base = json.loads(VICTIM.read_text())
    caches = caches_module.Caches(cast(Any, None), admission_check=False)  # never run: no I/O
    queue: queueing.WorkQueue[kinds.Key] = queueing.WorkQueue()
    router = routing.Router(caches, queue)
    names = [f"pod-{i}" for i in range(12)]
    version = 1
    for step in range(400):
        name = rng.choice(names)
        version += 1
        held = caches.pods.get(name, "team-a") or caches.pods.get(name, "team-b")
        if held is not None and rng.random() < 0.25:
            raw = {"metadata": {"name": name, "namespace": held.namespace, "uid": f"uid-{name}"}}
            raw["metadata"]["resourceVersion"] = str(version)
            caches.pods._apply({"type": "DELETED", "object": raw})  # noqa: SLF001
        else:
            raw = _variant(base, name, rng, version)
            if held is not None and held.namespace != raw["metadata"]["namespace"]:
                raw["metadata"]["namespace"] = held.namespace  # a pod never moves namespace
            kind = "MODIFIED" if held is not None else "ADDED"
            caches.pods._apply({"type": kind, "object": raw})  # noqa: SLF001
        pods = caches.pods.items()
        matter, disrupted = _scan(pods)
        assert list(router.keys_of(kinds.POD)) == matter, step
        assert list(router.keys_of(kinds.DISRUPTION)) == disrupted, step

        # a Workload's event queues its lineage's disruption keys: those of the cached pods
        router.leading = True
        for owner in OWNERS:
            queue._waiting.clear()  # noqa: SLF001
            router._add_lineage_disruptions(owner)  # noqa: SLF001
            expected = {
                (kinds.DISRUPTION, p.namespace, lineage.annotation_value(owner))
                for p in caches.lineage_pods(owner)
                if disruptions.has_disruption(p)
            }
            assert set(queue._waiting) == expected, (step, owner.owner_name)  # noqa: SLF001
        router.leading = False
    assert len(caches.pods) > 0
