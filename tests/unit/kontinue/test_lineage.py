"""Lineage of a pod, its annotation form, and the checkpoint directory layout."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kontinue import keys, lineage
from kontinue.models import checkpoint, core, errors, policy
from tests import fixtures

BRIDGE = fixtures.FIXTURES / "bridge"


def _recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((BRIDGE / f"{name}.json").read_text())
    return data


def _pod(
    *,
    namespace: str | None = "ns",
    owners: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
) -> core.Pod:
    return core.Pod.model_validate(
        {
            "metadata": {
                "generateName": "p-",
                "namespace": namespace,
                "ownerReferences": owners,
                "labels": labels,
            }
        }
    )


def _ref(api_version: str, kind: str, *, controller: bool | None = True) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": "train",
        "uid": "1234abcd-0000-0000-0000-000000000000",
        "controller": controller,
    }


def test_recorded_job_controller_pod_has_its_job_as_lineage() -> None:
    """The pod a real job controller creates (generateName, no name/uid) names its Job."""
    pod = core.Pod.model_validate(_recorded("pod-create-by-job-controller"))
    assert pod.metadata.name is None
    assert pod.metadata.uid is None

    found = lineage.of_pod(pod)

    assert found == checkpoint.Lineage(
        namespace="default",
        owner_kind="Job",
        owner_name="train-a",
        owner_uid=pod.metadata.owner_references[0].uid,  # type: ignore[index]
    )


@pytest.mark.parametrize(
    ("owners", "labels", "kind"),
    [
        ([_ref("batch/v1", "Job")], None, "Job"),
        ([_ref("batch.volcano.sh/v1alpha1", "Job")], None, "Job.batch.volcano.sh"),
        ([_ref("kubeflow.org/v1", "PyTorchJob")], None, "PyTorchJob.kubeflow.org"),
        (
            [_ref("batch/v1", "Job", controller=None), _ref("kubeflow.org/v1", "PyTorchJob")],
            None,
            "PyTorchJob.kubeflow.org",
        ),
        (
            [_ref("batch/v1", "Job")],
            {keys.JOBSET_NAME_LABEL: "train", keys.JOBSET_UID_LABEL: "1234abcd-js"},
            "JobSet.jobset.x-k8s.io",
        ),
    ],
    ids=["batch-job", "volcano-job", "kubeflow", "controller-not-first", "jobset-via-labels"],
)
def test_lineage_kind_from_controller(
    owners: list[dict[str, Any]], labels: dict[str, str] | None, kind: str
) -> None:
    found = lineage.of_pod(_pod(owners=owners, labels=labels))

    assert found is not None
    assert (found.namespace, found.owner_kind, found.owner_name) == ("ns", kind, "train")


def test_jobset_lineage_uses_jobset_uid_not_child_job_uid() -> None:
    labels = {keys.JOBSET_NAME_LABEL: "train", keys.JOBSET_UID_LABEL: "js-uid"}
    found = lineage.of_pod(_pod(owners=[_ref("batch/v1", "Job")], labels=labels))
    assert found is not None
    assert found.owner_uid == "js-uid"


@pytest.mark.parametrize(
    "owners",
    [None, [], [_ref("v1", "Node", controller=False)]],
    ids=["no-owners", "empty", "owner-not-controller"],
)
def test_pod_without_controller_has_no_lineage(owners: list[dict[str, Any]] | None) -> None:
    assert lineage.of_pod(_pod(owners=owners)) is None


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        (_pod(namespace=None, owners=[_ref("batch/v1", "Job")]), "metadata.namespace"),
        (
            _pod(labels={keys.JOBSET_NAME_LABEL: "x"}),
            f"metadata.labels[{keys.JOBSET_UID_LABEL}]",
        ),
        (
            _pod(labels={keys.JOBSET_UID_LABEL: "x"}),
            f"metadata.labels[{keys.JOBSET_NAME_LABEL}]",
        ),
    ],
    ids=["no-namespace", "jobset-name-only", "jobset-uid-only"],
)
def test_unusable_pod_is_an_error_naming_the_field(pod: core.Pod, field: str) -> None:
    with pytest.raises(errors.InvalidObject) as caught:
        lineage.of_pod(pod)
    assert [e.path for e in caught.value.errors] == [field]


LINEAGES = [
    checkpoint.Lineage(namespace="a", owner_kind="Job", owner_name="b", owner_uid="c-d"),
    checkpoint.Lineage(
        namespace="team-x",
        owner_kind="JobSet.jobset.x-k8s.io",
        owner_name="train.v2",
        owner_uid="6e7a9c59-c530-4abc-8951-e4442790cbb7",
    ),
]


@pytest.mark.parametrize("value", LINEAGES, ids=["short", "qualified-kind"])
def test_annotation_round_trips(value: checkpoint.Lineage) -> None:
    text = lineage.annotation_value(value)

    assert text.count("/") == 3
    assert lineage.parse_annotation(text) == value


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("", "want <namespace>/<owner kind>/<owner name>/<owner uid>"),
        ("ns/Job/name", "want <namespace>"),
        ("ns/Job/name/uid/extra", "want <namespace>"),
        ("ns//name/uid", "empty owner kind"),
        ("/Job/name/", "empty namespace, owner uid"),
        ("x" * 64 + "/Job/name/uid", "namespace"),
    ],
    ids=["empty", "three-parts", "five-parts", "empty-kind", "empty-two", "long-namespace"],
)
def test_bad_annotation_names_the_cause(text: str, cause: str) -> None:
    with pytest.raises(errors.InvalidObject) as caught:
        lineage.parse_annotation(text)
    assert keys.LINEAGE_ANNOTATION in str(caught.value)
    assert cause in str(caught.value)


@pytest.mark.parametrize(
    ("value", "pod_uid", "expected"),
    [
        (LINEAGES[0], "p-1", "a/job-b-cd/p-1"),
        (
            LINEAGES[1],
            "7445deaa-3ccf-4310-8bbf-ef05024650e3",
            "team-x/jobset.jobset.x-k8s.io-train.v2-6e7a9c59/7445deaa-3ccf-4310-8bbf-ef05024650e3",
        ),
        (LINEAGES[0], "$(KONTINUE_POD_UID)", "a/job-b-cd/$(KONTINUE_POD_UID)"),
    ],
    ids=["short-uid", "real-uids", "downward-api-reference"],
)
def test_checkpoint_dir_layout(value: checkpoint.Lineage, pod_uid: str, expected: str) -> None:
    assert lineage.checkpoint_dir(policy.DEFAULT, value, pod_uid) == expected


def test_checkpoint_dir_differs_per_incarnation_and_per_owner_uid() -> None:
    same_name_new_job = LINEAGES[0].model_copy(update={"owner_uid": "ffff"})
    dirs = {
        lineage.checkpoint_dir(policy.DEFAULT, LINEAGES[0], "pod-1"),
        lineage.checkpoint_dir(policy.DEFAULT, LINEAGES[0], "pod-2"),
        lineage.checkpoint_dir(policy.DEFAULT, same_name_new_job, "pod-1"),
    }
    assert len(dirs) == 3


@pytest.mark.parametrize("pod_uid", ["", "..", "a/b", "../x", "$(A)/x", "$(1A)"])
def test_checkpoint_dir_rejects_escaping_uid(pod_uid: str) -> None:
    with pytest.raises(ValueError, match="pod uid"):
        lineage.checkpoint_dir(policy.DEFAULT, LINEAGES[0], pod_uid)


def test_recorded_volcano_victim_has_its_vcjob_as_lineage() -> None:
    review = json.loads(
        (
            fixtures.UPSTREAM
            / "volcano"
            / "examples"
            / "admissionreview-delete-victim-pod-by-vc-scheduler.json"
        ).read_text()
    )
    pod = core.Pod.model_validate(review["request"]["oldObject"])

    found = lineage.of_pod(pod)

    assert found is not None
    assert found.key == f"{pod.namespace}/Job.batch.volcano.sh/ckpt-train"
    assert found.owner_uid == "5b0d2c1e-8a4f-4c2b-9e57-0f3c6d1a2b77"
