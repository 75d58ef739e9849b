"""kontinue/json_copy.py: a copy of a JSON value is ``copy.deepcopy``'s, sharing nothing."""

from __future__ import annotations

import copy
import json
from typing import Any

from kontinue import json_copy
from tests import fixtures

Obj = dict[str, Any]


def test_copied_is_a_deep_copy_of_json() -> None:
    """``json_copy.copied`` (the fast ``copy.deepcopy`` of parsed JSON): equal, and sharing no
    dict or list with the original."""
    pod = json.loads((fixtures.FIXTURES / "bridge/kubelet-sigterm-saved.json").read_text())
    value: Obj = {"pod": pod, "list": [1, 2.5, True, None, "s", {"a": []}], "n": None}
    made = json_copy.copied(value)
    assert made == copy.deepcopy(value)

    def containers(node: Any) -> list[int]:
        if isinstance(node, dict):
            return [id(node), *(i for v in node.values() for i in containers(v))]
        if isinstance(node, list):
            return [id(node), *(i for v in node for i in containers(v))]
        return []

    assert not set(containers(made)) & set(containers(value))
    assert json_copy.copied(("a", 1)) == ("a", 1)  # anything else: copy.deepcopy's
