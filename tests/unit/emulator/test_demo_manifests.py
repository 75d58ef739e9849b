"""The kind demo's objects (``python -m emulator.demo.manifests``) are what a cluster accepts."""

from __future__ import annotations

import subprocess
import sys

import jsonschema
import yaml

from emulator.demo import manifests, scenario
from kontinue import keys
from kontinue.models import policy
from tests import fixtures

KUEUE = fixtures.UPSTREAM / "kueue" / "crds"
SCHEMAS = {
    "ClusterQueue": KUEUE / "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": KUEUE / "kueue.x-k8s.io_localqueues.yaml",
    "ResourceFlavor": KUEUE / "kueue.x-k8s.io_resourceflavors.yaml",
    "CheckpointPolicy": fixtures.MANIFESTS / "crds" / "kontinue.dev_checkpointpolicies.yaml",
}


def test_every_custom_object_validates_against_its_crd() -> None:
    objects = manifests.scavenger_setup(scenario.Options())
    kinds = [o["kind"] for o in objects]
    assert kinds.count("Job") == 8
    for obj in objects:
        if obj["kind"] in SCHEMAS:
            version = obj["apiVersion"].split("/")[1]
            jsonschema.validate(obj, fixtures.crd_schema(SCHEMAS[obj["kind"]], version))
    (cq,) = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert cq["metadata"]["labels"][keys.ENABLED_LABEL] == "true"
    (raw,) = [o for o in objects if o["kind"] == "CheckpointPolicy"]
    loaded = policy.load(raw)
    assert loaded.spec.storage.host_path is not None
    assert loaded.spec.storage.host_path.path == manifests.KIND_CHECKPOINT_PATH


def test_the_baseline_has_no_policy_and_no_opt_in() -> None:
    objects = manifests.scavenger_setup(scenario.Options(), opted_in=False)
    assert "CheckpointPolicy" not in [o["kind"] for o in objects]
    (cq,) = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert keys.ENABLED_LABEL not in cq["metadata"].get("labels", {})


def test_cli_prints_a_priority_job_that_opts_out() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "emulator.demo.manifests", "--priority", "urgent", "--gpus", "2"],
        check=True,
        capture_output=True,
        text=True,
    )
    (job,) = list(yaml.safe_load_all(run.stdout))
    assert job["metadata"]["name"] == "urgent"
    template = job["spec"]["template"]
    assert template["metadata"]["annotations"][keys.CHECKPOINT_OPT_OUT_ANNOTATION] == "false"
    limits = template["spec"]["containers"][0]["resources"]["limits"]
    assert limits[keys.GPU_RESOURCE] == "2"
