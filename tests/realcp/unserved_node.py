"""A node no kubelet serves, and the statuses its kubelet would have written.

The real-control-plane tier runs no kubelet. A pod bound to a Node object (``spec.nodeName`` in
the Job's template, as the scheduler would bind it) is deleted gracefully by the real apiserver
and then stays ``Terminating``, because no kubelet confirms the deletion: a lost kubelet. The
tests write the pod statuses a kubelet writes (tests/fixtures/kubelet/RECORDING.md has their
shapes) when they need them, and late when they play one that comes back.
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Mapping
from typing import Any

from kontinue import keys
from kontinue.kube import api, errors, resources
from kontinue.models import base
from tests.realcp import objects

Obj = dict[str, Any]


def now() -> str:
    """An API timestamp (second resolution, as the kubelet's)."""
    return base.format_time(datetime.datetime.now(datetime.UTC).replace(microsecond=0))


async def node(admin: api.Api) -> str:
    """A Node object with no kubelet behind it; the caller deletes it."""
    name = f"unserved-{secrets.token_hex(3)}"
    await admin.create(
        resources.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    )
    return name


async def short_grace_queue(admin: api.Api, namespace: str) -> str:
    """An opted-in queue whose CheckpointPolicy lets a Job keep a short grace period (the
    default policy raises it to 120 s)."""
    queue = await objects.queues(admin, namespace, opted_in=True)
    name = f"short-{secrets.token_hex(3)}"
    await admin.create(
        resources.CHECKPOINT_POLICIES,
        {
            "apiVersion": keys.API_VERSION,
            "kind": "CheckpointPolicy",
            "metadata": {"name": name},
            "spec": {"minGracePeriodSeconds": 1},
        },
    )
    await admin.merge_patch(
        objects.CLUSTER_QUEUES, queue, {"metadata": {"labels": {keys.POLICY_LABEL: name}}}
    )
    return queue


def bound_job(namespace: str, queue: str, node_name: str, *, grace: int) -> Obj:
    """A one-pod Job of ``queue`` whose pod is bound to ``node_name``."""
    job = objects.job(namespace, queue)
    job["spec"].update(parallelism=1, completions=1)
    job["spec"].pop("completionMode")
    spec = job["spec"]["template"]["spec"]
    spec["nodeName"] = node_name
    spec["terminationGracePeriodSeconds"] = grace
    return job


async def write_status(admin: api.Api, pod: Obj, states: Mapping[str, Obj], phase: str) -> None:
    """Write the pod's phase and each named container's state, as the kubelet does: read,
    then replace, read again on a conflict (the bridge may patch the pod in between, e.g.
    releasing its finalizer), as the kubelet's status manager retries its own writes."""
    for _ in range(9):
        try:
            await _write_status(admin, pod, states, phase)
            return
        except errors.Conflict:
            continue
    await _write_status(admin, pod, states, phase)


async def _write_status(admin: api.Api, pod: Obj, states: Mapping[str, Obj], phase: str) -> None:
    current = await admin.get(
        resources.PODS, pod["metadata"]["name"], namespace=pod["metadata"]["namespace"]
    )
    status = current.setdefault("status", {})
    status["phase"] = phase
    status["containerStatuses"] = [
        {
            "name": name,
            "ready": "running" in state,
            "restartCount": 0,
            "image": f"registry.example/{name}:1",
            "imageID": "",
            "started": "running" in state,
            "state": state,
        }
        for name, state in states.items()
    ]
    await admin.replace(resources.PODS, current, subresource="status")
