"""``$(VAR)`` expansion, env building and path rewriting of the emulated kubelet (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emulator.kubelet import expansion, launch

CONTEXT = {"VAR_A": "A", "VAR_B": "B", "VAR_EMPTY": "", "VAR_REF": "$(VAR_A)"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Cases from k8s.io/kubernetes third_party/forked/golang/expansion/expand_test.go.
        ("$(VAR_A)", "A"),
        ("___$(VAR_B)___", "___B___"),
        ("$(VAR_A)-$(VAR_A)", "A-A"),
        ("f000-$$VAR_A", "f000-$VAR_A"),
        ("$$$(VAR_A)", "$A"),
        ("$$$$$$$(VAR_A)", "$$$A"),
        ("$(VAR_EMPTY)", ""),
        ("$(VAR_REF)", "$(VAR_A)"),  # no recursion
        ("$(VAR_DNE)", "$(VAR_DNE)"),  # unresolvable stays literal
        ("$(VAR_A", "$(VAR_A"),  # unterminated
        ("$VAR_A", "$VAR_A"),
        ("$", "$"),
        ("$$", "$"),
        ("$()", "$()"),
        ("$$(VAR_A)", "$(VAR_A)"),  # escaped reference
        ("$(VAR_A)$", "A$"),
        ("\n$(VAR_A)\t", "\nA\t"),
    ],
)
def test_expand_like_the_kubelet(text: str, expected: str) -> None:
    assert expansion.expand(text, expansion.mapping_for(CONTEXT)) == expected


def _pod() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u-1",
            "labels": {"app": "trainer"},
        },
        "spec": {"nodeName": "n1", "serviceAccountName": "sa"},
        "status": {"hostIP": "10.0.0.1", "podIP": "10.1.0.5"},
    }


def test_env_sees_only_earlier_variables_and_service_env() -> None:
    container = {
        "name": "main",
        "env": [
            {"name": "LATER_REF", "value": "$(FIRST)"},  # FIRST is defined after: stays literal
            {"name": "FIRST", "value": "one"},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "COMBINED", "value": "$(FIRST)-$(UID)-$(SVC_HOST)"},
        ],
    }
    env = launch.environment(
        _pod(), container, where="spec.containers[0]", service_env={"SVC_HOST": "10.96.0.1"}
    )
    assert env == {
        "SVC_HOST": "10.96.0.1",
        "LATER_REF": "$(FIRST)",
        "FIRST": "one",
        "UID": "u-1",
        "APP": "trainer",
        "COMBINED": "one-u-1-10.96.0.1",
    }


@pytest.mark.parametrize(
    ("env", "field"),
    [
        (
            [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.nope"}}}],
            "env[0].valueFrom",
        ),
        ([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}], "env[0]"),
    ],
)
def test_unsupported_env_source_names_the_field(env: list[dict[str, Any]], field: str) -> None:
    with pytest.raises(launch.ConfigError) as caught:
        launch.environment(_pod(), {"name": "main", "env": env}, where="spec.containers[0]")
    assert caught.value.field.startswith(f"spec.containers[0].{field}")


def test_subpath_expr_with_a_missing_variable_is_a_config_error(tmp_path: Path) -> None:
    pod = {**_pod(), "spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}
    container = {
        "name": "main",
        "volumeMounts": [{"name": "v", "mountPath": "/data", "subPathExpr": "$(NOPE)"}],
    }
    node = launch.Node(name="n1", ip="10.0.0.1", root=tmp_path, shared_root=tmp_path / "shared")
    with pytest.raises(launch.ConfigError, match="missing value for NOPE") as caught:
        launch.plan(pod, container, where="spec.containers[0]", node=node)
    assert caught.value.field == "spec.containers[0].volumeMounts[0].subPathExpr"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/ckpt", "/host/c"),
        ("/ckpt/a/b", "/host/c/a/b"),
        ("open('/ckpt/x')", "open('/host/c/x')"),
        ("/ckptx", "/ckptx"),  # not a path boundary
        ("/other/ckpt", "/other/ckpt"),
        ("/dev/termination-log", "/host/t"),
        ('f = open("/dev/termination-log", "w")', 'f = open("/host/t", "w")'),
    ],
)
def test_rewrite_replaces_container_paths_only_at_boundaries(text: str, expected: str) -> None:
    paths = {"/ckpt": Path("/host/c"), "/dev/termination-log": Path("/host/t")}
    assert launch.rewrite(text, paths) == expected
