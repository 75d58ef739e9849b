"""Proof 1: the CRDs on a real kube-apiserver v1.36.2.

Ours and the upstream Kueue and Volcano CRDs apply server-side and become Established (the
``crds`` fixture, asserted here); every example under ``manifests/examples/`` is accepted; bad
objects are refused with the field paths of their causes (structural schema, ``enum``,
``minimum``, ``pattern`` and the CEL rule of ``spec.storage``); ``kubectl get ckpt -o wide`` from
the real kubectl prints the CRD's printer columns.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kontinue.kube import api, errors
from kontinue.kube.resources import Resource
from tests.realcp import controlplane
from tests.realcp.conftest import CRD_DIRS, REPO, crd_source

CHECKPOINTS = Resource("kontinue.dev", "v1alpha1", "checkpoints", "Checkpoint")
POLICIES = Resource(
    "kontinue.dev", "v1alpha1", "checkpointpolicies", "CheckpointPolicy", namespaced=False
)
EXAMPLES = sorted((REPO / "manifests" / "examples").glob("*.yaml"))


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _crd_names() -> list[str]:
    names = []
    for directory in CRD_DIRS:
        for path in sorted(directory.glob("*.yaml")):
            names += [
                d["metadata"]["name"]
                for d in _documents(path)
                if d["kind"] == "CustomResourceDefinition"
            ]
    return names


def test_every_crd_applies_server_side_and_is_established(crds: controlplane.ControlPlane) -> None:
    names = _crd_names()
    assert {"checkpoints.kontinue.dev", "checkpointpolicies.kontinue.dev"} <= set(names)
    assert any(n.endswith(".kueue.x-k8s.io") for n in names)
    assert any(n.endswith(".volcano.sh") for n in names)
    listed = json.loads(crds.kubectl("get", "crd", "-o", "json").stdout)["items"]
    established = {
        crd["metadata"]["name"]
        for crd in listed
        if any(
            c["type"] == "Established" and c["status"] == "True"
            for c in crd["status"]["conditions"]
        )
    }
    assert set(names) <= established
    # Applying again is a no-op for the same field manager (no conflict, nothing changes).
    again = crds.kubectl("apply", "--server-side", *crd_source(CRD_DIRS[0]))
    assert "serverside-applied" in again.stdout


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_is_accepted(
    crds: controlplane.ControlPlane, namespace: str, path: Path
) -> None:
    for document in _documents(path):
        document = copy.deepcopy(document)
        if document["kind"] == "Checkpoint":
            document["metadata"]["namespace"] = namespace
        status = document.pop("status", None)
        done = crds.kubectl(
            "apply",
            "--server-side",
            "--field-manager=realcp-test",
            "-o",
            "json",
            "-f",
            "-",
            stdin=json.dumps(document),
        )
        stored = json.loads(done.stdout)
        # Nothing pruned: every field the example sets is stored as written (after defaults).
        assert _contains(stored["spec"], document["spec"]), (stored["spec"], document["spec"])
        if status is not None:
            patched = crds.kubectl(
                "patch",
                document["kind"].lower(),
                document["metadata"]["name"],
                "-n",
                namespace,
                "--subresource=status",
                "--type=merge",
                "-o",
                "json",
                "-p",
                json.dumps({"status": status}),
            )
            assert _contains(json.loads(patched.stdout)["status"], status)


def _contains(stored: Any, written: Any) -> bool:
    if isinstance(written, dict):
        return isinstance(stored, dict) and all(
            k in stored and _contains(stored[k], v) for k, v in written.items()
        )
    if isinstance(written, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(written)
            and all(_contains(s, w) for s, w in zip(stored, written, strict=True))
        )
    return bool(stored == written)


def _policy(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kontinue.dev/v1alpha1",
        "kind": "CheckpointPolicy",
        "metadata": {"name": "bad"},
        "spec": {"storage": {"pvc": {"claimName": "kontinue"}}, **spec},
    }


def _checkpoint(namespace: str, **spec: Any) -> dict[str, Any]:
    example = _documents(REPO / "manifests" / "examples" / "checkpoint-succeeded.yaml")[0]
    example.pop("status")
    example["metadata"] = {"name": "bad", "namespace": namespace}
    example["spec"].update(spec)
    return dict(example)


BAD_POLICIES = {
    "engine not in the enum": (_policy(engine="docker"), ["spec.engine"]),
    "pvc without claimName": (_policy(storage={"pvc": {}}), ["spec.storage.pvc.claimName"]),
    "pvc and hostPath (CEL)": (
        _policy(storage={"pvc": {"claimName": "x"}, "hostPath": {"path": "/x"}}),
        ["spec.storage"],
    ),
    "claimName not a DNS name": (
        _policy(storage={"pvc": {"claimName": "Not_A_Name"}}),
        ["spec.storage.pvc.claimName"],
    ),
    "relative mountPath": (
        _policy(storage={"pvc": {"claimName": "x"}, "mountPath": "relative"}),
        ["spec.storage.mountPath"],
    ),
    "engine cedana (not implemented, CEL)": (_policy(engine="cedana"), ["spec"]),
    "engine kubelet (not implemented, CEL)": (_policy(engine="kubelet"), ["spec"]),
    "grace period 0": (_policy(minGracePeriodSeconds=0), ["spec.minGracePeriodSeconds"]),
    "two bad fields at once": (
        _policy(engine="docker", minGracePeriodSeconds=0),
        ["spec.engine", "spec.minGracePeriodSeconds"],
    ),
}


@pytest.mark.parametrize("case", BAD_POLICIES, ids=list(BAD_POLICIES))
async def test_bad_policy_is_refused_with_field_paths(
    crds: controlplane.ControlPlane, admin: api.Api, case: str
) -> None:
    body, fields = BAD_POLICIES[case]
    with pytest.raises(errors.Invalid) as refused:
        await admin.create(POLICIES, body)
    assert _fields(refused.value) == set(fields), refused.value
    if "not implemented" in case:
        assert "only engine 'signal' is implemented" in str(refused.value)


@pytest.mark.parametrize(
    ("spec", "fields"),
    [
        (
            {"lineage": {"namespace": "x", "ownerKind": "Job", "ownerName": "x"}},
            ["spec.lineage.ownerUid"],
        ),
        (
            {"trigger": {"source": "Cron", "reason": "x", "time": "2026-12-01T10:05:00Z"}},
            ["spec.trigger.source"],
        ),
        (
            {"members": [{"podName": "p", "podUid": "u", "node": "n", "index": -1}]},
            ["spec.members[0].index"],
        ),
    ],
    ids=["missing ownerUid", "unknown trigger source", "negative member index"],
)
async def test_bad_checkpoint_is_refused_with_field_paths(
    crds: controlplane.ControlPlane,
    admin: api.Api,
    namespace: str,
    spec: dict[str, Any],
    fields: list[str],
) -> None:
    with pytest.raises(errors.Invalid) as refused:
        await admin.create(CHECKPOINTS, _checkpoint(namespace, **spec), namespace=namespace)
    assert _fields(refused.value) == set(fields), refused.value


def _fields(exc: errors.Invalid) -> set[str]:
    """The causes' field paths. A schema error also brings a cause at ``<nil>`` saying that the
    CEL rules were not checked (apiextensions-apiserver ``pkg/registry/customresource``); that one
    names no field of ours and is left out."""
    details = exc.details if isinstance(exc.details, dict) else {}
    return {
        cause["field"]
        for cause in details.get("causes", [])
        if "field" in cause and cause["field"] != "<nil>"
    }


def test_kubectl_get_ckpt_wide_prints_the_printer_columns(
    crds: controlplane.ControlPlane, namespace: str
) -> None:
    example = REPO / "manifests" / "examples" / "checkpoint-succeeded.yaml"
    document = _documents(example)[0]
    document["metadata"]["namespace"] = namespace
    status = document.pop("status")
    crds.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(document))
    crds.kubectl(
        "patch",
        "checkpoint",
        document["metadata"]["name"],
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    columns = _printer_columns()
    wide = _table(crds.kubectl("get", "ckpt", "-o", "wide", "-n", namespace).stdout)
    assert list(wide) == ["NAME", *(c["name"].upper() for c in columns)]
    assert wide["NAME"] == "scavenger-0-4711"
    assert (wide["OWNER-KIND"], wide["OWNER"]) == ("Job", "scavenger-0")
    assert (wide["TRIGGER"], wide["SOURCE"], wide["PHASE"]) == ("Preempted", "Kueue", "Succeeded")
    assert wide["PATH"] == status["path"]
    assert wide["MESSAGE"] == ""  # the example has no status.message
    assert wide["AGE"].endswith("s")
    narrow = _table(crds.kubectl("get", "ckpt", "-n", namespace).stdout)
    assert list(narrow) == ["NAME", *(c["name"].upper() for c in columns if not c.get("priority"))]
    assert {"PATH", "MESSAGE"} <= set(wide) - set(narrow)
    crds.kubectl(
        "patch",
        "checkpoint",
        document["metadata"]["name"],
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"message": "why"}}),
    )
    assert (
        _table(crds.kubectl("get", "ckpt", "-o", "wide", "-n", namespace).stdout)["MESSAGE"]
        == "why"
    )


def _printer_columns() -> list[dict[str, Any]]:
    crd = _documents(REPO / "manifests" / "crds" / "kontinue.dev_checkpoints.yaml")[0]
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
    columns: list[dict[str, Any]] = version["additionalPrinterColumns"]
    return columns


def _table(text: str) -> dict[str, str]:
    """kubectl's one-row table as {column: value}, cut at the header's column offsets."""
    header, row = text.splitlines()[:2]
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    ends = [*starts[1:], None]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, ends, strict=True)}
