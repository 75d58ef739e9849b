"""Our CRDs: generated from the models, checked in, and validating our example objects."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from kontinue import crds, keys
from kontinue.models import base, checkpoint, errors, policy
from tests import fixtures

CRD_DIR = fixtures.MANIFESTS / "crds"
EXAMPLES = fixtures.MANIFESTS / "examples"


def test_checked_in_crds_match_the_models() -> None:
    """Regenerate with ``python -m kontinue.crds manifests/crds`` when this fails."""
    for name, text in crds.generated().items():
        assert (CRD_DIR / name).read_text() == text, f"{name} drifted from the models"


def _schema(plural: str) -> dict[str, Any]:
    return fixtures.crd_schema(CRD_DIR / f"{keys.GROUP}_{plural}.yaml", keys.VERSION)


@pytest.mark.parametrize(
    ("example", "plural", "loader"),
    [
        ("checkpointpolicy-default.yaml", "checkpointpolicies", policy.load),
        ("checkpointpolicy-kind.yaml", "checkpointpolicies", policy.load),
        ("checkpoint-succeeded.yaml", "checkpoints", checkpoint.load),
    ],
)
def test_examples_validate_against_our_crd_and_load(example: str, plural: str, loader: Any) -> None:
    raw = fixtures.load_one(EXAMPLES / example)
    jsonschema.validate(raw, _schema(plural))
    loaded = loader(raw)
    assert loaded.metadata.name == raw["metadata"]["name"]


def test_crd_schema_rejects_what_the_model_rejects() -> None:
    raw = fixtures.load_one(EXAMPLES / "checkpointpolicy-default.yaml")
    raw["spec"]["engine"] = "criu"
    with pytest.raises(jsonschema.ValidationError, match="criu"):
        jsonschema.validate(raw, _schema("checkpointpolicies"))
    with pytest.raises(errors.InvalidObject, match=r"spec\.engine"):
        policy.load(raw)


def test_printer_columns_tell_the_story() -> None:
    crd = fixtures.load_one(CRD_DIR / f"{keys.GROUP}_checkpoints.yaml")
    columns = {
        c["name"]: c["jsonPath"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert columns["Owner"] == ".spec.lineage.ownerName"
    assert columns["Trigger"] == ".spec.trigger.reason"
    assert columns["Phase"] == ".status.phase"
    assert columns["Age"] == ".metadata.creationTimestamp"
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_structural_schema_has_no_refs_or_unions() -> None:
    for name in crds.generated():
        text = (CRD_DIR / name).read_text()
        for banned in ("$ref", "anyOf", "$defs", "const:", "additionalProperties: false"):
            assert banned not in text, f"{banned} in {name}"


BAD_POLICIES: list[tuple[dict[str, Any], str]] = [
    ({"storage": {"pvc": {}}}, "spec.storage.pvc.claimName: Field required"),
    ({"storage": {}}, "spec.storage: Value error, exactly one of pvc or hostPath"),
    (
        {"storage": {"pvc": {"claimName": "a"}, "hostPath": {"path": "/x"}}},
        "spec.storage: Value error, exactly one of pvc or hostPath",
    ),
    ({"storage": {"hostPath": {"path": "relative"}}}, "spec.storage.hostPath.path"),
    ({"minGracePeriodSeconds": 0}, "spec.minGracePeriodSeconds: Input should be greater than"),
    ({"retention": {"keep": 0}}, "spec.retention.keep"),
    ({"compatibility": ["gpuProduct", "colour"]}, "spec.compatibility[1]"),
    ({"engine": "criu"}, "spec.engine: Input should be 'signal', 'cedana' or 'kubelet'"),
    ({"minGracePeriod": 10}, "spec.minGracePeriod: Extra inputs are not permitted"),
    ({"restore": {"attemptsBeforeFallback": "many"}}, "spec.restore.attemptsBeforeFallback"),
]


@pytest.mark.parametrize(
    ("spec", "message"), BAD_POLICIES, ids=[m.split(":")[0] for _, m in BAD_POLICIES]
)
def test_a_malformed_policy_names_the_field(spec: dict[str, Any], message: str) -> None:
    raw = {"apiVersion": keys.API_VERSION, "kind": "CheckpointPolicy", "metadata": {"name": "p"}}
    with pytest.raises(errors.InvalidObject) as caught:
        policy.load({**raw, "spec": spec})
    assert message in str(caught.value)
    assert caught.value.errors[0].path.startswith("spec.")


def test_the_smallest_policy_gets_every_default() -> None:
    loaded = policy.load({"metadata": {"name": "p"}, "spec": {}})
    assert loaded.spec == policy.DEFAULT.spec
    assert loaded.spec.min_grace_period_seconds == 120
    assert loaded.spec.storage.pvc is not None


def test_checkpoint_round_trips_through_the_wire_form() -> None:
    raw = fixtures.load_one(EXAMPLES / "checkpoint-succeeded.yaml")
    loaded = checkpoint.load(raw)
    assert loaded.status.phase is checkpoint.Phase.SUCCEEDED
    assert loaded.spec.lineage.key == "research/Job/scavenger-0"
    assert checkpoint.load(base.to_dict(loaded)) == loaded
    assert base.to_dict(loaded)["spec"]["trigger"]["time"] == "2026-12-01T10:05:00Z"


def test_a_checkpoint_without_members_is_invalid() -> None:
    raw = fixtures.load_one(EXAMPLES / "checkpoint-succeeded.yaml")
    raw["spec"]["members"] = []
    with pytest.raises(errors.InvalidObject, match=r"spec\.members"):
        checkpoint.load(raw)


def test_lineage_hash_separates_a_reused_name() -> None:
    first = checkpoint.Lineage(namespace="ns", owner_kind="Job", owner_name="a", owner_uid="1")
    second = first.model_copy(update={"owner_uid": "2"})
    assert first.key == second.key
    assert first.hash != second.hash
    assert len(first.hash) == 16
