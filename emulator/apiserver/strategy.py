"""Per-kind create/update strategies: defaults, status isolation, generation.

Copies, for the fields our code and the emulated controllers read:
- pkg/apis/core/v1/defaults.go ``SetDefaults_Pod``/``SetDefaults_Container`` (restartPolicy,
  terminationGracePeriodSeconds 30, dnsPolicy, schedulerName, terminationMessagePath, ...);
- pkg/apis/batch/v1/defaults.go and pkg/registry/batch/job/strategy.go (parallelism,
  completions, backoffLimit, podReplacementPolicy, the generated controller-uid selector);
- the ``PrepareForCreate``/``PrepareForUpdate`` pairs of pod, job, namespace and custom resources:
  with a status subresource, create resets status, the main resource keeps the old status and the
  status subresource keeps everything but status (staging/.../apiextensions-apiserver/pkg/registry/
  customresource/strategy.go, ``ResetObjectMetaForStatus``);
- generation starts at 1 and grows when anything outside metadata and status changes.
"""

from __future__ import annotations

import datetime
from typing import Any

from emulator.apiserver import kinds
from kontinue import json_copy

Object = dict[str, Any]

_NOT_SPEC = ("metadata", "status", "apiVersion", "kind")


def _container_defaults(container: Object) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    image = str(container.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")


def _pod_spec_defaults(spec: Object) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            if isinstance(container, dict):
                _container_defaults(container)


def _job_defaults(job: Object) -> None:
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    spec.setdefault(
        "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    )
    template = spec.setdefault("template", {})
    _pod_spec_defaults(template.setdefault("spec", {}))


def defaults(obj: Object, kind: kinds.Kind) -> None:
    """Fill defaulted fields in place (the apiserver does this when it decodes a request)."""
    if kind.key == ("", "pods"):
        _pod_spec_defaults(obj.setdefault("spec", {}))
        obj.setdefault("status", {})
        # metav1.Time fields without omitempty encode as null (Go struct serialization)
        for condition in obj["status"].get("conditions") or []:
            if isinstance(condition, dict):
                condition.setdefault("lastProbeTime", None)
                condition.setdefault("lastTransitionTime", None)
    elif kind.key == ("batch", "jobs"):
        _job_defaults(obj)
    elif kind.key == ("", "services"):
        _service_defaults(obj.setdefault("spec", {}))


def _service_defaults(spec: Object) -> None:
    """``SetDefaults_Service`` (pkg/apis/core/v1/defaults.go): type, affinity, port protocol and
    targetPort."""
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))


def _cluster_ip(uid: str) -> str:
    """An address in the default service range 10.96.0.0/12, derived from the uid (upstream
    allocates at random from ``--service-cluster-ip-range``: pkg/registry/core/service/
    ipallocator). Only ever a string here: nothing routes it."""
    number = int(uid.replace("-", "")[:8], 16) if uid else 1
    return f"10.96.{(number >> 8) % 256}.{number % 254 + 1}"


def _qos(spec: Object) -> str:
    """pkg/apis/core/helper/qos/qos.go, for cpu and memory."""
    requests: list[Object] = []
    limits: list[Object] = []
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        resources = container.get("resources") or {}
        limits.append(resources.get("limits") or {})
        requests.append({**(resources.get("limits") or {}), **(resources.get("requests") or {})})
    compute = ("cpu", "memory")
    if not any(k in r for r in requests + limits for k in compute):
        return "BestEffort"
    guaranteed = all(
        all(k in lim and req.get(k) == lim[k] for k in compute)
        for req, lim in zip(requests, limits, strict=True)
    )
    return "Guaranteed" if guaranteed else "Burstable"


_NOT_READY = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
SYSTEM_PRIORITIES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}


