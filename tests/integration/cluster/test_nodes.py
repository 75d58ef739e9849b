"""Emulated GPU nodes: what the API shows, placement by GPU product, and storage shared by nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator import cluster, gpus, nodes
from kontinue import keys
from kontinue.kube import api as kube_api
from kontinue.kube import resources
from tests.integration.cluster import recording, workloads

MIXED = [
    nodes.NodeSpec("h100-a", gpu=gpus.H100, cpu="16", memory="64Gi"),
    nodes.NodeSpec("a100-b", gpu=gpus.A100),
]


async def test_nodes_advertise_gpus_and_gfd_labels_and_are_ready(tmp_path: Path) -> None:
    async with cluster.Cluster(nodes=MIXED, workdir=tmp_path, components=()) as c:
        h100 = await c.client().get(resources.NODES, "h100-a")
        a100 = await c.client().get(resources.NODES, "a100-b")
    assert h100["status"]["capacity"] == {
        "cpu": "16",
        "memory": "64Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": "4",
    }
    assert h100["status"]["allocatable"] == h100["status"]["capacity"]
    (ready,) = h100["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "KubeletReady")
    assert h100["metadata"]["labels"][keys.GPU_PRODUCT_LABEL] == "NVIDIA-H100-80GB-HBM3"
    assert a100["metadata"]["labels"][keys.GPU_PRODUCT_LABEL] == "NVIDIA-A100-SXM4-80GB"
    assert a100["metadata"]["labels"][keys.CUDA_DRIVER_MAJOR_LABEL] == "550"
    assert a100["metadata"]["labels"]["kubernetes.io/hostname"] == "a100-b"
    assert {"type": "InternalIP", "address": "10.0.0.3"} in a100["status"]["addresses"]


def test_bad_node_specs_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"NodeSpec.cpu of node 'n': quantity 'lots'"):
        nodes.NodeSpec("n", cpu="lots")
    with pytest.raises(ValueError, match="NodeSpec.name"):
        nodes.NodeSpec("")


async def test_checkpoint_saved_on_one_node_restores_on_the_other(tmp_path: Path) -> None:
    """A Job pinned to the H100 node is suspended and saves; a pod pinned to the A100 node
    restores from that directory: both nodes see the one shared checkpoint volume."""
    async with cluster.Cluster(nodes=MIXED, workdir=tmp_path) as c:
        admin = c.client()
        long = workloads.trainer_container(steps=100000, rate=50, save_seconds=0.1)
        body = workloads.job("train", long)
        body["spec"]["template"]["spec"]["nodeSelector"] = {
            keys.GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"
        }
        await admin.create(resources.JOBS, body)
        first = await recording.running_pod(c, "train", progress=5)
        assert first["spec"]["nodeName"] == "h100-a"
        await admin.patch(
            resources.JOBS,
            "train",
            {"spec": {"suspend": True}},
            content_type=kube_api.MERGE_PATCH,
            namespace="default",
        )
        await c.wait_for(resources.PODS, first["metadata"]["name"], "default", cluster.gone)
        saved = f"{workloads.CHECKPOINTS}/{first['metadata']['uid']}"

        restore = workloads.trainer_container(steps=3)
        restore["env"].append({"name": keys.ENV_RESTORE_FROM, "value": saved})
        spec = workloads.pod_spec(restore)
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": keys.GPU_PRODUCT_LABEL,
                                    "operator": "In",
                                    "values": ["NVIDIA-A100-SXM4-80GB"],
                                }
                            ]
                        }
                    ]
                }
            }
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "restored", "namespace": "default"},
            "spec": spec,
        }
        await admin.create(resources.PODS, pod)
        done = await c.wait_for(
            resources.PODS, "restored", "default", cluster.pod_phase("Succeeded", "Failed")
        )
        assert done is not None
        assert done["spec"]["nodeName"] == "a100-b"
        assert done["status"]["phase"] == "Succeeded"
        container = c.container(done, "trainer")
        assert container is not None
        log = container.spec.log_path.read_text()
        assert "RESTORED step=" in log
        assert f"from={tmp_path / 'shared/hostpath'}{saved}" in log
