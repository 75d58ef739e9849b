"""The install manifests: every kustomization resolves, RBAC stays least-privilege, and what the
Deployments run exists in this package.

kustomize itself is not available here, so this walks the same references kustomize would
follow (resources, components) and fails on a dangling path or an unparsable document.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests import fixtures

MANIFESTS = fixtures.MANIFESTS
KUSTOMIZATIONS = sorted(MANIFESTS.rglob("kustomization.yaml"))


def _documents(entry: Path) -> list[dict[str, Any]]:
    """Every object a kustomization (or a single file) contributes, following references."""
    if entry.is_file():
        return fixtures.load_all(entry)
    kustomization = fixtures.load_one(entry / "kustomization.yaml")
    found: list[dict[str, Any]] = []
    for ref in kustomization.get("resources", []) + kustomization.get("components", []):
        target = (entry / ref).resolve()
        assert target.exists(), f"{entry.relative_to(MANIFESTS)}: {ref} does not exist"
        found += _documents(target)
    for patch in kustomization.get("patches", []):
        if "path" in patch:  # inline patches (``patch: |``) carry their own text
            assert (entry / patch["path"]).exists(), f"{entry}: {patch['path']} does not exist"
    return found


def _patches() -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in KUSTOMIZATIONS:
        for patch in fixtures.load_one(path).get("patches", []):
            if "path" in patch:
                found += [(path.parent, d) for d in fixtures.load_all(path.parent / patch["path"])]
    return found


def test_every_patch_targets_a_container_the_base_defines() -> None:
    base = {
        (d["kind"], d["metadata"]["name"]): d
        for d in _documents(MANIFESTS / "base")
        if d["kind"] == "Deployment"
    }
    patches = _patches()
    assert patches
    for where, patch in patches:
        target = base.get((patch["kind"], patch["metadata"]["name"]))
        assert target is not None, f"{where}: no {patch['kind']} {patch['metadata']['name']}"
        names = {c["name"] for c in target["spec"]["template"]["spec"]["containers"]}
        for container in patch["spec"]["template"]["spec"]["containers"]:
            assert container["name"] in names, f"{where}: no container {container['name']}"


def test_queue_system_settings_in_manifests_parse() -> None:
    from queue_bridge import settings as bridge_settings
    from webhook import settings as webhook_settings

    values = set()
    deployments = [d for d in _documents(MANIFESTS / "base") if d["kind"] == "Deployment"]
    for doc in deployments + [patch for _, patch in _patches()]:
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for env in container.get("env", []):
                if env["name"] == "KONTINUE_QUEUE_SYSTEMS":
                    values.add(env["value"])
    assert values == {"kueue", "kueue,volcano", "volcano"}
    for value in values:
        env = {"KONTINUE_QUEUE_SYSTEMS": value}
        assert ",".join(bridge_settings.Settings.from_env(env).queue_systems) == value
        assert ",".join(webhook_settings.Settings.from_env(env).queue_systems) == value


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=lambda p: str(p.parent.relative_to(MANIFESTS)))
def test_every_kustomization_resolves(path: Path) -> None:
    documents = _documents(path.parent)
    assert documents, f"{path} contributes no objects"
    for doc in documents:
        assert doc.get("apiVersion"), doc
        assert doc.get("kind"), doc


def _rules(kind: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in MANIFESTS.rglob("*.yaml"):
        for doc in fixtures.load_all(path):
            if doc.get("kind") == kind:
                found += [(f"{path.name}/{doc['metadata']['name']}", r) for r in doc["rules"]]
    return found


RULES = _rules("ClusterRole") + _rules("Role")


def test_rbac_is_least_privilege() -> None:
    assert RULES
    for where, rule in RULES:
        resources = set(rule.get("resources", []))
        verbs = set(rule["verbs"])
        assert "*" not in resources, f"{where}: wildcard resource"
        assert "*" not in verbs, f"{where}: wildcard verb"
        assert not resources & {"nodes/proxy", "pods/exec", "pods/attach"}, f"{where}: {resources}"
        if "secrets" in resources:
            assert rule.get("resourceNames"), f"{where}: secrets without resourceNames"
        if "nodes" in resources:
            assert verbs <= {"get", "list", "watch"}, f"{where}: writes nodes"


def test_deployments_run_entry_points_this_package_installs() -> None:
    scripts = tomllib.loads((fixtures.ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    deployments = [doc for doc in _documents(MANIFESTS / "base") if doc["kind"] == "Deployment"]
    assert deployments
    for deployment in deployments:
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["command"][0] in scripts, container["command"]
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_overlays_set_the_namespace_once_with_identical_replacements() -> None:
    """Each overlay carries the namespace and the replacements that move it into the webhook
    namespaceSelectors and cert-manager's names (tests/realcp/test_manifests.py renders them
    with the real kustomize); the three copies must not drift apart."""
    overlays = sorted((MANIFESTS / "overlays").glob("*/kustomization.yaml"))
    assert [p.parent.name for p in overlays] == ["both", "kueue", "volcano"]
    loaded = [fixtures.load_one(p) for p in overlays]
    assert {k["namespace"] for k in loaded} == {"kontinue-system"}
    first = loaded[0]["replacements"]
    assert first
    for kustomization in loaded[1:]:
        assert kustomization["replacements"] == first


def test_pod_validation_conditions_name_every_reserved_annotation() -> None:
    """The CEL of pods.validate lists the reserved annotations twice (UPDATE: changed; CREATE:
    present): both lists must be exactly kontinue/keys.py's."""
    import re

    from kontinue import keys

    (configuration,) = [
        d
        for d in fixtures.load_all(MANIFESTS / "webhook" / "webhooks.yaml")
        if d["kind"] == "ValidatingWebhookConfiguration"
    ]
    (pods,) = [w for w in configuration["webhooks"] if w["name"] == "pods.validate.kontinue.dev"]
    expression = next(
        c["expression"] for c in pods["matchConditions"] if c["name"] != "not-the-bridge"
    )
    lists = re.findall(r"\[('kontinue\.dev/[^\]]*)\]", expression)
    assert len(lists) == 2
    for found in lists:
        assert set(re.findall(r"'([^']+)'", found)) == set(keys.RESERVED_POD_ANNOTATIONS)


