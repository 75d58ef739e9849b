"""Pure: the JSON Patch that plumbs an opted-in pod. No I/O, no aiohttp.

It renders the restore plan (kontinue/restore_plan.py) and decides nothing about restores.

Pod (CREATE), per its ``CheckpointPolicy`` (docs/webhook.md, "Mutating"; docs/workload-contract.md):

* the checkpoint volume (the policy's PVC or hostPath) mounted at ``storage.mountPath`` in
  every main container;
* ``KONTINUE_MEMBER``, the pod's member identity (kontinue/identity.py), which the workload
  records in each save's manifest and the restore init-container checks;
* ``KONTINUE_POD_UID`` from the downward API, then ``KONTINUE_CHECKPOINT_DIR`` =
  ``<mount>/<lineage dir>/$(KONTINUE_POD_UID)``: a mutating webhook never sees the UID, and the
  kubelet expands ``$(VAR)`` from variables defined *earlier in the same list* (recorded:
  tests/fixtures/kubelet/10-downward-env.json), so ours go first;
* ``terminationGracePeriodSeconds`` raised to the policy minimum, never lowered;
* the lineage annotation, the ``kontinue.dev/plumbed`` label (what the bridge's pod watch selects
  on) and the ``kontinue.dev/checkpoint`` finalizer;
* with a restore: the ``kontinue-restore`` init container, placed after the pod's native sidecars
  and before the user's own init containers (webhook/init_order.py), ``KONTINUE_RESTORE_FROM``
  and ``KONTINUE_RESTORE_MEMBER`` (the identity whose state it brings: the pod's own, rank 0's
  under consistency ``shared``) in every main container, the ``kontinue.dev/restore-from``
  annotation and required node affinity; without one, the ``kontinue.dev/cold-start-reason``
  annotation;
* the user's init containers that run after the restore's position get a read-only view:
  ``KONTINUE_POD_UID``, ``KONTINUE_MEMBER``, with a restore ``KONTINUE_RESTORE_FROM`` and
  ``KONTINUE_RESTORE_MEMBER``, and the checkpoint volume and the restore link's volume mounted
  ``readOnly`` (no ``KONTINUE_CHECKPOINT_DIR``: saving is the main containers' business). Native
  sidecars are left as they are: they start before the restore (storage mounts, proxies).

The patch must pass a real apiserver's validation: volume names stay unique (ours are reused if
already there), an env name appears once (our names replace any the user set, with a warning),
a mountPath is used once per container (a clash with a user volume leaves the pod unplumbed,
with a warning, rather than producing an invalid pod).

``KONTINUE_RESTORE_FROM`` is the stable path of a symlink in a per-pod ``emptyDir``, which the
init container points at the checkpoint directory it verified: the awaited checkpoint if the
previous incarnation's save ends well, else the fallback. The main containers cannot be told
that choice through env (fixed at admission), but they can follow a link made before they start.
When nothing can be restored the link is absent, and the workload starts cold.

When the plan awaits a multi-member set under ``coupled`` consistency, the pod also gets the
scheduling gate ``kontinue.dev/set-verdict`` and the init container's ``KONTINUE_WAIT_FOR`` /
``KONTINUE_WAIT_SECONDS`` expand two downward-API variables read from annotations the bridge
writes when the set is terminal (kontinue/restore_plan.py ``verdict``): the awaited member's
directory if every member saved, else a directory that never exists, so the restore goes
straight to the fallback. Every pod of the incarnation thus follows the one verdict.

Jobs: :mod:`webhook.job_plumbing`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kontinue import json_copy, keys, lineage, workload
from kontinue import restore as restore_program
from kontinue.models import checkpoint
from kontinue.models import policy as policy_model
from webhook import init_order, review

Obj = dict[str, Any]

RESTORE_VOLUME = "kontinue-restore"
RESTORE_DIR = "/var/run/kontinue"
RESTORE_LINK = f"{RESTORE_DIR}/restore-from"
# The restore init-container's env (read by kontinue/restore/program.py), named in kontinue.keys.
ENV_RESTORE_SOURCE = keys.ENV_RESTORE_SOURCE
ENV_RESTORE_CHECKPOINT = keys.ENV_RESTORE_CHECKPOINT
ENV_WAIT_CHECKPOINT = keys.ENV_WAIT_CHECKPOINT
ENV_WAIT_SECONDS = keys.ENV_WAIT_SECONDS
RESERVED_ENV = frozenset(
    {
        keys.ENV_POD_UID,
        keys.ENV_CHECKPOINT_DIR,
        keys.ENV_RESTORE_FROM,
        keys.ENV_RESTORE_MEMBER,
        keys.ENV_MEMBER,
    }
)


@dataclasses.dataclass(frozen=True)
class Restore:
    """Where a new pod restores from, resolved to paths on the checkpoint volume.

    ``source``: the directory to restore from now (``""`` when only waiting without a
    fallback); ``wait_for``: the previous incarnation's directory, still being written.
    """

    checkpoint: str
    source: str
    wait_for_checkpoint: str = ""
    wait_for: str = ""
    node_labels: dict[str, str] = dataclasses.field(default_factory=dict)
    gated: bool = False
    """Wait behind the ``kontinue.dev/set-verdict`` gate for the bridge's verdict on the awaited
    set (kontinue/restore_plan.py ``Plan.await_verdict``)."""
    member: str = ""
    """The identity whose member is restored (``Plan.identity``: the pod's own, or rank 0's
    under ``shared``); the restore container checks the manifest against it."""
    wait_seconds: int | None = None
    """How long the restore waits for ``wait_for``; ``None``: the policy's
    ``restore.waitForSavingSeconds``. 0 for an ``Unreported`` member (``Plan.verify_only``):
    its directory is final, checked once."""

    @property
    def annotation(self) -> str:
        return self.wait_for_checkpoint or self.checkpoint


@dataclasses.dataclass(frozen=True)
class Plan:
    patch: list[review.JsonPatchOp]
    warnings: list[str]


def escape(key: str) -> str:
    """A JSON Pointer token (RFC 6901): ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


