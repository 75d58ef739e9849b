"""Builders and checks shared by the webhook tests: recorded reviews, cluster objects, and the
two things a real apiserver does with our answer (apply the JSON Patch, validate the pod).

``apply_patch`` is RFC 6902 for the ops the webhook emits (add/replace/remove/test), strict the
way the apiserver's evanphx/json-patch is: a missing parent, an index out of range, ``replace``
of a missing member or a failing ``test`` raise, so a patch that works here would not be
rejected there for shape.

``pod_errors`` checks the parts of ``k8s.io/kubernetes pkg/apis/core/validation/validation.go``
a mutation can break: ``validateVolumes`` (unique names), ``validateContainers`` /
``validateInitContainers`` (names unique across init and main containers), ``validateEnv``
(C_IDENTIFIER-ish names; a name twice is legal but we forbid it: the kubelet keeps the last, so
ours would silently lose), ``ValidateVolumeMounts`` (mount names refer to volumes, mountPaths
unique per container), and ``terminationGracePeriodSeconds`` >= 0.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
from pathlib import Path
from typing import Any

from kontinue import keys
from kontinue.models import base, checkpoint, core, kueue, volcano
from kontinue.models import policy as policy_model
from webhook import review

Obj = dict[str, Any]
ADMISSION = Path(__file__).resolve().parents[2] / "fixtures" / "webhook" / "admission"


def recorded(stem: str) -> Obj:
    """A recorded AdmissionReview (tests/fixtures/webhook/admission/<stem>.json)."""
    matches = sorted(ADMISSION.glob(f"{stem}*.json"))
    assert len(matches) == 1, f"{stem}: {matches}"
    data: Obj = json.loads(matches[0].read_text())
    return data


def recorded_object(stem: str) -> Obj:
    obj: Obj = copy.deepcopy(recorded(stem)["request"]["object"])
    obj["metadata"].pop("managedFields", None)
    return obj


# --- JSON Patch ---------------------------------------------------------------------------


class PatchError(ValueError):
    pass


def _tokens(path: str) -> list[str]:
    if not path.startswith("/"):
        raise PatchError(f"bad pointer {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    parts = _tokens(path)
    target = doc
    for part in parts[:-1]:
        if isinstance(target, list):
            target = target[int(part)]
        elif isinstance(target, dict) and part in target:
            target = target[part]
        else:
            raise PatchError(f"{path}: missing {part!r}")
    return target, parts[-1]


def apply_patch(doc: Obj, ops: list[Obj] | tuple[Obj, ...]) -> Obj:
    doc = copy.deepcopy(doc)
    for op in ops:
        parent, last = _parent(doc, op["path"])
        kind = op["op"]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "add":
                if not 0 <= index <= len(parent):
                    raise PatchError(f"{op['path']}: index out of range")
                parent.insert(index, copy.deepcopy(op["value"]))
            elif kind in ("replace", "remove", "test"):
                if not 0 <= index < len(parent):
                    raise PatchError(f"{op['path']}: index out of range")
                if kind == "replace":
                    parent[index] = copy.deepcopy(op["value"])
                elif kind == "remove":
                    del parent[index]
                elif parent[index] != op["value"]:
                    raise PatchError(f"{op['path']}: test failed")
            else:
                raise PatchError(f"unsupported op {kind}")
        elif isinstance(parent, dict):
            if kind == "add":
                parent[last] = copy.deepcopy(op["value"])
            elif kind in ("replace", "remove", "test"):
                if last not in parent:
                    raise PatchError(f"{op['path']}: no such member")
                if kind == "replace":
                    parent[last] = copy.deepcopy(op["value"])
                elif kind == "remove":
                    del parent[last]
                elif parent[last] != op["value"]:
                    raise PatchError(f"{op['path']}: test failed")
            else:
                raise PatchError(f"unsupported op {kind}")
        else:
            raise PatchError(f"{op['path']}: parent is not a container")
    return doc


# --- the pod validation a mutation can break ------------------------------------------------

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def pod_errors(pod: Obj) -> list[str]:
    spec = pod.get("spec") or {}
    found: list[str] = []
    volumes = [v["name"] for v in spec.get("volumes") or []]
    if len(volumes) != len(set(volumes)):
        found.append(f"spec.volumes: duplicate names {volumes}")
    for v in spec.get("volumes") or []:
        sources = [k for k in v if k != "name"]
        if len(sources) != 1:
            found.append(f"spec.volumes[{v['name']}]: must have exactly one source, {sources}")
    inits = spec.get("initContainers") or []
    mains = spec.get("containers") or []
    names = [c["name"] for c in inits + mains]
    if len(names) != len(set(names)):
        found.append(f"containers: duplicate names {names}")
    for field, containers in (("initContainers", inits), ("containers", mains)):
        for c in containers:
            where = f"spec.{field}[{c['name']}]"
            if not _DNS_LABEL.match(c["name"]) or len(c["name"]) > 63:
                found.append(f"{where}: bad name")
            if not c.get("image"):
                found.append(f"{where}.image: required")
            env = [e["name"] for e in c.get("env") or []]
            if len(env) != len(set(env)):
                found.append(f"{where}.env: duplicate names {env}")
            for e in c.get("env") or []:
                if not _ENV_NAME.match(e["name"]):
                    found.append(f"{where}.env[{e['name']}]: bad name")
                if "value" in e and "valueFrom" in e:
                    found.append(f"{where}.env[{e['name']}]: value and valueFrom")
            paths = [m["mountPath"] for m in c.get("volumeMounts") or []]
            if len(paths) != len(set(paths)):
                found.append(f"{where}.volumeMounts: duplicate mountPath {paths}")
            for m in c.get("volumeMounts") or []:
                if m["name"] not in volumes:
                    found.append(f"{where}.volumeMounts[{m['name']}]: no such volume")
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        found.append(f"spec.terminationGracePeriodSeconds: {grace!r}")
    for key in (pod.get("metadata") or {}).get("annotations") or {}:
        if not isinstance(key, str):
            found.append(f"metadata.annotations: key {key!r}")
    return found


# --- cluster objects ----------------------------------------------------------------------


def cluster_queue(name: str, **labels: str) -> kueue.ClusterQueue:
    return base.parse(kueue.ClusterQueue, {"metadata": {"name": name, "labels": labels}})


def opted_in_cq(name: str = "cq-gpu", *, policy: str | None = None) -> kueue.ClusterQueue:
    labels = {keys.ENABLED_LABEL: "true"}
    if policy:
        labels[keys.POLICY_LABEL] = policy
    return base.parse(kueue.ClusterQueue, {"metadata": {"name": name, "labels": labels}})


def local_queue(namespace: str, name: str, cluster_queue: str) -> kueue.LocalQueue:
    return base.parse(
        kueue.LocalQueue,
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        },
    )


def volcano_queue(name: str, **labels: str) -> volcano.Queue:
    return base.parse(volcano.Queue, {"metadata": {"name": name, "labels": labels}})


def pod_group(namespace: str, name: str, queue: str) -> volcano.PodGroup:
    return base.parse(
        volcano.PodGroup,
        {"metadata": {"name": name, "namespace": namespace}, "spec": {"queue": queue}},
    )


def checkpoint_policy(name: str, spec: Obj | None = None) -> policy_model.CheckpointPolicy:
    return policy_model.load({"metadata": {"name": name}, "spec": spec or {}})


HOSTPATH_POLICY: Obj = {
    "storage": {"hostPath": {"path": "/var/lib/kontinue"}, "mountPath": "/ckpt"},
    "minGracePeriodSeconds": 300,
}


def make_checkpoint(
    name: str,
    *,
    lineage: checkpoint.Lineage,
    phase: str = "Succeeded",
    minutes_ago: int = 10,
    members: list[tuple[str, str, int]] | None = None,
    fingerprint: Obj | None = None,
    status_path: str | None = None,
) -> checkpoint.Checkpoint:
    when = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC) - datetime.timedelta(
        minutes=minutes_ago
    )
    members = members or [("old-pod", "11111111-2222-3333-4444-555555555555", 0)]
    status: Obj = {"phase": phase}
    if status_path:
        status["members"] = [{"podName": members[0][0], "state": "Saved", "path": status_path}]
    return checkpoint.load(
        {
            "metadata": {"name": name, "namespace": lineage.namespace},
            "spec": {
                "lineage": lineage.model_dump(by_alias=True),
                "trigger": {"source": "Kueue", "reason": "Preempted", "time": when.isoformat()},
                "members": [{"podName": p, "podUid": u, "index": i} for p, u, i in members],
                "fingerprint": fingerprint or {},
            },
            "status": status,
        }
    )


def gpu_node(name: str, *, product: str, driver: str = "550", ready: bool = True) -> core.Node:
    return base.parse(
        core.Node,
        {
            "metadata": {
                "name": name,
                "labels": {keys.GPU_PRODUCT_LABEL: product, keys.CUDA_DRIVER_MAJOR_LABEL: driver},
            },
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        },
    )


# --- reviews ------------------------------------------------------------------------------

USER = "system:serviceaccount:kube-system:job-controller"


def request_for(
    obj: Obj | None,
    *,
    group: str = "",
    version: str = "v1",
    kind: str = "Pod",
    resource: str = "pods",
    operation: str = "CREATE",
    old: Obj | None = None,
    namespace: str | None = "default",
    username: str = USER,
    uid: str = "0b9d6f5e-1111-2222-3333-444455556666",
) -> Obj:
    """An AdmissionReview body shaped like the recorded ones."""
    request: Obj = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    if namespace is not None:
        request["namespace"] = namespace
    return {"apiVersion": review.API_VERSION, "kind": review.KIND, "request": request}


def parsed(body: Obj) -> review.AdmissionRequest:
    return review.parse(json.dumps(body).encode()).request


def kueue_pod(stem: str = "03-", *, cluster_queue: str = "cq-gpu") -> Obj:
    """The recorded job-controller pod, as Kueue would have labelled it at admission."""
    pod = recorded_object(stem)
    pod["metadata"]["labels"][keys.KUEUE_CLUSTER_QUEUE_LABEL] = cluster_queue
    return pod


def lineage_of(pod: Obj, namespace: str = "default") -> checkpoint.Lineage:
    from kontinue import lineage

    model = base.parse(core.Pod, pod)
    model.metadata.namespace = model.metadata.namespace or namespace
    found = lineage.of_pod(model)
    assert found is not None
    return found
