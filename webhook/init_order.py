"""Pure: where the restore container goes among a pod's init containers, and who sees its result.

Init containers start one after another in spec order. A *native sidecar* is an init container
with ``restartPolicy: Always`` (kubernetes/kubernetes pkg/api/v1/pod/util.go
``IsRestartableInitContainer``): the kubelet starts it, moves on to the next init container once
it has started, and keeps it running beside the main containers (recorded on a real kubelet:
tests/fixtures/kubelet/06-init-and-native-sidecar.json). Platform webhooks inject storage mounts
and proxies that way; GKE's Cloud Storage FUSE driver injects ``gke-gcsfuse-sidecar`` at index
0 of ``initContainers``, or right after ``istio-proxy`` (GoogleCloudPlatform/gcs-fuse-csi-driver
pkg/webhook/injection.go ``getInjectIndex``), and a read of such a volume needs it running.

The rule (docs/webhook.md, "Init containers"):

* the ``kontinue-restore`` container goes right after the pod's **last** native sidecar (index 0
  when there is none), so every sidecar (a storage mount, a proxy) has started before the restore
  reads the checkpoint;
* every ordinary init container *after* that position is the user's: it runs after the restore and
  gets a read-only view of the restored state (:func:`after_restore`). Init containers before the
  last sidecar run before the restore and are left as they are.

Whichever of two mutating webhooks runs first, the order comes out the same for a sidecar injected
at index 0: if Kontinue runs first (no sidecar yet) the restore is at 0 and the sidecar is put
before it; if the sidecar is there first, the restore goes after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kontinue import keys

Obj = dict[str, Any]


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """A native sidecar: an init container with ``restartPolicy: Always``."""
    return container.get("restartPolicy") == "Always"


def restore_index(inits: Sequence[Mapping[str, Any]]) -> int:
    """Where the restore container goes in ``inits`` (which must not hold it): after the last
    native sidecar, else first."""
    last = max((i for i, c in enumerate(inits) if is_sidecar(c)), default=-1)
    return last + 1


def after_restore(inits: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of the user's init containers that run after the restore: those after the
    restore position (:func:`restore_index`), Kontinue's own container left out. None of them
    is a native sidecar, since the position is after the last one."""
    others = [i for i, c in enumerate(inits) if not is_restore(c)]
    start = restore_index([inits[i] for i in others])
    return others[start:]


def arrange(inits: Sequence[Obj], restore: Obj | None, *, drop: Callable[[Obj], bool]) -> list[Obj]:
    """``inits`` without the containers ``drop`` names, with ``restore`` (when given) at
    :func:`restore_index`. The others keep their relative order."""
    kept = [c for c in inits if not drop(c)]
    if restore is None:
        return kept
    at = restore_index(kept)
    return [*kept[:at], restore, *kept[at:]]


def is_restore(container: Mapping[str, Any]) -> bool:
    """Kontinue's restore init container (or the Job template's stand-in: the same name)."""
    return container.get("name") == keys.RESTORE_INIT_CONTAINER