def _volume(policy: policy_model.CheckpointPolicy) -> Obj:
    storage = policy.spec.storage
    if storage.pvc is not None:
        return {
            "name": keys.CHECKPOINT_VOLUME,
            "persistentVolumeClaim": {"claimName": storage.pvc.claim_name},
        }
    assert storage.host_path is not None  # Storage validates exactly one source
    return {
        "name": keys.CHECKPOINT_VOLUME,
        "hostPath": {"path": storage.host_path.path, "type": "DirectoryOrCreate"},
    }


def _env(*, checkpoint_dir: str, member: str, restore_member: str | None) -> list[Obj]:
    """Our env of every main container (and the restore init-container); ``restore_member``:
    the identity whose state a planned restore brings (``None``: no restore)."""
    env: list[Obj] = [
        {
            "name": keys.ENV_POD_UID,
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.uid"}},
        },
        {"name": keys.ENV_CHECKPOINT_DIR, "value": checkpoint_dir},
        {"name": keys.ENV_MEMBER, "value": member},
    ]
    if restore_member is not None:
        env += [
            {"name": keys.ENV_RESTORE_FROM, "value": RESTORE_LINK},
            {"name": keys.ENV_RESTORE_MEMBER, "value": restore_member},
        ]
    return env


def _init_env(*, member: str, restore_member: str | None) -> list[Obj]:
    """A user init container's variables: who it is and where the restored state is, not where
    to save."""
    env = _env(checkpoint_dir="", member=member, restore_member=restore_member)
    return [e for e in env if e["name"] != keys.ENV_CHECKPOINT_DIR]


def _with_env(container: Obj, ours: list[Obj], warnings: list[str]) -> list[Obj]:
    """``ours`` first (``$(VAR)`` expansion reads earlier entries), then the user's variables
    without the reserved names, whose values are replaced with a warning."""
    user_env = container.get("env")
    kept = [e for e in user_env or [] if e.get("name") not in RESERVED_ENV]
    dropped = sorted({e.get("name") for e in user_env or []} & RESERVED_ENV)
    if dropped:
        warnings.append(
            f"kontinue: container {container.get('name')}: {', '.join(dropped)} "
            "is set by Kontinue; your value was replaced"
        )
    return ours + kept


