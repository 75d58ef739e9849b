"""Engines nothing implements are refused, with the message the CRD's CEL rule also gives."""

from __future__ import annotations

import pydantic
import pytest

from kontinue import crds
from kontinue.models import policy


@pytest.mark.parametrize("engine", ["cedana", "kubelet"])
def test_unimplemented_engines_are_refused(engine: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="only engine 'signal' is implemented"):
        policy.CheckpointPolicySpec.model_validate({"engine": engine})


def test_signal_and_the_default_are_accepted() -> None:
    assert policy.CheckpointPolicySpec.model_validate({}).engine is policy.Engine.SIGNAL
    assert policy.CheckpointPolicySpec.model_validate({"engine": "signal"}).engine == "signal"


def test_the_crd_carries_the_same_rule() -> None:
    spec = crds.policy_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]
    assert {
        "rule": "!has(self.engine) || self.engine == 'signal'",
        "message": policy.UNIMPLEMENTED_ENGINE,
    } in spec["x-kubernetes-validations"]
