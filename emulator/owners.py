"""The controller owner reference a controller puts on what it creates.

Copies k8s.io/apimachinery ``pkg/apis/meta/v1/controller_ref.go`` ``NewControllerRef``:
``controller`` and ``blockOwnerDeletion`` both true, the owner named by its apiVersion, kind,
name and uid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Object = dict[str, Any]


def controller_ref(
    owner: Mapping[str, Any], *, api_version: str = "batch/v1", kind: str = "Job"
) -> Object:
    """The reference to ``owner`` (an object with ``metadata.name`` and ``metadata.uid``)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
