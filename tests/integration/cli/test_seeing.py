"""``status``, ``list``, ``describe``, ``enable``/``disable`` through the real console script.

One cluster for the module (real webhook, bridge, Kueue, kubelets running the reference
trainer, HTTPS): a Job is started, its pod evicted through the Eviction API (what ``kubectl
drain`` sends), checkpointed by the bridge and restored by the webhook; every command is then
run as a subprocess against it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import yaml

from emulator.demo import scenario
from emulator.kueue import controller as kueue_controller
from kontinue import keys
from kontinue.kube import resources
from tests.integration.cli import harness

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

NS = harness.NS
VOLCANO_CRDS = Path(__file__).resolve().parents[2] / "fixtures/upstream/volcano/crds"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def kube(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[harness.Kube]:
    async with harness.kube(tmp_path_factory.mktemp("cli-seeing")) as k:
        await k.job("train")
        (first,) = await k.running_pods("train")
        await k.training(first)
        await k.system.cluster.api.client("admin").evict(
            resources.PODS, first["metadata"]["name"], namespace=NS
        )

        async def restored() -> bool:
            pods = await k.pods("train")
            return any(
                (p["metadata"].get("annotations") or {}).get(keys.RESTORE_FROM_ANNOTATION)
                and (p.get("status") or {}).get("phase") == "Running"
                for p in pods
            )

        await harness.eventually(restored, within=60, what="train restored after the eviction")
        yield k


async def test_list_shows_the_lineage_with_its_checkpoint_and_restore(
    kube: harness.Kube,
) -> None:
    result = await kube.kk("list")
    assert result.code == 0, result
    header, *rows = result.out.splitlines()
    assert header.split()[:2] == ["OWNER", "QUEUE"]
    (row,) = [r for r in rows if r.startswith("job/train ")]
    cells = row.split()
    assert cells[1] == scenario.CLUSTER_QUEUE
    assert cells[2] == "1/0"  # one Succeeded set, none Failed
    checkpoints = await kube.admin.list(resources.CHECKPOINTS, namespace=NS)
    (cp,) = checkpoints["items"]
    assert cp["metadata"]["name"] in row  # the last restore names the set


async def test_list_json_yaml_and_wide_carry_the_same_lineage(kube: harness.Kube) -> None:
    as_json = await kube.kk("list", "job/train", "-o", "json")
    as_yaml = await kube.kk("list", "job/train", "-o", "yaml")
    wide = await kube.kk("list", "-o", "wide")
    assert as_json.code == as_yaml.code == wide.code == 0, (as_json, as_yaml, wide)
    (data,) = json.loads(as_json.out)
    assert yaml.safe_load(as_yaml.out)[0]["lineage"] == data["lineage"] == f"{NS}/Job/train"
    job = await kube.admin.get(resources.JOBS, "train", namespace=NS)
    assert data["ownerUID"] == job["metadata"]["uid"]
    assert data["queue"] == {
        "system": "Kueue",
        "name": scenario.CLUSTER_QUEUE,
        "optedIn": True,
        "policy": scenario.POLICY,
    }
    assert data["checkpoints"]["succeeded"] == 1
    (restore,) = data["restores"]
    assert restore["checkpoint"] == data["newestGood"]["name"]
    (pod,) = data["pods"]
    assert pod["node"] in wide.out
    assert job["metadata"]["uid"] in wide.out
    assert "OWNER UID" in wide.out.splitlines()[0]


async def test_list_all_namespaces_adds_the_namespace_column(kube: harness.Kube) -> None:
    result = await kube.kk("list", "-A")
    assert result.code == 0, result
    header, *rows = result.out.splitlines()
    assert header.split()[0] == "NAMESPACE"
    assert any(r.split()[:2] == [NS, "job/train"] for r in rows)


async def test_list_in_an_empty_namespace_and_refusals(kube: harness.Kube) -> None:
    await kube.admin.create(resources.NAMESPACES, {"metadata": {"name": "quiet"}})
    empty = await kube.kk("list", "-n", "quiet")
    assert empty.code == 0, empty
    assert empty.out.strip() == "No lineages found in namespace quiet."
    missing = await kube.kk("list", "job/nope")
    assert missing.code == 1
    assert "no lineage of job/nope in namespace default" in missing.err
    both = await kube.kk("list", "-A", "-n", "quiet")
    assert both.code == 2
    assert "-A and -n cannot be used together" in both.err


async def test_describe_tells_eviction_save_and_restore_in_order(kube: harness.Kube) -> None:
    result = await kube.kk("describe", "job/train")
    assert result.code == 0, result
    text = result.out
    assert f"Lineage:     {NS}/Job/train" in text
    assert f"Policy:      {scenario.POLICY}" in text
    whats = [line.split()[1] for line in text.split("Timeline:")[1].splitlines()[2:]]
    # the cold-started first pod was evicted and is gone; its eviction and save remain
    assert whats.index("Evicted") < whats.index("Saved") < whats.index("Restored")
    assert "ColdStart" not in whats
    assert "EvictionAPI EvictionByEvictionAPI" in text
    data = json.loads((await kube.kk("describe", "job/train", "-o", "json")).out)
    saved = next(e for e in data["timeline"] if e["what"] == "Saved")
    assert saved["phase"] == "Succeeded"
    assert saved["membersSaved"] == 1
    assert saved["bytes"]
    assert saved["saveSeconds"] is not None
    restored = next(e for e in data["timeline"] if e["what"] == "Restored")
    assert restored["checkpoint"] == saved["checkpoint"]
    assert restored["initSeconds"] is not None


async def test_describe_shows_a_cold_start_with_its_reason(kube: harness.Kube) -> None:
    await kube.job("cold")
    (pod,) = await kube.running_pods("cold")
    result = await kube.kk("describe", "job/cold", "-o", "json")
    assert result.code == 0, result
    (cold,) = [e for e in json.loads(result.out)["timeline"] if e["what"] == "ColdStart"]
    reason = pod["metadata"]["annotations"][keys.COLD_START_REASON_ANNOTATION]
    assert (cold["pod"], cold["node"], cold["reason"]) == (
        pod["metadata"]["name"],
        pod["spec"]["nodeName"],
        reason,
    )
    text = (await kube.kk("describe", "job/cold")).out
    assert f"pod {pod['metadata']['name']} on {pod['spec']['nodeName']}: {reason}" in text
    assert (await kube.kk("list", "job/cold")).out.splitlines()[1].split()[-1] == "1"


async def test_describe_refuses_an_unknown_workload(kube: harness.Kube) -> None:
    result = await kube.kk("describe", "job/ghost")
    assert result.code == 1
    assert result.err.startswith("refused: no lineage of job/ghost in namespace default")


async def test_status_all_green_then_a_pvc_problem_with_its_fix(kube: harness.Kube) -> None:
    healthy = await kube.kk("status")
    assert healthy.code == 0, healthy
    lines = healthy.out.splitlines()
    assert any(line.startswith("ok   webhook: answering") for line in lines), healthy
    assert any(line.startswith("ok   caBundle: MutatingWebhookConfiguration") for line in lines)
    assert any(line.startswith("ok   bridge: kontinue-bridge-0 leads") for line in lines)
    assert any(
        f"clusterqueue/{scenario.CLUSTER_QUEUE}: policy demo; fed by default" in line
        for line in lines
    )

    # a second opted-in queue whose policy wants a PVC, fed by a namespace whose PVC is RWO
    admin = kube.admin
    await admin.create(resources.NAMESPACES, {"metadata": {"name": "team-b"}})
    await admin.create(
        resources.CHECKPOINT_POLICIES,
        {
            "apiVersion": keys.API_VERSION,
            "kind": "CheckpointPolicy",
            "metadata": {"name": "nfs"},
            "spec": {"storage": {"pvc": {"claimName": "ckpt"}}},
        },
    )
    cq = await admin.get(resources.CLUSTER_QUEUES, scenario.CLUSTER_QUEUE)
    cq = {
        "apiVersion": cq["apiVersion"],
        "kind": cq["kind"],
        "metadata": {"name": "b-cq"},
        "spec": cq["spec"],
    }
    await admin.create(resources.CLUSTER_QUEUES, cq)
    await admin.create(
        resources.LOCAL_QUEUES,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "team-b"},
            "spec": {"clusterQueue": "b-cq"},
        },
    )
    await admin.create(
        resources.PVCS,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "ckpt", "namespace": "team-b"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    enabled = await kube.kk("enable", "clusterqueue", "b-cq", "--policy", "nfs")
    assert enabled.code == 0, enabled
    assert enabled.out.strip() == "clusterqueue/b-cq enabled (policy nfs)"

    broken = await kube.kk("status")
    assert broken.code == 1, broken
    (pvc_line,) = [line for line in broken.out.splitlines() if "ns/team-b" in line]
    assert pvc_line.startswith(
        "FAIL clusterqueue/b-cq ns/team-b: PersistentVolumeClaim ckpt is "
        "ReadWriteOnce, not ReadWriteMany"
    )
    assert "-- fix: recreate ckpt in team-b with accessModes [ReadWriteMany]" in pvc_line
    as_json = json.loads((await kube.kk("status", "-o", "json")).out)
    assert [c["subject"] for c in as_json if not c["ok"]] == ["clusterqueue/b-cq ns/team-b"]

    disabled = await kube.kk("disable", "clusterqueue", "b-cq")
    assert disabled.code == 0, disabled
    assert (await kube.kk("status")).code == 0
    cq_after = await admin.get(resources.CLUSTER_QUEUES, "b-cq")
    assert keys.ENABLED_LABEL not in cq_after["metadata"]["labels"]
    assert cq_after["metadata"]["labels"][keys.POLICY_LABEL] == "nfs"


async def test_enable_is_refused_with_the_webhooks_reason_for_a_missing_policy(
    kube: harness.Kube,
) -> None:
    result = await kube.kk("enable", "clusterqueue", scenario.CLUSTER_QUEUE, "--policy", "nope")
    assert result.code == 1, result
    assert result.err.startswith(
        f"refused: clusterqueue {scenario.CLUSTER_QUEUE}: admission webhook"
    )
    assert "nope" in result.err
    cq = await kube.admin.get(resources.CLUSTER_QUEUES, scenario.CLUSTER_QUEUE)
    assert cq["metadata"]["labels"][keys.POLICY_LABEL] == scenario.POLICY
    missing = await kube.kk("enable", "queue", "nowhere")
    assert missing.code == 1
    assert missing.err.startswith("refused: queue nowhere not found")


async def test_enable_and_disable_a_volcano_queue(kube: harness.Kube) -> None:
    # Volcano installed beside Kueue: its Queue CRD served too
    kueue_controller.install_crds(kube.system.cluster.api, VOLCANO_CRDS)
    await kube.admin.create(
        resources.VOLCANO_QUEUES,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"weight": 1},
        },
    )
    refused = await kube.kk("enable", "queue", "research", "--policy", "nope")
    assert refused.code == 1, refused
    assert refused.err.startswith("refused: queue research: admission webhook"), refused
    assert "nope" in refused.err
    enabled = await kube.kk("enable", "queue", "research", "--policy", scenario.POLICY)
    assert enabled.code == 0, enabled
    assert enabled.out.strip() == f"queue/research enabled (policy {scenario.POLICY})"
    labels = (await kube.admin.get(resources.VOLCANO_QUEUES, "research"))["metadata"]["labels"]
    assert labels == {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: scenario.POLICY}
    disabled = await kube.kk("disable", "queue", "research")
    assert disabled.code == 0, disabled
    labels = (await kube.admin.get(resources.VOLCANO_QUEUES, "research"))["metadata"]["labels"]
    assert keys.ENABLED_LABEL not in labels


@pytest.mark.parametrize(
    "command", ["status", "list", "describe", "enable", "disable", "move", "drain", "defrag"]
)
async def test_help_of_every_command_through_the_console_script(
    kube: harness.Kube, command: str
) -> None:
    result = await kube.kk(command, "--help")
    assert result.code == 0, result
    assert result.out.startswith(f"usage: kubectl kontinue {command}")
    assert "Examples:" in result.out or "Example:" in result.out, result.out
    assert "--kubeconfig" in result.out


async def test_a_broken_kubeconfig_is_one_clear_line(kube: harness.Kube, tmp_path: Path) -> None:
    broken = harness.Kube(kube.system, tmp_path / "absent")
    result = await broken.kk("list")
    assert result.code == 1
    assert result.err == (
        f"error: no kubeconfig at {tmp_path / 'absent'}: pass --kubeconfig or set KUBECONFIG\n"
    )
    (tmp_path / "garbled").write_text("clusters: [\n")
    garbled = harness.Kube(kube.system, tmp_path / "garbled")
    result = await garbled.kk("status")
    assert result.code == 1
    assert result.err.startswith(f"error: cannot use kubeconfig {tmp_path / 'garbled'}: ")
    assert "Traceback" not in result.err
    assert len(result.err.splitlines()) == 1


async def test_the_contexts_namespace_is_the_default_and_context_picks_one(
    kube: harness.Kube, tmp_path: Path
) -> None:
    config = yaml.safe_load(kube.kubeconfig.read_text())
    (context,) = config["contexts"]
    config["contexts"] = [
        context,
        {"name": "quiet", "context": {**context["context"], "namespace": "quiet"}},
    ]
    config["current-context"] = "quiet"
    path = tmp_path / "two-contexts"
    path.write_text(yaml.safe_dump(config))
    namespaces = (await kube.admin.list(resources.NAMESPACES))["items"]
    if not any(n["metadata"]["name"] == "quiet" for n in namespaces):
        await kube.admin.create(resources.NAMESPACES, {"metadata": {"name": "quiet"}})
    two = harness.Kube(kube.system, path)
    in_quiet = await two.kk("list")
    assert in_quiet.out.strip() == "No lineages found in namespace quiet.", in_quiet
    chosen = await two.kk("list", "--context", context["name"])
    assert any(r.startswith("job/train ") for r in chosen.out.splitlines()[1:]), chosen
    flag = await two.kk("list", "-n", NS)
    assert any(r.startswith("job/train ") for r in flag.out.splitlines()[1:]), flag
    unknown = await two.kk("list", "--context", "nope")
    assert unknown.code == 1
    assert unknown.err.startswith("error: cannot use kubeconfig")
