"""Slim views (kontinue/models/pruning.py): what the bridge caches reads the same as the full
object for every field the models name, and keeps nothing else.

The inputs are recorded objects (tests/fixtures/README.md lists where each was recorded): the
kubelet's final pod states, the job controller's, scheduler's and taint manager's pod writes, the
admission requests' pods and Job (with the ``managedFields`` a real apiserver sends), and an
evicted Kueue Workload.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
import yaml

from kontinue.models import core, kueue, pruning
from tests import fixtures

Obj = dict[str, Any]


def _recorded() -> list[tuple[str, type[pydantic.BaseModel], Obj]]:
    found: list[tuple[str, type[pydantic.BaseModel], Obj]] = []
    models: dict[str, type[pydantic.BaseModel]] = {"Pod": core.Pod, "Job": core.Job}
    paths = [
        *sorted((fixtures.FIXTURES / "bridge").glob("*.json")),
        *sorted((fixtures.FIXTURES / "webhook/admission").glob("*.json")),
    ]
    for path in paths:
        data = json.loads(path.read_text())
        request = data.get("request") if isinstance(data.get("request"), dict) else {}
        for obj in (data, request.get("object"), request.get("oldObject")):
            if isinstance(obj, dict) and obj.get("kind") in models:
                found.append((path.name, models[obj["kind"]], obj))
    workload = yaml.safe_load((fixtures.FIXTURES / "objects/workload-evicted.yaml").read_text())
    found.append(("workload-evicted.yaml", kueue.Workload, workload))
    return found


RECORDED = _recorded()


def _declared(value: Any) -> Any:
    """A model's named fields, recursively (extras left out): what typed code can read."""
    if isinstance(value, pydantic.BaseModel):
        return {name: _declared(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, list):
        return [_declared(v) for v in value]
    return value


def test_the_recorded_objects_cover_pods_jobs_workloads_and_managed_fields() -> None:
    kinds = {model.__name__ for _, model, _ in RECORDED}
    assert kinds == {"Pod", "Job", "Workload"}
    assert any("managedFields" in obj["metadata"] for _, _, obj in RECORDED)


@pytest.mark.parametrize(("name", "model", "raw"), RECORDED, ids=[r[0] for r in RECORDED])
def test_a_slim_view_reads_like_the_full_object(
    name: str, model: type[pydantic.BaseModel], raw: Obj
) -> None:
    slim = pruning.prune(model, raw)
    full = model.model_validate(raw)
    view = model.model_validate(slim)
    assert _declared(view) == _declared(full)
    assert "managedFields" not in slim["metadata"]
    assert len(json.dumps(slim)) <= len(json.dumps(raw))
    assert raw == json.loads(json.dumps(raw))  # the input is not changed


def test_only_named_fields_are_kept() -> None:
    pod = {
        "metadata": {"name": "p", "managedFields": [{"manager": "x"}], "labels": {"a": "b"}},
        "spec": {
            "containers": [{"name": "main", "livenessProbe": {"exec": {}}, "resources": {"x": 1}}],
            "volumes": [{"name": "v", "projected": {"sources": []}}],
            "tolerations": [{"key": "k"}],
            "nodeName": "n",
        },
        "status": {
            "podIPs": [{"ip": "1.2.3.4"}],
            "containerStatuses": [{"name": "main", "imageID": "sha", "volumeMounts": []}],
        },
    }
    assert pruning.prune(core.Pod, pod) == {
        "metadata": {"name": "p", "labels": {"a": "b"}},
        "spec": {
            "containers": [{"name": "main", "resources": {"x": 1}}],
            "volumes": [{"name": "v"}],
            "nodeName": "n",
        },
        "status": {"containerStatuses": [{"name": "main", "imageID": "sha"}]},
    }


def test_a_wrong_shape_is_left_for_validation_to_report() -> None:
    bad = {"metadata": {"name": "p"}, "spec": {"containers": "not-a-list"}}
    assert pruning.prune(core.Pod, bad) == bad
    with pytest.raises(pydantic.ValidationError):
        core.Pod.model_validate(pruning.prune(core.Pod, bad))
