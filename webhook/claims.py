"""Pure: is an opted-in object's checkpoint claim missing from its namespace? No I/O.

A policy with ``storage.pvc`` mounts the PersistentVolumeClaim ``claimName`` *of the pod's own
namespace* (webhook/plumbing.py). A pod naming a claim that does not exist is never scheduled
(kube-scheduler's VolumeBinding plugin: ``persistentvolumeclaim "..." not found``,
kubernetes/kubernetes ``pkg/scheduler/framework/plugins/volumebinding/volume_binding.go``), so
plumbing it would leave it Pending forever because of Kontinue. The rule:

* the claim is **known absent** (the webhook's claim cache has synced and has no such claim,
  :meth:`webhook.state.State.claim_exists` is ``False``): the pod, Job or Volcano Job is left
  untouched — no patch at all (no volume, env, restore container, finalizer or label) — and
  admitted with a warning naming the namespace, the claim and the policy; a pod's admission also
  leaves a ``CheckpointVolumeMissing`` Warning Event (webhook/observing.py);
* the claim exists, the policy uses ``hostPath``, or the claims are **not known** (``None``:
  the cache has not synced): plumbed as before. Not knowing is not a reason to drop checkpoints.

A claim created later takes effect for the next object admitted: nothing already admitted is
revisited.
"""

from __future__ import annotations

import dataclasses

from kontinue.models import policy as policy_model
from webhook import state as state_module


@dataclasses.dataclass(frozen=True)
class Missing:
    """The claim ``claim`` of CheckpointPolicy ``policy`` does not exist in ``namespace``."""

    namespace: str
    claim: str
    policy: str

    def message(self) -> str:
        """The Event's message: the same for every pod of the namespace, so it aggregates."""
        return (
            f'namespace "{self.namespace}" has no PersistentVolumeClaim "{self.claim}" (the '
            f'checkpoint volume of CheckpointPolicy "{self.policy}"): its opted-in pods run '
            "without checkpoints until it exists (docs/install.md)"
        )

    def warning(self, kind: str) -> str:
        """The admission warning for one ``kind`` (``pod``, ``Job``, ``Volcano Job``)."""
        return (
            f"kontinue: {kind} not plumbed: no PersistentVolumeClaim "
            f'"{self.claim}" in namespace "{self.namespace}" (CheckpointPolicy "{self.policy}"); '
            "create it for checkpoints"
        )


def missing(
    policy: policy_model.CheckpointPolicy, *, namespace: str, state: state_module.State
) -> Missing | None:
    """The missing claim, or ``None`` when the object may be plumbed (see the module doc)."""
    pvc = policy.spec.storage.pvc
    if pvc is None:
        return None
    if state.claim_exists(namespace, pvc.claim_name) is not False:
        return None
    return Missing(namespace=namespace, claim=pvc.claim_name, policy=policy.name)
