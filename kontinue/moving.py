"""A move a user asked for (``kubectl kontinue move``, ``drain``, ``defrag``), as written down.

A move is an eviction the user asked for: same Checkpoint, same restore, plus where the next
incarnation should run. Three parts read the one annotation :data:`ANNOTATION`:

1. ``kubectl kontinue`` writes it on each pod it is about to evict (``Move.encode``), then
   evicts the pod through the Eviction API (PodDisruptionBudgets respected);
2. the queue bridge's pod path sees the ``EvictionByEvictionAPI`` disruption of a pod carrying
   it and records the eviction with trigger source ``Manual`` (reason :attr:`Move.reason`),
   copying the annotation onto the Checkpoint (queue_bridge/sources/disruption.py,
   queue_bridge/handlers/disruption.py);
3. the webhook, on the CREATE of a pod that restores from (or waits for) a Checkpoint carrying
   it, adds the node affinity the move asked for (webhook/placement.py) — only to pods restoring
   from *that* set, so the request is honoured once and later incarnations go anywhere.

Why an annotation on the pod: the bridge never sees the Eviction object (an apiserver
subresource, not stored), only the pod's ``DisruptionTarget`` condition and the pod itself.
Whoever may patch a pod and evict it could write the annotation by hand; all it changes is the
Checkpoint's recorded source and the successor's placement, which that person could already
choose by evicting and editing the Job.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

from kontinue import keys

ANNOTATION = keys.MOVE_ANNOTATION
HOSTNAME_LABEL = keys.HOSTNAME_LABEL

Kind = Literal["move", "drain", "defrag"]
KINDS: tuple[Kind, ...] = ("move", "drain", "defrag")


@dataclasses.dataclass(frozen=True)
class Move:
    """``by``: which command asked; at most one of ``to_node`` / ``away_from``."""

    by: Kind
    to_node: str | None = None
    away_from: str | None = None

    def __post_init__(self) -> None:
        if self.to_node and self.away_from:
            raise ValueError("a move goes to a node or away from one, not both")

    def encode(self) -> str:
        data: dict[str, str] = {"by": self.by}
        if self.to_node:
            data["toNode"] = self.to_node
        if self.away_from:
            data["awayFrom"] = self.away_from
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @property
    def reason(self) -> str:
        """The Checkpoint trigger's reason: ``Move``, ``Drain`` or ``Defrag``."""
        return self.by.capitalize()

    @property
    def request(self) -> str:
        if self.to_node:
            return f"to node {self.to_node}"
        if self.away_from:
            return f"away from node {self.away_from}"
        return "anywhere"

    @property
    def message(self) -> str:
        """The Checkpoint trigger's message, what ``kubectl get ckpt -o wide`` shows."""
        return f"kubectl kontinue {self.by}: {self.request}"

    def node_expression(self) -> dict[str, Any] | None:
        """The required node-affinity expression the successor pods get, ``None`` for none."""
        if self.to_node:
            return {"key": HOSTNAME_LABEL, "operator": "In", "values": [self.to_node]}
        if self.away_from:
            return {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": [self.away_from]}
        return None


def decode(value: str | None) -> Move | None:
    """The move an annotation value records; ``None`` when absent or not one we wrote."""
    if not value:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("by") not in KINDS:
        return None
    to_node, away_from = data.get("toNode"), data.get("awayFrom")
    if not all(v is None or (isinstance(v, str) and v) for v in (to_node, away_from)):
        return None
    try:
        return Move(by=data["by"], to_node=to_node, away_from=away_from)
    except ValueError:
        return None


def of(annotations: dict[str, str] | None) -> Move | None:
    """The move recorded in an object's annotations (a pod's or a Checkpoint's)."""
    return decode((annotations or {}).get(ANNOTATION))
