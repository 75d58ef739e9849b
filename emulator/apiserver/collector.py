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


def _all_uids(reg: registry.Registry) -> set[str]:
    keys = {k.key for k in reg.kinds.values()}
    return {o["metadata"]["uid"] for key in keys for o in reg.store.items(key)}


async def collect(reg: registry.Registry, owner_uid: str, *, orphan: bool) -> None:
    """Delete (or orphan) the dependents of a removed owner."""
    by_key = {k.key: k for k in reg.kinds.values()}
    for kind in by_key.values():
        for obj in reg.store.items(kind.key):
            refs = obj["metadata"].get("ownerReferences") or []
            if not any(r.get("uid") == owner_uid for r in refs):
                continue
            name, ns = obj["metadata"]["name"], obj["metadata"].get("namespace")
            others = [r for r in refs if r.get("uid") != owner_uid]
            try:
                if orphan or any(r.get("uid") in _all_uids(reg) for r in others):
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
