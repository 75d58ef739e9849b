"""Our views of Kueue and Volcano objects against the real upstream CRDs and example objects.

Two promises are checked: every field a model names exists, under that exact name, in the
upstream CRD schema (so an upstream rename fails here, not in a cluster); and an upstream object
survives parse -> dump unchanged (so nothing we write back loses a field we do not model).
"""

from __future__ import annotations

import types
import typing
from typing import Any

import jsonschema
import pydantic
import pytest

from kontinue.models import base, kueue, volcano
from tests import fixtures

KUEUE = fixtures.UPSTREAM / "kueue" / "crds"
VOLCANO = fixtures.UPSTREAM / "volcano" / "crds"

CASES: list[tuple[type[base.KubeObject], Any, str]] = [
    (kueue.Workload, KUEUE / "kueue.x-k8s.io_workloads.yaml", "v1beta2"),
    (kueue.ClusterQueue, KUEUE / "kueue.x-k8s.io_clusterqueues.yaml", "v1beta2"),
    (kueue.LocalQueue, KUEUE / "kueue.x-k8s.io_localqueues.yaml", "v1beta2"),
    (kueue.AdmissionCheck, KUEUE / "kueue.x-k8s.io_admissionchecks.yaml", "v1beta2"),
    (kueue.ResourceFlavor, KUEUE / "kueue.x-k8s.io_resourceflavors.yaml", "v1beta2"),
    (volcano.Queue, VOLCANO / "scheduling.volcano.sh_queues.yaml", "v1beta1"),
    (volcano.PodGroup, VOLCANO / "scheduling.volcano.sh_podgroups.yaml", "v1beta1"),
    (volcano.VolcanoJob, VOLCANO / "batch.volcano.sh_jobs.yaml", "v1alpha1"),
]


def _model_of(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The pydantic model inside ``X | None`` or ``list[X]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) in (
        typing.Union,
        list,
    ):
        for arg in typing.get_args(annotation):
            if found := _model_of(arg):
                return found
    return None


def _missing_fields(model: type[pydantic.BaseModel], schema: dict[str, Any], at: str) -> list[str]:
    if schema.get("type") == "array":
        schema = schema.get("items", {})
    properties = schema.get("properties", {})
    missing = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        if name == "metadata":
            continue  # ObjectMeta is Kubernetes', not in the CRD schema
        if alias not in properties:
            missing.append(f"{at}.{alias}".lstrip("."))
            continue
        if (sub := _model_of(field.annotation)) is not None:
            missing += _missing_fields(sub, properties[alias], f"{at}.{alias}")
    return missing


@pytest.mark.parametrize(
    ("model", "crd", "version"), CASES, ids=lambda c: getattr(c, "__name__", "")
)
def test_every_field_we_read_exists_in_the_upstream_crd(
    model: type[base.KubeObject], crd: Any, version: str
) -> None:
    schema = fixtures.crd_schema(crd, version)
    assert _missing_fields(model, schema, "") == []


def test_a_renamed_upstream_field_is_detected() -> None:
    schema = fixtures.crd_schema(KUEUE / "kueue.x-k8s.io_localqueues.yaml", "v1beta2")
    spec = schema["properties"]["spec"]["properties"]
    spec["clusterQueueName"] = spec.pop("clusterQueue")
    assert _missing_fields(kueue.LocalQueue, schema, "") == ["spec.clusterQueue"]


EXAMPLE_KINDS: list[tuple[str, type[base.KubeObject]]] = [
    ("ClusterQueue", kueue.ClusterQueue),
    ("LocalQueue", kueue.LocalQueue),
    ("AdmissionCheck", kueue.AdmissionCheck),
    ("ResourceFlavor", kueue.ResourceFlavor),
    ("Queue", volcano.Queue),
    ("PodGroup", volcano.PodGroup),
]


@pytest.mark.parametrize(("kind", "model"), EXAMPLE_KINDS, ids=[k for k, _ in EXAMPLE_KINDS])
def test_upstream_examples_parse_and_round_trip_unchanged(
    kind: str, model: type[base.KubeObject]
) -> None:
    examples = fixtures.upstream_examples(kind)
    assert examples, f"no upstream example of {kind}"
    for raw in examples:
        parsed = model.model_validate(raw)
        assert parsed.name == raw["metadata"]["name"]
        assert base.to_dict(parsed) == raw


def test_volcano_job_example_round_trips() -> None:
    raw = fixtures.load_one(
        fixtures.UPSTREAM / "volcano" / "examples" / "vcjob-gpu-ckpt-train.yaml"
    )
    job = volcano.VolcanoJob.model_validate(raw)
    assert job.spec.min_available == 3
    assert base.to_dict(job) == raw


def test_example_cluster_queue_fields_are_read() -> None:
    path = fixtures.UPSTREAM / "kueue" / "examples" / "single-clusterqueue-setup.yaml"
    (raw,) = [doc for doc in fixtures.load_all(path) if doc["kind"] == "ClusterQueue"]
    queue = kueue.ClusterQueue.model_validate(raw)
    assert queue.spec.resource_groups
    assert queue.spec.resource_groups[0]["coveredResources"] == ["cpu", "memory"]


def test_volcano_optin_queue_carries_the_kontinue_label() -> None:
    (raw,) = fixtures.upstream_examples("Queue")
    queue = volcano.Queue.model_validate(raw)
    assert queue.metadata.label("kontinue.dev/enabled") == "true"
    assert queue.spec.reclaimable is True


def test_evicted_workload_fixture_is_valid_against_the_crd_and_reads_the_eviction() -> None:
    raw = fixtures.load_one(fixtures.FIXTURES / "objects" / "workload-evicted.yaml")
    schema = fixtures.crd_schema(KUEUE / "kueue.x-k8s.io_workloads.yaml", "v1beta2")
    jsonschema.validate(raw, schema)
    workload = kueue.Workload.model_validate(raw)
    evicted = base.find_condition(workload.conditions, "Evicted")
    assert evicted is not None
    assert evicted.reason == "Preempted"
    assert base.is_true(workload.conditions, "Preempted")
    assert workload.status is not None
    assert workload.status.admission is not None
    assert workload.status.admission.cluster_queue == "scavenger-cq"
    controller = workload.metadata.controller_ref()
    assert controller is not None
    assert (controller.kind, controller.name) == ("Job", "scavenger-0")
    assert base.to_dict(workload) == raw


def test_volcano_victim_pod_from_the_recorded_review_reads_its_conditions() -> None:
    import json

    from kontinue.models import core

    path = (
        fixtures.UPSTREAM
        / "volcano"
        / "examples"
        / "admissionreview-delete-victim-pod-by-vc-scheduler.json"
    )
    review = json.loads(path.read_text())
    raw = review["request"]["oldObject"]
    pod = core.Pod.model_validate(raw)
    assert pod.status is not None
    disruption = base.find_condition(pod.status.conditions, "DisruptionTarget")
    assert disruption is not None
    assert disruption.reason == "PreemptionByScheduler"
    assert base.to_dict(pod) == raw