def test_every_webhook_timeout_is_the_one_the_live_read_is_bounded_by() -> None:
    """webhook/settings.py refuses a live read longer than MAX_LIVE_READ_SECONDS because the
    apiserver waits WEBHOOK_TIMEOUT_SECONDS: both must stay what the manifests say."""
    from webhook import settings

    timeouts = {
        w["name"]: w["timeoutSeconds"]
        for d in fixtures.load_all(MANIFESTS / "webhook" / "webhooks.yaml")
        for w in d.get("webhooks") or []
    }
    assert len(timeouts) >= 2
    assert set(timeouts.values()) == {settings.WEBHOOK_TIMEOUT_SECONDS}, timeouts
    assert settings.MAX_LIVE_READ_SECONDS < settings.WEBHOOK_TIMEOUT_SECONDS


def test_one_checkpoint_pvc_name_everywhere() -> None:
    """The example policy, docs/install.md and the built-in default name the same claim (the
    example once said kontinue-checkpoints, so a user following install.md got unplumbed pods)."""
    from kontinue.models import policy

    default = policy.CheckpointPolicySpec().storage.pvc
    assert default is not None
    names = {
        doc["spec"]["storage"]["pvc"]["claimName"]
        for path in (MANIFESTS / "examples").glob("checkpointpolicy-*.yaml")
        for doc in fixtures.load_all(path)
        if "pvc" in doc["spec"].get("storage", {})
    }
    assert names == {default.claim_name}
    install = (fixtures.ROOT / "docs" / "install.md").read_text()
    assert f"metadata: {{name: {default.claim_name}, namespace: research}}" in install


def _webhooks() -> dict[str, dict[str, Any]]:
    return {
        w["name"]: w
        for d in fixtures.load_all(MANIFESTS / "webhook" / "webhooks.yaml")
        for w in d.get("webhooks") or []
    }


def test_every_webhook_skipping_kontinues_namespace_follows_the_overlays_namespace() -> None:
    """A webhook added to webhooks.yaml without its replacement would keep skipping
    ``kontinue-system`` and be sent the objects of the namespace an overlay installs into."""
    (replacement,) = [
        r
        for r in fixtures.load_one(MANIFESTS / "overlays" / "kueue" / "kustomization.yaml")[
            "replacements"
        ]
        if r["source"]["kind"] == "Service"
    ]
    moved = {
        path.split("[name=")[1].split("]")[0]
        for target in replacement["targets"]
        for path in target["fieldPaths"]
        if ".namespaceSelector." in path
    }
    skipping = {
        name
        for name, webhook in _webhooks().items()
        if "kontinue-system"
        in str((webhook.get("namespaceSelector") or {}).get("matchExpressions") or "")
    }
    assert skipping
    assert moved == skipping


def test_jobsets_are_sent_as_jobs_are() -> None:
    """A JobSet is plumbed at its CREATE (webhook/jobset_plumbing.py) under the same conditions
    as a Job: the Kueue queue label on the object, every namespace but the two skipped."""
    hooks = _webhooks()
    jobs, jobsets = hooks["jobs.mutate.kontinue.dev"], hooks["jobsets.mutate.kontinue.dev"]
    (rule,) = jobsets["rules"]
    assert rule == {
        "apiGroups": ["jobset.x-k8s.io"],
        "apiVersions": ["v1alpha2"],
        "operations": ["CREATE"],
        "resources": ["jobsets"],
        "scope": "Namespaced",
    }
    same = ("objectSelector", "namespaceSelector", "failurePolicy", "clientConfig")
    assert {k: jobsets[k] for k in same} == {k: jobs[k] for k in same}
