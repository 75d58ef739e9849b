"""Pure: the node affinity a user's move asks for, added to a pod that restores from the move.

``kubectl kontinue move --to-node N`` / ``--away-from NODE`` (and ``drain``, ``defrag``) marks the
pods it evicts; the bridge copies the mark onto the ``Manual`` Checkpoint of that eviction
(kontinue/moving.py). A pod created while its lineage restores from — or waits for — that
Checkpoint gets one more required node-affinity expression, ``kubernetes.io/hostname`` ``In
[N]`` or ``NotIn [NODE]``, ANDed into every ``nodeSelectorTerm`` (terms are ORed, so each needs
it). Pods restoring from any later set carry nothing: the request is honoured once.

It composes with :mod:`webhook.plumbing`: when the plumbing patch already replaces
``/spec/affinity`` (a restore steered to matching GPUs), the expression joins that value instead
of a second, conflicting operation.
"""

from __future__ import annotations

import copy
from typing import Any

from kontinue import moving, restore_plan
from webhook import review

Obj = dict[str, Any]


def asked(plan: restore_plan.Plan) -> moving.Move | None:
    """The move recorded on the Checkpoint this pod waits for or restores from, if any."""
    chosen = plan.wait_for or plan.source
    return moving.of(chosen.checkpoint.metadata.annotations) if chosen is not None else None


def _and_into(affinity: Obj, expression: Obj) -> Obj:
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), expression]
    required["nodeSelectorTerms"] = terms
    return affinity


def with_move(
    patch: list[review.JsonPatchOp], *, spec: Obj, move: moving.Move | None
) -> list[review.JsonPatchOp]:
    """``patch`` plus the move's placement (unchanged when there is no move or no placement)."""
    expression = move.node_expression() if move is not None else None
    if expression is None:
        return patch
    result = list(patch)
    for i, op in enumerate(result):
        if op.get("path") == "/spec/affinity" and op.get("op") in ("add", "replace"):
            value = _and_into(copy.deepcopy(op["value"]), expression)
            result[i] = {**op, "value": value}
            return result
    affinity = _and_into(copy.deepcopy(spec.get("affinity") or {}), expression)
    result.append(
        {
            "op": "replace" if "affinity" in spec else "add",
            "path": "/spec/affinity",
            "value": affinity,
        }
    )
    return result
