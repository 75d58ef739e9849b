"""Deterministic ``Checkpoint`` names: one name per (evicted object, eviction).

Every sighting of one eviction — Kueue's two suspend updates, a repeated watch event, a relist
after a bridge restart, the other replica after a leader change — yields the same name, so a
second create is a harmless ``AlreadyExists`` rather than a second checkpoint.

Shape: ``<owner name, sanitised and truncated>-<10 hex digits>``, a DNS-1123 label (lowercase
alphanumerics and ``-``, alphanumeric at both ends, at most 63 characters) so it is valid as an
object name *and* as a label value. The digest covers the evicted object's UID (the Kueue
Workload's; for per-pod sources, the lineage owner's) and the eviction time in RFC 3339 UTC with
seconds, the precision Kubernetes stores. 40 bits make an accidental clash within one owner's
evictions negligible; the owner name is only there for people.
"""

from __future__ import annotations

import datetime
import hashlib
import re

from kontinue.models import checkpoint

MAX_LENGTH = 63
DIGEST_LENGTH = 10
_INVALID = re.compile(r"[^a-z0-9-]+")


def _rfc3339(value: datetime.datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def checkpoint_name(
    lineage: checkpoint.Lineage,
    *,
    trigger: checkpoint.Trigger,
    workload_uid: str | None = None,
) -> str:
    """The ``Checkpoint`` name for the eviction ``trigger`` of ``lineage``'s workload.

    ``workload_uid``: the UID of the object the eviction happened to (a Kueue Workload, a
    Volcano PodGroup); without one, the lineage owner's UID. Sub-second parts of the trigger
    time are ignored, as Kubernetes truncates condition times to seconds.
    """
    uid = workload_uid or lineage.owner_uid
    digest = hashlib.sha256(f"{uid}/{_rfc3339(trigger.time)}".encode()).hexdigest()
    digest = digest[:DIGEST_LENGTH]
    prefix = _INVALID.sub("-", lineage.owner_name.lower()).strip("-")
    prefix = prefix[: MAX_LENGTH - DIGEST_LENGTH - 1].rstrip("-")
    return f"{prefix}-{digest}" if prefix else f"checkpoint-{digest}"
