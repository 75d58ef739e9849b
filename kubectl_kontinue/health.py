"""Pure: ``kubectl kontinue status`` — each check of an installation, one line, with its fix.

The inputs are read by :mod:`kubectl_kontinue.cli` (one probe and a few GETs); every judgement
is here, so each check is tested table-style:

- **webhook answering**: a server-side dry-run CREATE of a pod that an opted-in queue feeds
  (``?dryRun=All`` runs admission but stores nothing) came back plumbed — the webhook stamps
  ``kontinue.dev/lineage`` on it. Its mutating webhook fails *open* (manifests/webhook/
  webhooks.yaml), so an unplumbed answer, not an error, is what an outage looks like;
- **caBundle current**: every webhook of the two ``kontinue-webhook`` configurations trusts the
  CA in the ``kontinue-webhook-tls`` Secret (``ca.crt``, written by webhook/certs.py or
  cert-manager);
- **bridge leader**: the ``kontinue-bridge`` Lease (queue_bridge/leader.py) has a holder whose
  ``renewTime + leaseDurationSeconds`` is not past;
- **queues**: each opted-in Kueue ClusterQueue / Volcano Queue, its policy, and for every
  namespace that feeds it (Kueue: a LocalQueue pointing at it; Volcano: a PodGroup in it) the
  policy's storage — a PersistentVolumeClaim of the policy's name that exists and is
  ``ReadWriteMany``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from kontinue import keys
from kontinue.models import base
from kontinue.models import policy as policy_model
from kubectl_kontinue import gathering, printing

Obj = dict[str, Any]

SYSTEM_NAMESPACE = "kontinue-system"
WEBHOOK_CONFIGURATION = "kontinue-webhook"
WEBHOOK_SECRET = "kontinue-webhook-tls"
BRIDGE_LEASE = "kontinue-bridge"
RWX = "ReadWriteMany"
_LOGS = f"kubectl -n {SYSTEM_NAMESPACE} logs deploy/"


@dataclasses.dataclass(frozen=True)
class Line:
    ok: bool
    subject: str
    text: str
    fix: str = ""

    def render(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        fix = f" -- fix: {self.fix}" if self.fix else ""
        return f"{mark} {self.subject}: {self.text}{fix}"


@dataclasses.dataclass(frozen=True)
class Probe:
    """The outcome of the dry-run pod create."""

    namespace: str
    queue: str
    plumbed: bool
    error: str = ""
    warnings: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Feed:
    """One namespace feeding one opted-in queue, and what its policy needs there."""

    system: str
    queue: str
    namespace: str
    local_queue: str = ""
    """Kueue: the LocalQueue in ``namespace`` (what a probe pod is labelled with)."""


@dataclasses.dataclass(frozen=True)
class OptedIn:
    system: str
    queue: str
    policy_name: str
    policy: policy_model.CheckpointPolicy | None
    feeds: tuple[Feed, ...]


def opted_in_queues(world: gathering.World) -> list[OptedIn]:
    """Every opted-in ClusterQueue and Volcano Queue, its policy, the namespaces feeding it."""
    found = []
    for cq in world.cluster_queues:
        labels = cq.metadata.labels or {}
        if labels.get(keys.ENABLED_LABEL) != "true":
            continue
        feeds = tuple(
            Feed("Kueue", cq.name, lq.namespace, lq.name)
            for lq in sorted(world.local_queues, key=lambda q: (q.namespace, q.name))
            if lq.spec.cluster_queue == cq.name
        )
        found.append(_opted("Kueue", cq.name, labels, feeds, world))
    for vq in world.volcano_queues:
        labels = vq.metadata.labels or {}
        if labels.get(keys.ENABLED_LABEL) != "true":
            continue
        namespaces = sorted({g.namespace for g in world.pod_groups if g.spec.queue == vq.name})
        feeds = tuple(Feed("Volcano", vq.name, ns) for ns in namespaces)
        found.append(_opted("Volcano", vq.name, labels, feeds, world))
    return found


def _opted(
    system: str, name: str, labels: Mapping[str, str], feeds: tuple[Feed, ...], world: Any
) -> OptedIn:
    policy_name = labels.get(keys.POLICY_LABEL) or keys.DEFAULT_POLICY_NAME
    chosen = world.policy(policy_name)
    if chosen is None and policy_name == keys.DEFAULT_POLICY_NAME:
        chosen = policy_model.DEFAULT
    return OptedIn(system, name, policy_name, chosen, feeds)


def probe_target(
    queues: Sequence[OptedIn], pvcs: Mapping[tuple[str, str], Obj | None] | None = None
) -> Feed | None:
    """The first Kueue feed (a pod labelled with its LocalQueue is plumbed), else Volcano's.

    With ``pvcs`` (:func:`claims_needed` looked up), a feed whose namespace lacks its policy's
    claim is passed over: the webhook rightly leaves pods there alone (webhook/claims.py), so a
    probe there says nothing about the webhook; the queue line reports the claim."""

    def usable(queue: OptedIn, feed: Feed) -> bool:
        storage = queue.policy.spec.storage.pvc if queue.policy is not None else None
        if pvcs is None or storage is None:
            return True
        return pvcs.get((feed.namespace, storage.claim_name)) is not None

    feeds = [f for q in queues if q.policy is not None for f in q.feeds if usable(q, f)]
    return next((f for f in feeds if f.local_queue), feeds[0] if feeds else None)


def webhook_lines(probe: Probe | None) -> list[Line]:
    if probe is None:
        return [
            Line(
                False,
                "webhook",
                "not probed: no namespace feeds an opted-in queue with a policy (and, for a "
                "PVC policy, has its claim)",
                "opt a queue in (kubectl kontinue enable clusterqueue NAME) and give it a "
                "LocalQueue in the namespace your jobs run in",
            )
        ]
    where = f"dry-run pod in {probe.namespace} (queue {probe.queue})"
    if probe.error:
        return [
            Line(
                False,
                "webhook",
                f"{where} was refused: {probe.error}",
                f"kubectl -n {SYSTEM_NAMESPACE} get pods,endpoints; {_LOGS}kontinue-webhook",
            )
        ]
    if not probe.plumbed:
        said = f" (warnings: {'; '.join(probe.warnings)})" if probe.warnings else ""
        return [
            Line(
                False,
                "webhook",
                f"{where} came back unplumbed: the webhook did not answer, or did not see the "
                f"queue as opted in{said}",
                f"kubectl -n {SYSTEM_NAMESPACE} get pods,endpoints; {_LOGS}kontinue-webhook",
            )
        ]
    return [Line(True, "webhook", f"answering ({where} was plumbed)")]


def _decoded(value: Any) -> bytes | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def ca_bundle_lines(configurations: Mapping[str, Obj | None], secret: Obj | None) -> list[Line]:
    """``configurations``: kind -> the ``kontinue-webhook`` configuration of that kind, or None."""
    lines: list[Line] = []
    trusted = _decoded(((secret or {}).get("data") or {}).get("ca.crt"))
    if trusted is None:
        return [
            Line(
                False,
                "caBundle",
                f"Secret {SYSTEM_NAMESPACE}/{WEBHOOK_SECRET} has no ca.crt: the webhook has "
                "not written its certificate yet",
                f"{_LOGS}kontinue-webhook",
            )
        ]
    for kind, configuration in configurations.items():
        if configuration is None:
            lines.append(
                Line(
                    False,
                    "caBundle",
                    f"{kind} {WEBHOOK_CONFIGURATION} does not exist",
                    "kubectl apply -k manifests/overlays/<kueue|volcano|both>",
                )
            )
            continue
        stale = [
            str(hook.get("name"))
            for hook in configuration.get("webhooks") or []
            if _decoded((hook.get("clientConfig") or {}).get("caBundle")) != trusted
        ]
        if stale:
            lines.append(
                Line(
                    False,
                    "caBundle",
                    f"{kind} {WEBHOOK_CONFIGURATION}: {', '.join(stale)} do not trust the "
                    f"current CA in {WEBHOOK_SECRET}",
                    f"kubectl -n {SYSTEM_NAMESPACE} rollout restart deploy/kontinue-webhook "
                    "(it rewrites caBundle at start), or check cert-manager's cainjector",
                )
            )
        else:
            lines.append(Line(True, "caBundle", f"{kind} {WEBHOOK_CONFIGURATION} current"))
    return lines


def _time(value: Any) -> datetime.datetime | None:
    if not value:
        return None
    return base.parse_time(str(value))


def leader_lines(lease: Obj | None, *, now: datetime.datetime) -> list[Line]:
    fix = f"kubectl -n {SYSTEM_NAMESPACE} get pods -l app.kubernetes.io/component=bridge"
    if lease is None:
        return [Line(False, "bridge", f"no Lease {SYSTEM_NAMESPACE}/{BRIDGE_LEASE}", fix)]
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if not holder:
        return [Line(False, "bridge", "no replica leads (the Lease has no holder)", fix)]
    renewed = _time(spec.get("renewTime"))
    acquired = _time(spec.get("acquireTime"))
    duration = int(spec.get("leaseDurationSeconds") or 15)
    since = f" since {printing.age(acquired, now=now)} ago" if acquired else ""
    if renewed is None or renewed + datetime.timedelta(seconds=duration) < now:
        last = f"{printing.age(renewed, now=now)} ago" if renewed else "never"
        return [
            Line(
                False,
                "bridge",
                f"{holder} holds an expired Lease (renewed {last}, duration {duration}s)",
                f"{fix}; {_LOGS}kontinue-bridge",
            )
        ]
    return [
        Line(
            True, "bridge", f"{holder} leads{since} (renewed {printing.age(renewed, now=now)} ago)"
        )
    ]


def queue_lines(
    queues: Sequence[OptedIn], pvcs: Mapping[tuple[str, str], Obj | None]
) -> list[Line]:
    """``pvcs``: (namespace, claim) -> the PVC, or None when it does not exist."""
    if not queues:
        return [
            Line(
                False,
                "queues",
                "no Kueue ClusterQueue or Volcano Queue has opted in",
                "kubectl kontinue enable clusterqueue NAME [--policy P]",
            )
        ]
    lines = []
    for queue in queues:
        subject = f"{'clusterqueue' if queue.system == 'Kueue' else 'queue'}/{queue.queue}"
        if queue.policy is None:
            lines.append(
                Line(
                    False,
                    subject,
                    f"policy {queue.policy_name} does not exist: its pods run without checkpoints",
                    f"create CheckpointPolicy {queue.policy_name} (docs/install.md), or "
                    f"kubectl kontinue enable {subject.replace('/', ' ')} --policy EXISTING",
                )
            )
            continue
        storage = queue.policy.spec.storage
        if not queue.feeds:
            lines.append(
                Line(True, subject, f"policy {queue.policy_name}; no namespace feeds it yet")
            )
            continue
        lines.append(
            Line(
                True,
                subject,
                f"policy {queue.policy_name}; fed by "
                f"{', '.join(sorted({f.namespace for f in queue.feeds}))}",
            )
        )
        for namespace in sorted({f.namespace for f in queue.feeds}):
            lines.append(_storage_line(subject, namespace, storage, pvcs))
    return lines


def _storage_line(
    subject: str,
    namespace: str,
    storage: policy_model.Storage,
    pvcs: Mapping[tuple[str, str], Obj | None],
) -> Line:
    where = f"{subject} ns/{namespace}"
    if storage.host_path is not None:
        return Line(
            True,
            where,
            f"hostPath {storage.host_path.path} (every node must share it: development only)",
        )
    assert storage.pvc is not None
    claim = storage.pvc.claim_name
    pvc = pvcs.get((namespace, claim))
    if pvc is None:
        return Line(
            False,
            where,
            f"PersistentVolumeClaim {claim} does not exist: the webhook leaves opted-in pods "
            "there untouched, without checkpoints (a CheckpointVolumeMissing Event says so)",
            f"create a ReadWriteMany PVC {claim} in {namespace} (docs/install.md, Storage)",
        )
    modes = (pvc.get("spec") or {}).get("accessModes") or []
    if RWX not in modes:
        return Line(
            False,
            where,
            f"PersistentVolumeClaim {claim} is {', '.join(modes) or 'without access modes'}, "
            f"not {RWX}: a pod restored on another node could not read its checkpoint",
            f"recreate {claim} in {namespace} with accessModes [{RWX}] on RWX storage "
            "(EFS, NFS, Filestore)",
        )
    phase = (pvc.get("status") or {}).get("phase")
    bound = f", {phase}" if phase else ""
    return Line(True, where, f"PersistentVolumeClaim {claim} ({RWX}{bound})")


def claims_needed(queues: Sequence[OptedIn]) -> list[tuple[str, str]]:
    """The (namespace, claim) pairs :func:`queue_lines` will look up."""
    needed = set()
    for queue in queues:
        if queue.policy is None or queue.policy.spec.storage.pvc is None:
            continue
        for feed in queue.feeds:
            needed.add((feed.namespace, queue.policy.spec.storage.pvc.claim_name))
    return sorted(needed)


def probe_pod(feed: Feed) -> Obj:
    """The dry-run pod: queued like a Job's pod, owned by a Job (else it has no lineage)."""
    labels = {keys.KUEUE_QUEUE_NAME_LABEL: feed.local_queue} if feed.local_queue else {}
    annotations = {} if feed.local_queue else {keys.VOLCANO_POD_QUEUE_ANNOTATION: feed.queue}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "kontinue-status-probe-",
            "namespace": feed.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "kontinue-status-probe",
                    "uid": "00000000-0000-0000-0000-000000000000",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def is_plumbed(pod: Obj) -> bool:
    return keys.LINEAGE_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})