def pod_admission(pod: Object, priority_class: Object | None) -> None:
    """The built-in admission plugins that change a new pod, in their order (plugin/pkg/admission):
    ServiceAccount (the ``default`` account; no token volume is added), Priority (value and
    preemptionPolicy from the PriorityClass, looked up by the caller) and DefaultTolerationSeconds
    (not-ready/unreachable NoExecute tolerations for 300 s)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    tolerations = spec.setdefault("tolerations", [])
    for key in _NOT_READY:
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    name = spec.get("priorityClassName")
    if name in SYSTEM_PRIORITIES:
        spec["priority"] = SYSTEM_PRIORITIES[name]
    elif priority_class is not None:
        spec["priority"] = int(priority_class.get("value", 0))
    else:
        spec.setdefault("priority", 0)
    policy = (priority_class or {}).get("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("preemptionPolicy", policy)


def prepare_for_create(obj: Object, kind: kinds.Kind) -> None:
    """Reset what a client may not set on create (runs after name generation, uid assigned)."""
    meta = obj["metadata"]
    if kind.key == ("", "pods"):
        obj["status"] = {"phase": "Pending", "qosClass": _qos(obj["spec"])}
    elif kind.key == ("", "namespaces"):
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    elif kind.key == ("batch", "jobs"):
        obj["status"] = {}
        spec = obj["spec"]
        if not spec.get("manualSelector"):
            uid = meta["uid"]
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
            labels.update(
                {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": meta["name"],
                    "controller-uid": uid,
                    "job-name": meta["name"],
                }
            )
    elif kind.key == ("", "services"):
        spec = obj.setdefault("spec", {})
        if spec.get("type", "ClusterIP") != "ExternalName" and not spec.get("clusterIP"):
            spec["clusterIP"] = _cluster_ip(meta["uid"])
        if spec.get("clusterIP"):
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
            # pkg/registry/core/service/storage/alloc.go: single-stack IPv4 on this cluster
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
        obj["status"] = {"loadBalancer": {}}
    elif kind.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        obj["status"] = _crd_status(obj)
    elif kind.status and kind.schema is not None:
        obj.pop("status", None)
    meta["generation"] = 1


def _crd_status(crd: Object) -> Object:
    """What apiextensions-apiserver's controllers write once a CRD is served (at once, here)."""
    condition = {"status": "True", "lastTransitionTime": now()}
    return {
        "conditions": [
            {
                **condition,
                "type": "NamesAccepted",
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                **condition,
                "type": "Established",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
        "acceptedNames": crd["spec"]["names"],
        "storedVersions": [kinds.storage_version(crd)],
    }


def now(offset_seconds: float = 0) -> str:
    """RFC 3339 at one-second resolution, as metav1.Time serializes."""
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=offset_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def prepare_for_update(new: Object, old: Object, kind: kinds.Kind, *, subresource: str) -> Object:
    """The object to store: status isolation between the resource and its status subresource."""
    if subresource == "status":
        result = json_copy.copied(old)
        if "status" in new:
            result["status"] = json_copy.copied(new["status"])
        else:
            result.pop("status", None)
        return result
    result = json_copy.copied(new)
    if kind.status:
        if "status" in old:
            result["status"] = json_copy.copied(old["status"])
        else:
            result.pop("status", None)
    return result


def spec_changed(new: Object, old: Object) -> bool:
    strip_new = {k: v for k, v in new.items() if k not in _NOT_SPEC}
    strip_old = {k: v for k, v in old.items() if k not in _NOT_SPEC}
    return strip_new != strip_old


def disruption_target(pod: Object) -> Object:
    """The pod with ``DisruptionTarget=True`` (reason EvictionByEvictionAPI) the eviction adds."""
    result = json_copy.copied(pod)
    conditions = [
        c
        for c in (result.setdefault("status", {}).get("conditions") or [])
        if c.get("type") != "DisruptionTarget"
    ]
    conditions.append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now(),
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        }
    )
    result["status"]["conditions"] = conditions
    return result


def bound(pod: Object, *, node: str, annotations: dict[str, str] | None) -> Object:
    """The pod after a Binding: nodeName, the binding's annotations, ``PodScheduled=True``."""
    result = json_copy.copied(pod)
    result["spec"]["nodeName"] = node
    if annotations:
        result["metadata"].setdefault("annotations", {}).update(annotations)
    status = result.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append(
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now(),
        }
    )
    status["conditions"] = conditions
    return result
