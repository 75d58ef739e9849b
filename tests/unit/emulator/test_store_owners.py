"""The emulated store keeps an owner index, as the garbage collector's graph does.

emulator/apiserver/collector.py finds a removed owner's dependents through
``Store.dependents`` instead of scanning every object of every kind (which made a benchmark's
emulator slower with every Event it held, issue 14). The index must follow every write: an
added reference, a dropped one, a replaced and a removed object.
"""

from __future__ import annotations

from typing import Any

from emulator.apiserver import store as store_module

PODS = ("", "pods")
JOBS = ("batch", "jobs")


def _obj(name: str, uid: str, *owners: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid}
    if owners:
        meta["ownerReferences"] = [{"uid": o, "kind": "Job", "name": o} for o in owners]
    return {"metadata": meta}


def test_the_owner_index_follows_adds_replacements_and_removals() -> None:
    store = store_module.Store()
    store.put(JOBS, _obj("a", "job-a"), old=None)
    store.put(PODS, _obj("p2", "pod-2", "job-a"), old=None)
    store.put(PODS, _obj("p1", "pod-1", "job-a", "job-b"), old=None)
    assert store.dependents("job-a") == [(PODS, ("ns", "p1")), (PODS, ("ns", "p2"))]
    assert store.dependents("job-b") == [(PODS, ("ns", "p1"))]
    assert store.exists("job-a")
    assert store.exists("pod-1")
    assert not store.exists("job-b")

    old = store.get(PODS, "ns", "p1")
    store.put(PODS, _obj("p1", "pod-1", "job-b"), old=old)  # the reference to job-a dropped
    assert store.dependents("job-a") == [(PODS, ("ns", "p2"))]
    assert store.dependents("job-b") == [(PODS, ("ns", "p1"))]

    stored = store.get(PODS, "ns", "p1")
    assert stored is not None
    store.remove(PODS, stored)
    assert store.dependents("job-b") == []
    assert not store.exists("pod-1")
    assert store.dependents("nobody") == []
