"""Benchmark: what the webhook's PersistentVolumeClaim cache holds per claim (issue 10).

Run: ``python -m benchmarks.bench_claim_cache`` (``make bench``; a few seconds). Prints numbers;
asserts nothing. ``--claims`` changes the count.

Each claim is shaped like a bound EFS claim from a real apiserver (``managedFields``, provisioner
annotations, spec and status). Each is folded into a watch cache's store (kontinue/kube/store.py)
the way the webhook's cache (webhook/caches.py) folds a listed object — pruned to
:class:`kontinue.models.core.ClaimName` and packed — and, for comparison, kept as the same model
without the prune. ``tracemalloc`` measures what the store retains (the raw objects are made
before tracing starts, as a list response's would be freed after the fold).
"""

from __future__ import annotations

import argparse
import functools
import gc
import tracemalloc
from typing import Any

from kontinue.kube import api as kube_api
from kontinue.kube import resources, watching
from kontinue.models import core, pruning


def claim(index: int) -> dict[str, Any]:
    namespace = f"team-{index:05d}"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "kontinue",
            "namespace": namespace,
            "uid": f"0b9d6f5e-1111-2222-3333-{index:012d}",
            "resourceVersion": str(1000 + index),
            "creationTimestamp": "2026-12-03T10:00:00Z",
            "annotations": {
                "pv.kubernetes.io/bind-completed": "yes",
                "volume.beta.kubernetes.io/storage-provisioner": "efs.csi.aws.com",
            },
            "finalizers": ["kubernetes.io/pvc-protection"],
            "managedFields": [
                {
                    "manager": "kubectl",
                    "operation": "Apply",
                    "apiVersion": "v1",
                    "time": "2026-12-03T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:spec": {
                            "f:accessModes": {},
                            "f:resources": {"f:requests": {"f:storage": {}}},
                            "f:storageClassName": {},
                        }
                    },
                }
            ],
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "500Gi"}},
            "storageClassName": "efs-sc",
            "volumeMode": "Filesystem",
            "volumeName": f"pvc-{index}",
        },
        "status": {
            "phase": "Bound",
            "accessModes": ["ReadWriteMany"],
            "capacity": {"storage": "500Gi"},
        },
    }


def retained(count: int, *, slim: bool) -> int:
    """Bytes the store retains for ``count`` claims."""
    cache: watching.WatchCache[core.ClaimName] = watching.WatchCache(
        kube_api.Api.__new__(kube_api.Api),  # never called: nothing is listed or watched
        resources.PVCS,
        model=core.ClaimName,
        transform=functools.partial(pruning.prune, core.ClaimName) if slim else None,
        packed=slim,
    )
    raws = [claim(i) for i in range(count)]
    keys = [(str(r["metadata"]["namespace"]), "kontinue") for r in raws]
    gc.collect()
    tracemalloc.start()
    for key, raw in zip(keys, raws, strict=True):
        entry = cache._store.admit(key, raw, keep=False)
        assert entry is not None
        cache._store.put(key, entry)
    gc.collect()
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert cache.has("kontinue", keys[-1][0])
    return current


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--claims", type=int, default=10_000)
    count = parser.parse_args().claims
    for slim, what in ((True, "pruned + packed (webhook/caches.py)"), (False, "model, unpruned")):
        size = retained(count, slim=slim)
        print(f"{what:38} {size / count:8.0f} B/claim  {size / 2**20:6.1f} MiB for {count}")


if __name__ == "__main__":
    main()
