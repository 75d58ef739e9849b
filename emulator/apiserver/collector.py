"""The garbage collector, reduced to what tests observe (pkg/controller/garbagecollector).

When an owner is really gone (not merely terminating), each dependent naming its uid in
``ownerReferences`` is deleted with Background propagation (graceful for pods), unless another
owner still exists or the owner was deleted with ``Orphan``: then only the reference is removed.
Runs as a background task, as the controller does; Foreground propagation is treated as
Background. A failing delete is not retried (the real collector requeues).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from emulator.apiserver import users
from kontinue.kube import errors

if TYPE_CHECKING:
    from emulator.apiserver import registry

GC_USER = users.user("system:serviceaccount:kube-system:generic-garbage-collector")


async def collect(reg: registry.Registry, owner_uid: str, *, orphan: bool) -> None:
    """Delete (or orphan) the dependents of a removed owner, found through the store's owner
    index (the collector's dependency graph), kind by kind as registered."""
    by_key = {k.key: k for k in reg.kinds.values()}
    found = reg.store.dependents(owner_uid)
    for kind in by_key.values():
        for key, (namespace, name) in found:
            if key != kind.key:
                continue
            obj = reg.store.get(key, namespace, name)
            if obj is None:  # gone meanwhile
                continue
            refs = obj["metadata"].get("ownerReferences") or []
            if not any(r.get("uid") == owner_uid for r in refs):
                continue
            ns = obj["metadata"].get("namespace")
            others = [r for r in refs if r.get("uid") != owner_uid]
            try:
                if orphan or any(reg.store.exists(r.get("uid")) for r in others):
                    await reg.patch(
                        kind,
                        name,
                        [{"op": "replace", "path": "/metadata/ownerReferences", "value": others}],
                        content_type="application/json-patch+json",
                        namespace=ns,
                        user=GC_USER,
                    )
                else:
                    await reg.delete(
                        kind, name, namespace=ns, user=GC_USER, propagation_policy="Background"
                    )
            except errors.ApiError:
                continue
