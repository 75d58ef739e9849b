"""CustomResourceDefinitions of our kinds, generated from the pydantic models.

The models are the source of truth; ``manifests/crds/*.yaml`` is their generated image, checked
in so ``kubectl apply -k`` needs no Python. ``python -m kontinue.crds manifests/crds`` rewrites
the files; a test fails when they drift from the models.

A pydantic JSON schema is not yet a *structural* schema as the apiserver demands, so this
module inlines ``$ref``, drops ``null`` branches and titles, turns ``const`` into a one-value
``enum`` and ``additionalProperties: false`` into pruning (the apiserver's own way of rejecting
nothing and storing nothing unknown), and adds CEL rules for what a model validator checks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pydantic
import yaml

from kontinue import keys
from kontinue.models import checkpoint, policy

Schema = dict[str, Any]

_DROP = {"title", "discriminator"}


def _structural(node: Any, defs: dict[str, Schema]) -> Any:
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(branches) == 1:
            return _structural({**branches[0], **rest}, defs)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and value is None):
            continue
        if key == "const":
            out["enum"] = [value]
            out.setdefault("type", "string")
        elif key == "additionalProperties" and isinstance(value, bool):
            if value:
                out["x-kubernetes-preserve-unknown-fields"] = True
        elif key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        else:
            out[key] = _structural(value, defs)
    if not out:  # ``Any``: an object whose contents we do not constrain
        return {"x-kubernetes-preserve-unknown-fields": True}
    return out


def openapi_schema(model: type[pydantic.BaseModel]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema: Schema = _structural(raw, raw.get("$defs", {}))
    schema.pop("$defs", None)
    schema.pop("required", None)  # apiVersion/kind/metadata are the apiserver's business
    schema.pop("description", None)
    schema["properties"]["apiVersion"] = {"type": "string"}
    schema["properties"]["kind"] = {"type": "string"}
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def _add_rule(schema: Schema, path: list[str], rule: str, message: str) -> None:
    node = schema
    for name in path:
        node = node["properties"][name]
    node.setdefault("x-kubernetes-validations", []).append({"rule": rule, "message": message})


def _column(name: str, json_path: str, type_: str = "string", priority: int = 0) -> Schema:
    column: Schema = {"name": name, "type": type_, "jsonPath": json_path}
    if priority:
        column["priority"] = priority
    return column


def _crd(
    *,
    kind: str,
    plural: str,
    scope: str,
    short_names: list[str],
    schema: Schema,
    columns: list[Schema],
) -> Schema:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{keys.GROUP}"},
        "spec": {
            "group": keys.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["kontinue"],
            },
            "scope": scope,
            "versions": [
                {
                    "name": keys.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def checkpoint_crd() -> Schema:
    schema = openapi_schema(checkpoint.Checkpoint)
    return _crd(
        kind="Checkpoint",
        plural="checkpoints",
        scope="Namespaced",
        short_names=["ckpt"],
        schema=schema,
        columns=[
            _column("Owner-Kind", ".spec.lineage.ownerKind"),
            _column("Owner", ".spec.lineage.ownerName"),
            _column("Trigger", ".spec.trigger.reason"),
            _column("Source", ".spec.trigger.source"),
            _column("Phase", ".status.phase"),
            _column("Consistency", ".spec.consistency"),
            _column("Path", ".status.path", priority=1),
            _column("Message", ".status.message", priority=1),
            _column("Age", ".metadata.creationTimestamp", "date"),
        ],
    )


def policy_crd() -> Schema:
    schema = openapi_schema(policy.CheckpointPolicy)
    _add_rule(
        schema,
        ["spec", "storage"],
        "has(self.pvc) != has(self.hostPath)",
        "exactly one of pvc or hostPath must be set",
    )
    _add_rule(
        schema,
        ["spec"],
        f"!has(self.engine) || self.engine == '{policy.Engine.SIGNAL}'",
        policy.UNIMPLEMENTED_ENGINE,
    )
    return _crd(
        kind="CheckpointPolicy",
        plural="checkpointpolicies",
        scope="Cluster",
        short_names=["ckptpolicy"],
        schema=schema,
        columns=[
            _column("Engine", ".spec.engine"),
            _column("Grace", ".spec.minGracePeriodSeconds", "integer"),
            _column("Keep", ".spec.retention.keep", "integer"),
            _column("Admission-Check", ".spec.admissionCheck.enabled", "boolean", priority=1),
            _column("Age", ".metadata.creationTimestamp", "date"),
        ],
    )


def generated() -> dict[str, str]:
    """File name -> YAML text for every CRD we own."""
    header = "# Generated by `python -m kontinue.crds manifests/crds` from kontinue/models.\n"
    crds = {"checkpoints": checkpoint_crd(), "checkpointpolicies": policy_crd()}
    return {
        f"{keys.GROUP}_{plural}.yaml": header + yaml.safe_dump(crd, sort_keys=False)
        for plural, crd in crds.items()
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kontinue.crds",
        description="Write Kontinue's CRDs, generated from kontinue/models, into a directory.",
    )
    parser.add_argument(
        "directory", nargs="?", default="manifests/crds", help="where to write (manifests/crds)"
    )
    target = Path(parser.parse_args(argv[1:]).directory)
    target.mkdir(parents=True, exist_ok=True)
    for name, text in generated().items():
        (target / name).write_text(text)
        print(f"wrote {target / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
