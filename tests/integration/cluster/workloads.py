"""Job and pod bodies for the cluster tests: the reference trainer, small and fast."""

from __future__ import annotations

from typing import Any

from kontinue import keys

Object = dict[str, Any]
CHECKPOINTS = "/var/kontinue/checkpoints"


def trainer_container(
    *, steps: int = 20, rate: float = 50.0, save_seconds: float = 0.1, gpus: int = 1
) -> Object:
    """The reference workload as a container: checkpoints into the shared hostPath volume."""
    return {
        "name": "trainer",
        "image": "kontinue/reference-workload:dev",
        "command": ["python", "-m", "reference_workload.trainer"],
        "env": [
            {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": keys.ENV_CHECKPOINT_DIR, "value": f"{CHECKPOINTS}/$(POD_UID)"},
            {"name": "TRAINER_STEPS", "value": str(steps)},
            {"name": "TRAINER_RATE", "value": str(rate)},
            {"name": "TRAINER_SAVE_SECONDS", "value": str(save_seconds)},
            {"name": "TRAINER_PROGRESS_EVERY", "value": "1"},
        ],
        "resources": {"limits": {keys.GPU_RESOURCE: str(gpus)}},
        "volumeMounts": [{"name": "checkpoints", "mountPath": CHECKPOINTS}],
    }


def pod_spec(container: Object, *, grace: int = 5, priority_class: str | None = None) -> Object:
    spec: Object = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace,
        "containers": [container],
        "volumes": [{"name": "checkpoints", "hostPath": {"path": CHECKPOINTS}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def job(
    name: str,
    container: Object,
    *,
    grace: int = 5,
    suspend: bool = False,
    parallelism: int = 1,
    completions: int | None = 1,
    backoff_limit: int = 6,
    priority_class: str | None = None,
    replacement: str | None = None,
    ignore_disruption: bool = False,
    indexed: bool = False,
) -> Object:
    spec: Object = {
        "suspend": suspend,
        "parallelism": parallelism,
        "backoffLimit": backoff_limit,
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": pod_spec(container, grace=grace, priority_class=priority_class),
        },
    }
    if completions is not None:
        spec["completions"] = completions
    if replacement:
        spec["podReplacementPolicy"] = replacement
    if ignore_disruption:
        spec["podFailurePolicy"] = {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": keys.POD_CONDITION_DISRUPTION_TARGET}],
                }
            ]
        }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def priority_class(name: str, value: int) -> Object:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
