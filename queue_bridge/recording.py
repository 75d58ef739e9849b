"""Kubernetes Events on the objects a user looks at (Workload, Job, Pod, Checkpoint).

``kubectl describe job scavenger-0`` should tell the story: ``CheckpointStarted``,
``CheckpointSucceeded`` or ``CheckpointFailed`` with the reason. Events are best effort: a
failure to record one is logged and never fails the reconcile that wanted it.

The Event name is derived from the object's UID, the reason and the message, so the same
occurrence reported twice (a reconcile retried, Kueue's two suspend updates) bumps ``count``
on one Event instead of spamming new ones — the aggregation client-go's recorder does
(tools/record/events_cache.go), done here by name so it survives a bridge restart. The writer
is kontinue/kube/events.py, shared with the webhook.
"""

from __future__ import annotations

import logging
from typing import Any

from kontinue.kube import events, interface

logger = logging.getLogger("kontinue.bridge.events")

COMPONENT = "kontinue-bridge"
REPORTING_CONTROLLER = "kontinue.dev/bridge"
Involved = events.Involved
event_name = events.event_name


def build_event(
    involved: Involved,
    *,
    reason: str,
    message: str,
    type_: events.EventType,
    instance: str,
) -> dict[str, Any]:
    """Pure: the core/v1 Event for one occurrence."""
    return events.build_event(
        involved,
        reason=reason,
        message=message,
        type_=type_,
        reporter=events.Reporter(COMPONENT, REPORTING_CONTROLLER, instance),
    )


class Recorder:
    def __init__(self, kube: interface.Client, *, instance: str) -> None:
        self.kube = kube
        self.instance = instance

    async def record(
        self,
        obj: dict[str, Any],
        *,
        reason: str,
        message: str,
        type_: events.EventType = "Normal",
    ) -> None:
        event = build_event(
            Involved.of(obj), reason=reason, message=message, type_=type_, instance=self.instance
        )
        await events.write(self.kube, event, logger=logger)
