"""A pod's *member identity*: its place in its workload, the same in every incarnation.

A Checkpoint set has one member per evicted pod, and a new pod restores only the member whose
identity is its own (docs/api.md, "Member identity"). Identity never comes from pod names, which
change with every incarnation, but from what the workload's controller stamps on each pod:

========================  =======================================  ============================
workload                  identity string                          read from
========================  =======================================  ============================
Indexed batch Job         ``index=<completion index>``             ``batch.kubernetes.io/job-
                                                                   completion-index`` annotation
                                                                   or label
JobSet                    ``replicatedJob=<name>,jobIndex=<i>,``   ``jobset.sigs.k8s.io/
                          ``index=<completion index>``             replicatedjob-name``, ``job-
                                                                   index`` (label or annotation)
Volcano Job (vcjob)       ``task=<task name>,index=<task index>``  ``volcano.sh/task-spec``,
                                                                   ``volcano.sh/task-index``
anything else             ``index=0``                              (single-pod lineage)
========================  =======================================  ============================

Upstream sources of the keys: the job controller writes the completion index as an annotation
and, since 1.28, a label of the same name (kubernetes/kubernetes
pkg/controller/job/indexed_job_utils.go ``addCompletionIndexAnnotation``,
``addCompletionIndexLabel``); the JobSet controller labels *and* annotates every child Job and
pod template with its replicated Job and job index (kubernetes-sigs/jobset
pkg/controllers/jobset_controller.go ``labelAndAnnotateObject``; keys in
api/jobset/v1alpha2/jobset_types.go); the Volcano job controller stamps ``TaskSpecKey`` and
``TaskIndex`` on its pods (volcano-sh/apis pkg/apis/batch/v1alpha1/labels.go).

A NonIndexed Job with ``parallelism > 1`` has no stable identities: its pods are interchangeable
and all get ``index=0``; such a lineage can only share state (docs/api.md, "NonIndexed Jobs").

The string is what the webhook injects as ``KONTINUE_MEMBER``, what a workload records as
``"member"`` in its checkpoint manifest, and what ``Checkpoint.spec.members[].identity`` holds;
the restore program refuses a directory whose manifest names another identity.

Pure: one function of labels and annotations, shared by the webhook (at pod CREATE) and the
queue bridge (when it records a set's members).
"""

from __future__ import annotations

from collections.abc import Mapping

from kontinue import keys
from kontinue.models import checkpoint

SINGLE = "index=0"
"""The identity of a pod with no place in a multi-pod workload (and of every NonIndexed pod)."""

MAX_LENGTH = 253


def _number(raw: str, *, key: str) -> int:
    # ``str.isdigit`` accepts "²" and other digits ``int`` refuses: ASCII only.
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise ValueError(f"{key}={raw!r} is not a non-negative integer")
    return int(raw)


def _read(labels: Mapping[str, str], annotations: Mapping[str, str], key: str) -> str | None:
    value = labels.get(key)
    if value is None:
        value = annotations.get(key)
    return value


def _name(raw: str, *, key: str) -> str:
    if not raw or len(raw) > 63 or any(c in raw for c in ",= \t\n/"):
        raise ValueError(f"{key}={raw!r} is not a name")
    return raw


def of(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None) -> str:
    """The member identity of a pod from its labels and annotations (table in the module doc).

    Raises :class:`ValueError` naming the key when a key is present but malformed (an index that
    is not a plain decimal number, a name with ``,``/``=``): such a pod cannot be given an
    identity, and guessing one could hand it another member's state.
    """
    labels = labels or {}
    annotations = annotations or {}
    completion_raw = _read(labels, annotations, keys.JOB_COMPLETION_INDEX_ANNOTATION)
    completion = (
        _number(completion_raw, key=keys.JOB_COMPLETION_INDEX_ANNOTATION)
        if completion_raw is not None
        else None
    )
    if _read(labels, annotations, keys.JOBSET_NAME_LABEL):
        replicated = _read(labels, annotations, keys.JOBSET_REPLICATED_JOB_LABEL)
        job_index = _read(labels, annotations, keys.JOBSET_JOB_INDEX_LABEL)
        if replicated is None or job_index is None:
            missing = keys.JOBSET_REPLICATED_JOB_LABEL if replicated is None else "job-index"
            raise ValueError(f"JobSet pod without {missing}")
        name = _name(replicated, key=keys.JOBSET_REPLICATED_JOB_LABEL)
        number = _number(job_index, key=keys.JOBSET_JOB_INDEX_LABEL)
        return f"replicatedJob={name},jobIndex={number},index={completion or 0}"
    task = _read(labels, annotations, keys.VOLCANO_TASK_SPEC_KEY)
    if task is not None:
        raw = _read(labels, annotations, keys.VOLCANO_TASK_INDEX_KEY)
        if raw is None:
            raise ValueError(f"Volcano pod of task {task!r} without {keys.VOLCANO_TASK_INDEX_KEY}")
        name = _name(task, key=keys.VOLCANO_TASK_SPEC_KEY)
        return f"task={name},index={_number(raw, key=keys.VOLCANO_TASK_INDEX_KEY)}"
    if completion is not None:
        return f"index={completion}"
    return SINGLE


def of_member(member: checkpoint.Member) -> str:
    """A recorded member's identity; members recorded before identities existed have only
    ``index`` (the completion index, or the position by pod name)."""
    return member.identity or f"index={member.index}"


def sort_key(identity: str) -> tuple[tuple[str, int, str], ...]:
    """Natural order: ``index=2`` before ``index=10``; the first identity is *rank 0*."""
    parts: list[tuple[str, int, str]] = []
    for part in identity.split(","):
        key, _, value = part.partition("=")
        number = int(value) if value.isascii() and value.isdigit() else -1
        parts.append((key, number, value))
    return tuple(parts)


def index_of(identity: str) -> int:
    """The trailing ``index=<n>`` of an identity (the legacy ``spec.members[].index``)."""
    _, _, value = identity.rpartition("index=")
    return int(value) if value.isascii() and value.isdigit() else 0
