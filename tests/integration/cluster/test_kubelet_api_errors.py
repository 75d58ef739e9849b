"""The emulated kubelet outlives API errors, as a real one does (emulator/kubelet/agent.py).

A real kubelet's status manager logs a failed read or write of a pod and retries it on its next
sync (kubernetes/kubernetes pkg/kubelet/status/status_manager.go ``syncPod``/``syncBatch``); the
pod runs on regardless. Measured on the real control-plane tier (a fresh-clone CI run of
tests/realcp/test_kueue_flow.py): the Node authorizer answered 403 "no relationship found between
node ... and this object" to the kubelet's first GET of two pods bound a moment earlier (its graph
had not seen the binding yet, plugin/pkg/auth/authorizer/node/graph_populator.go), and the
emulated kubelet dropped both pods: they stayed Pending for good. Here the API emulator answers
the same 403 to the node's first reads (its fault injection), and the pod still runs to the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator import cluster, gpus, nodes
from kontinue.kube import resources
from tests.integration.cluster import workloads


@pytest.mark.parametrize(("verb", "subresource"), [("get", ""), ("update", "status"), ("list", "")])
async def test_a_pod_runs_to_its_end_through_the_nodes_failed_api_calls(
    tmp_path: Path, verb: str, subresource: str
) -> None:
    spec = nodes.NodeSpec("gpu-a", gpu=gpus.H100)
    async with cluster.Cluster(nodes=[spec], workdir=tmp_path) as c:
        resource = "services" if verb == "list" else "pods"
        fault = c.api.faults.add(
            verb=verb,
            resource=resource,
            subresource=subresource,
            user=spec.user,
            status=403,
            count=3,
        )
        await c.client().create(
            resources.JOBS, workloads.job("train", workloads.trainer_container(steps=3))
        )
        done = await c.wait_for(
            resources.JOBS, "train", "default", cluster.job_condition("Complete"), timeout=60.0
        )
        assert done is not None
        assert done["status"]["succeeded"] == 1
        assert fault.fired == 3  # the node's calls were refused, retried, and then went through
