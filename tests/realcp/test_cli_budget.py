"""``kubectl kontinue drain`` respects a PodDisruptionBudget on a real kube-apiserver v1.36.2.

The API emulator has no PodDisruptionBudgets (docs/cli.md); here the real apiserver decides.
The installed console script drains a node through the Eviction API with a kubeconfig, as a
user runs it. The pod is made Ready and its budget's status written as the disruption
controller would (that controller is not run in this tier): no disruption allowed. The real
apiserver answers the eviction 429 (kubernetes ``pkg/registry/core/pod/storage/eviction.go``,
``checkAndDecrement``) and the plugin waits and retries, as ``kubectl drain`` does, leaving the
pod alone; once the budget allows one disruption the retry goes through, and the apiserver
records the pod among the budget's ``disruptedPods`` — an eviction, never a plain DELETE.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realcp import controlplane, objects

pytestmark = pytest.mark.timeout(240)

SCRIPT = Path(sys.executable).with_name("kubectl-kontinue")


def _get(plane: controlplane.ControlPlane, *args: str) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(plane.kubectl("get", *args, "-o", "json").stdout)
    return got


def _create_pod(plane: controlplane.ControlPlane, body: dict[str, Any]) -> None:
    """Retried while the namespace's ``default`` ServiceAccount does not exist yet."""
    deadline = time.monotonic() + 60
    while True:
        done = plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump(body), check=False)
        if done.returncode == 0:
            return
        if "serviceaccount" not in done.stderr or time.monotonic() > deadline:
            raise AssertionError(done.stderr)
        time.sleep(0.5)


def _budget_status(plane: controlplane.ControlPlane, namespace: str, allowed: int) -> None:
    """What the disruption controller would write for minAvailable 1 and ``1 + allowed``
    healthy pods (as if ``allowed`` more replicas were up)."""
    pdb = _get(plane, "pdb", "guard", "-n", namespace)
    status = {
        "observedGeneration": pdb["metadata"]["generation"],
        "disruptionsAllowed": allowed,
        "currentHealthy": 1 + allowed,
        "desiredHealthy": 1,
        "expectedPods": 1 + allowed,
    }
    plane.kubectl(
        *("patch", "pdb", "guard", "-n", namespace, "--subresource=status", "--type=merge"),
        *("-p", json.dumps({"status": status})),
    )


def test_drain_waits_while_a_real_budget_forbids_the_eviction_then_evicts(
    control_plane: controlplane.ControlPlane, namespace: str
) -> None:
    plane = control_plane
    node = f"drain-{secrets.token_hex(3)}"
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump(body))
    proc: subprocess.Popen[str] | None = None
    try:
        pod = objects.pod(namespace, queue=None)
        pod["metadata"] = {"name": "guarded", "namespace": namespace, "labels": {"app": "guarded"}}
        pod["spec"]["nodeName"] = node
        _create_pod(plane, pod)
        ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        plane.kubectl(
            *("patch", "pod", "guarded", "-n", namespace, "--subresource=status"),
            *("--type=merge", "-p", json.dumps({"status": ready})),
        )
        plane.kubectl(
            *("create", "poddisruptionbudget", "guard", "-n", namespace),
            *("--selector=app=guarded", "--min-available=1"),
        )
        _budget_status(plane, namespace, allowed=0)

        env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig_file())}
        proc = subprocess.Popen(
            [str(SCRIPT), "drain", node, "--force", "--timeout", "150"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == f"node/{node} cordoned\n"
        waiting = proc.stdout.readline()
        assert waiting.startswith(f"  {namespace}/guarded: waiting: "), waiting
        assert "disruption budget" in waiting, waiting
        assert _get(plane, "node", node)["spec"]["unschedulable"] is True
        still = _get(plane, "pod", "guarded", "-n", namespace)
        assert "deletionTimestamp" not in still["metadata"]

        _budget_status(plane, namespace, allowed=1)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (out, err)
        assert out.splitlines() == [f"evicting {namespace}/guarded", f"node/{node} drain started"]
        evicted = _get(plane, "pod", "guarded", "-n", namespace)
        assert evicted["metadata"].get("deletionTimestamp"), evicted["metadata"]
        budget = _get(plane, "pdb", "guard", "-n", namespace)
        assert "guarded" in (budget["status"].get("disruptedPods") or {}), budget["status"]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        plane.kubectl(
            *("delete", "pod", "guarded", "-n", namespace, "--grace-period=0", "--force"),
            check=False,
        )
        plane.kubectl("delete", "node", node, check=False)