def _read_only_view(
    container: Obj,
    *,
    mount_path: str,
    member: str,
    restore_member: str | None,
    warnings: list[str],
) -> Obj:
    """A user init container that runs after the restore: it sees the restored state."""
    out: Obj = json_copy.copied(container)
    ours = _init_env(member=member, restore_member=restore_member)
    out["env"] = _with_env(container, ours, warnings)
    restore = restore_member is not None
    mounts: list[Obj] = list(out.get("volumeMounts") or [])
    mounted = {m.get("name") for m in mounts}
    if keys.CHECKPOINT_VOLUME not in mounted:
        mounts.append({"name": keys.CHECKPOINT_VOLUME, "mountPath": mount_path, "readOnly": True})
    if restore and RESTORE_VOLUME not in mounted:
        mounts.append({"name": RESTORE_VOLUME, "mountPath": RESTORE_DIR, "readOnly": True})
    out["volumeMounts"] = mounts
    return out


def _gate() -> Obj:
    return {"name": keys.SET_VERDICT_GATE}


def _annotation_env(name: str, annotation: str) -> Obj:
    path = f"metadata.annotations['{annotation}']"
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def _init_container(
    *,
    image: str,
    policy: policy_model.CheckpointPolicy,
    restore: Restore,
    checkpoint_dir: str,
    security_context: Obj | None,
    member: str,
) -> Obj:
    env = _env(
        checkpoint_dir=checkpoint_dir, member=member, restore_member=restore.member or member
    )
    wait_for = restore.wait_for
    wait_seconds = str(
        policy.spec.restore.wait_for_saving_seconds
        if restore.wait_seconds is None
        else restore.wait_seconds
    )
    if restore.gated:
        # Read when the container starts, after the bridge wrote its verdict and ungated the
        # pod; expanded into the two variables below, which the kubelet resolves from earlier
        # entries of the same list. Until then (or if someone else removes the gate) the path
        # is the lineage directory itself, which never holds a manifest: the restore waits out
        # its time and falls back, never trusting the awaited member alone.
        env += [
            _annotation_env(keys.ENV_VERDICT_MEMBER, keys.RESTORE_MEMBER_ANNOTATION),
            _annotation_env(keys.ENV_VERDICT_WAIT, keys.RESTORE_WAIT_ANNOTATION),
        ]
        wait_for = f"{wait_for.rstrip('/').rsplit('/', 1)[0]}/$({keys.ENV_VERDICT_MEMBER})"
        wait_seconds = f"$({keys.ENV_VERDICT_WAIT})"
    env += [
        {"name": ENV_RESTORE_SOURCE, "value": restore.source},
        {"name": ENV_RESTORE_CHECKPOINT, "value": restore.checkpoint},
        {"name": keys.ENV_WAIT_FOR, "value": wait_for},
        {"name": ENV_WAIT_CHECKPOINT, "value": restore.wait_for_checkpoint},
        {"name": ENV_WAIT_SECONDS, "value": wait_seconds},
    ]
    container: Obj = {
        "name": keys.RESTORE_INIT_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(restore_program.COMMAND),
        "env": env,
        "volumeMounts": [
            {
                "name": keys.CHECKPOINT_VOLUME,
                "mountPath": policy.spec.storage.mount_path,
                "readOnly": True,
            },
            {"name": RESTORE_VOLUME, "mountPath": RESTORE_DIR},
        ],
        "resources": json_copy.copied(restore_program.RESOURCES),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if security_context:
        # Read the checkpoint as the workload wrote it: same user, same groups.
        container["securityContext"] = json_copy.copied(security_context)
    return container


def _affinity_ops(spec: Obj, required: dict[str, str]) -> tuple[list[review.JsonPatchOp], str]:
    """Ops that AND ``required`` into the pod's required node affinity, or a conflict reason.

    A key the pod's nodeSelector (user's or Kueue's flavor) already pins to the same value needs
    nothing; pinned to another value, the checkpoint cannot be used here (returned as a reason).
    nodeSelectorTerms are ORed, so every existing term gets our expressions.
    """
    selector: dict[str, str] = spec.get("nodeSelector") or {}
    wanted = {}
    for key, value in sorted(required.items()):
        if key in selector:
            if selector[key] != value:
                return [], f"nodeSelector {key}={selector[key]} excludes checkpoint's {value}"
            continue
        wanted[key] = value
    if not wanted:
        return [], ""
    expressions = [{"key": k, "operator": "In", "values": [v]} for k, v in wanted.items()]
    affinity: Obj = json_copy.copied(spec.get("affinity") or {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required_terms = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required_terms.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchExpressions"] = list(term.get("matchExpressions") or []) + expressions
    required_terms["nodeSelectorTerms"] = terms
    op = "replace" if "affinity" in spec else "add"
    return [{"op": op, "path": "/spec/affinity", "value": affinity}], ""


def annotation_ops(meta: Obj, wanted: dict[str, str | None]) -> list[review.JsonPatchOp]:
    """Set (value) or remove (``None``) annotations; creates the map when absent."""
    return _map_ops(meta, "annotations", wanted)


def label_ops(meta: Obj, wanted: dict[str, str]) -> list[review.JsonPatchOp]:
    """Set labels; creates the map when absent."""
    return _map_ops(meta, "labels", dict(wanted))


def _map_ops(meta: Obj, field: str, wanted: dict[str, str | None]) -> list[review.JsonPatchOp]:
    """Set (value) or remove (``None``) keys of the ``metadata.<field>`` map; creates it when
    absent."""
    current: dict[str, str] = meta.get(field) or {}
    ops: list[review.JsonPatchOp] = []
    if meta.get(field) is None:
        fresh = {k: v for k, v in wanted.items() if v is not None}
        return [{"op": "add", "path": f"/metadata/{field}", "value": fresh}] if fresh else []
    for key, value in wanted.items():
        path = f"/metadata/{field}/{escape(key)}"
        if value is None:
            if key in current:
                ops.append({"op": "remove", "path": path})
        elif current.get(key) != value:
            ops.append({"op": "replace" if key in current else "add", "path": path, "value": value})
    return ops


def plumb_pod(
    pod: Obj,
    *,
    pod_lineage: checkpoint.Lineage,
    policy: policy_model.CheckpointPolicy,
    restore: Restore | None,
    cold_start_reason: str,
    image: str,
    member: str,
    chosen: workload.Choice | None = None,
) -> Plan:
    """The patch for one opted-in pod on CREATE (see the module docstring).

    ``member``: the pod's member identity (kontinue/identity.py), given to every container as
    ``KONTINUE_MEMBER``; ``restore``: the rendered restore plan (kontinue/restore_plan.py);
    ``chosen``: the pod's workload containers (``workload.of_spec``), when the caller has them.
    """
    meta: Obj = pod.get("metadata") or {}
    spec: Obj = pod.get("spec") or {}
    storage = policy.spec.storage
    warnings: list[str] = []
    ops: list[review.JsonPatchOp] = []

    checkpoint_dir = (
        f"{storage.mount_path.rstrip('/')}/"
        f"{lineage.checkpoint_dir(policy, pod_lineage, f'$({keys.ENV_POD_UID})')}"
    )

    # Refuse early (no patch at all) if one of our mounts would clash with a user's mount:
    # another volume at our mountPath (the apiserver refuses a duplicate mountPath), or our
    # volume name at another path (the env would then lie). The restore link's volume counts
    # even for a cold start: the next incarnation would need it (found by the fuzz suite).
    inits_before: list[Obj] = spec.get("initContainers") or []
    viewers = [inits_before[j] for j in init_order.after_restore(inits_before)]
    our_mounts = ((keys.CHECKPOINT_VOLUME, storage.mount_path), (RESTORE_VOLUME, RESTORE_DIR))
    for container in [*(spec.get("containers") or []), *viewers]:
        for mount in container.get("volumeMounts") or []:
            for name, path in our_mounts:
                if (mount.get("mountPath") == path) != (mount.get("name") == name):
                    return Plan(
                        [],
                        [
                            f"kontinue: container {container.get('name')} already mounts "
                            f"{mount.get('name')} at {mount.get('mountPath')}, where Kontinue "
                            f"needs {name} at {path}; pod left without checkpoints"
                        ],
                    )

    if restore is not None and restore.node_labels:
        affinity_ops, conflict = _affinity_ops(spec, restore.node_labels)
        if conflict:
            cold_start_reason = f"checkpoint {restore.annotation} not usable: {conflict}"
            restore = None
        else:
            ops += affinity_ops

    ops += annotation_ops(
        meta,
        {
            keys.LINEAGE_ANNOTATION: lineage.annotation_value(pod_lineage),
            keys.RESTORE_FROM_ANNOTATION: restore.annotation if restore else None,
            keys.COLD_START_REASON_ANNOTATION: None if restore else cold_start_reason,
            # Only the bridge writes the verdict, after admission.
            keys.RESTORE_MEMBER_ANNOTATION: None,
            keys.RESTORE_WAIT_ANNOTATION: None,
        },
    )
    # the lineage hash: the webhook finds a replacement's unrecorded predecessors by it
    # (webhook/freshness.py, webhook/unrecorded.py)
    ops += label_ops(
        meta,
        {keys.PLUMBED_LABEL: keys.PLUMBED_VALUE, keys.CHECKPOINT_LINEAGE_LABEL: pod_lineage.hash},
    )
    if restore is not None and restore.gated:
        gates = spec.get("schedulingGates")
        if gates is None:
            ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [_gate()]})
        elif _gate() not in gates:
            ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": _gate()})

    finalizers = meta.get("finalizers")
    if finalizers is None:
        ops.append(
            {"op": "add", "path": "/metadata/finalizers", "value": [keys.CHECKPOINT_FINALIZER]}
        )
    elif keys.CHECKPOINT_FINALIZER not in finalizers:
        ops.append(
            {"op": "add", "path": "/metadata/finalizers/-", "value": keys.CHECKPOINT_FINALIZER}
        )

    grace = spec.get("terminationGracePeriodSeconds")
    minimum = policy.spec.min_grace_period_seconds
    if grace is None or grace < minimum:
        op = "add" if grace is None else "replace"
        ops.append({"op": op, "path": "/spec/terminationGracePeriodSeconds", "value": minimum})

    volumes = spec.get("volumes")
    wanted_volumes = [_volume(policy)]
    if restore is not None:
        wanted_volumes.append({"name": RESTORE_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}})
    names = {v.get("name") for v in volumes or []}
    missing = [v for v in wanted_volumes if v["name"] not in names]
    if volumes is None:
        ops.append({"op": "add", "path": "/spec/volumes", "value": missing})
    else:
        ops += [{"op": "add", "path": "/spec/volumes/-", "value": v} for v in missing]

    # The identity whose state a restore brings (the pod's own; rank 0's under ``shared``).
    restore_member = None if restore is None else restore.member or member
    for i, container in enumerate(spec.get("containers") or []):
        ours = _env(checkpoint_dir=checkpoint_dir, member=member, restore_member=restore_member)
        ops.append(
            {
                "op": "add" if container.get("env") is None else "replace",
                "path": f"/spec/containers/{i}/env",
                "value": _with_env(container, ours, warnings),
            }
        )
        mounts = container.get("volumeMounts")
        mounted = {m.get("name") for m in mounts or []}
        new_mounts: list[Obj] = []
        if keys.CHECKPOINT_VOLUME not in mounted:
            new_mounts.append({"name": keys.CHECKPOINT_VOLUME, "mountPath": storage.mount_path})
        if restore is not None and RESTORE_VOLUME not in mounted:
            new_mounts.append({"name": RESTORE_VOLUME, "mountPath": RESTORE_DIR, "readOnly": True})
        if mounts is None:
            if new_mounts:
                ops.append(
                    {"op": "add", "path": f"/spec/containers/{i}/volumeMounts", "value": new_mounts}
                )
        else:
            ops += [
                {"op": "add", "path": f"/spec/containers/{i}/volumeMounts/-", "value": m}
                for m in new_mounts
            ]

    init: Obj | None = None
    if restore is not None:
        # Read the checkpoint as the workload wrote it: its first workload container's identity.
        if chosen is None:
            chosen = workload.of_spec(spec, meta.get("annotations"))
        named = chosen.names[:1]
        first: Obj = next((c for c in spec.get("containers") or [] if c.get("name") in named), {})
        init = _init_container(
            image=image,
            policy=policy,
            restore=restore,
            checkpoint_dir=checkpoint_dir,
            security_context=first.get("securityContext"),
            member=member,
        )
    inits = spec.get("initContainers")
    # With a restore, any container of its name (the Job template's stand-in,
    # kontinue.restore.stand_in) gives way to it; without one, the stand-in is not needed.
    arranged = init_order.arrange(
        inits or [],
        init,
        drop=init_order.is_restore if init is not None else restore_program.is_stand_in,
    )
    for j in init_order.after_restore(arranged):
        arranged[j] = _read_only_view(
            arranged[j],
            mount_path=storage.mount_path,
            member=member,
            restore_member=restore_member,
            warnings=warnings,
        )
    if arranged != (inits or []):
        op = "add" if inits is None else "replace"
        ops.append({"op": op, "path": "/spec/initContainers", "value": arranged})
    return Plan(ops, warnings)
