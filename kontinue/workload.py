"""Which containers of a pod are the workload: the ones whose save is judged.

Container order is not a contract: Istio puts ``istio-proxy`` first when
``holdApplicationUntilProxyStarts`` is on, and log shippers, secret agents and profilers are
injected by other webhooks in any order. The rule, in order (docs/api.md, "Workload containers"):

1. the annotation ``kontinue.dev/workload-containers`` on the pod (or its Job's pod template):
   comma-separated container names. Names that match no container are reported (a warning) and
   ignored; if none matches, the next rule decides;
2. else the containers that request or limit an accelerator (``nvidia.com/gpu``, ``amd.com/gpu``,
   ``gpu.intel.com/i915``, ``google.com/tpu``, ``aws.amazon.com/neuron``...);
3. else the first container.

Only the workload containers decide a member's result (queue_bridge/lifecycle.py): a container
that is not the workload never fails a set and is never waited for.

Pure and over plain data (a pod spec as a dict or the typed model), so the webhook and the bridge
call the same rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from kontinue import keys
from kontinue.models import core

ACCELERATOR_RESOURCES = frozenset(
    {
        keys.GPU_RESOURCE,
        "amd.com/gpu",
        "gpu.intel.com/i915",
        "gpu.intel.com/xe",
        "google.com/tpu",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "habana.ai/gaudi",
    }
)


@dataclasses.dataclass(frozen=True)
class Choice:
    names: tuple[str, ...]
    """The workload containers, in spec order; empty only for a pod without containers."""
    reason: str
    """Which rule chose them: ``annotation``, ``accelerator`` or ``first``."""
    warnings: tuple[str, ...] = ()


def _accelerated(resources: Mapping[str, Any] | None) -> bool:
    for part in ("requests", "limits"):
        amounts = (resources or {}).get(part) or {}
        if isinstance(amounts, Mapping) and any(
            name in ACCELERATOR_RESOURCES and str(value) not in ("0", "")
            for name, value in amounts.items()
        ):
            return True
    return False


def choose(
    containers: Sequence[tuple[str, Mapping[str, Any] | None]], annotation: str | None
) -> Choice:
    """The workload containers among ``(name, resources)`` pairs, per the module's rule."""
    names = [name for name, _ in containers]
    warnings: list[str] = []
    if annotation is not None and annotation.strip():
        asked = [n.strip() for n in annotation.split(",") if n.strip()]
        unknown = [n for n in asked if n not in names]
        if unknown:
            warnings.append(
                f"kontinue: {keys.WORKLOAD_CONTAINERS_ANNOTATION} names "
                f"{', '.join(repr(n) for n in unknown)}, which match no container of the pod "
                f"({', '.join(names) or 'none'}); ignored"
            )
        chosen = tuple(n for n in names if n in asked)
        if chosen:
            return Choice(chosen, "annotation", tuple(warnings))
    accelerated = tuple(name for name, resources in containers if _accelerated(resources))
    if accelerated:
        return Choice(accelerated, "accelerator", tuple(warnings))
    return Choice(tuple(names[:1]), "first", tuple(warnings))


def of_pod(pod: core.Pod) -> Choice:
    """:func:`choose` for a typed pod."""
    containers = [(c.name, c.resources) for c in pod.spec.containers]
    return choose(containers, pod.metadata.annotation(keys.WORKLOAD_CONTAINERS_ANNOTATION))


def of_spec(spec: Mapping[str, Any], annotations: Mapping[str, Any] | None) -> Choice:
    """:func:`choose` for a pod (or pod template) as a dict."""
    containers = [
        (str(c.get("name", "")), c.get("resources"))
        for c in spec.get("containers") or []
        if isinstance(c, Mapping)
    ]
    value = (annotations or {}).get(keys.WORKLOAD_CONTAINERS_ANNOTATION)
    return choose(containers, value if isinstance(value, str) else None)
