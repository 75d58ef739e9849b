"""The bridge's OpenTelemetry instruments; every Prometheus name, label and alert is listed in
docs/operations.md.

Names follow Prometheus' conventions once the exporter writes them (kontinue/telemetry.py):
base units (seconds, bytes) as a suffix, ``_total`` on counters, and label values from small
fixed sets — phases, trigger sources, CamelCase reasons through :class:`BoundedLabel` — never
a pod or checkpoint name.

Counting restores exactly once per pod: the pod handler calls :meth:`Metrics.pod_seen` on every
reconcile; a pod is counted the first time it shows an outcome, remembered by UID (a bounded
set), and only for outcomes that happened after this process started, so a new leader does not
count again the restores its predecessor already counted (a counter that jumped at start would
read as a burst of restores to ``increase()``).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
from collections.abc import Callable, Iterable

import prometheus_client
from opentelemetry import metrics, trace

from kontinue import keys, restore, telemetry, tracing
from kontinue.models import base, checkpoint, core
from queue_bridge import caches as caches_module
from queue_bridge import kinds, queueing

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Histogram bounds for sub-second work (OpenTelemetry's default starts at 0, 5, 10 s)."""
HANDOVER_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""Seconds from an eviction to its victims' exit and to a restored pod running."""
BYTES_BUCKETS = tuple(float(4**n) * 1024 for n in range(0, 13))
"""1 KiB .. 16 GiB, by powers of four."""

RESTORED = "restored"
COLD_START = "cold_start"
FAILED = "failed"

FINALIZER_REASONS = {
    "result recorded": "ResultRecorded",
    "ended without being a member of any checkpoint": "NotAMember",
    "backstop": "Backstop",
}
"""The pod handler's release reasons (queue_bridge/reconciling.py ``finalizer``) as label values."""

COLD_START_CODES = (
    ("no checkpoint of", "NoCheckpoint"),
    ("no succeeded checkpoint", "NoSucceededCheckpoint"),
    ("no usable checkpoint", "NoUsableCheckpoint"),
    ("records a directory outside lineage", "OutsideLineage"),
    ("not usable", "NotUsable"),
    ("incompatible", "Incompatible"),
    ("failed restores", "TooManyFailedRestores"),
    ("expired", "Expired"),
)
"""Substrings of the ``kontinue.dev/cold-start-reason`` text (the webhook's restore plan) and
the bounded reason each is counted under; the first match wins, anything else is ``Other``."""

_REMEMBERED_PODS = 100_000


def cold_start_code(reason: str) -> str:
    """A bounded CamelCase code for a cold-start reason text (:data:`COLD_START_CODES`)."""
    lowered = reason.lower()
    if "holds member" in lowered:
        return "NoMemberCheckpoint"
    for needle, code in COLD_START_CODES:
        if needle in lowered:
            return code
    return telemetry.BoundedLabel.OTHER


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How an opted-in pod started; ``started``/``when`` bound its restore init container's
    run (a cold start: ``when`` is the pod's creation)."""

    result: str
    reason: str
    when: datetime.datetime | None
    started: datetime.datetime | None = None


def restore_outcome(pod: core.Pod) -> Outcome | None:
    """Pure: the pod's restore outcome, or ``None`` while undecided.

    ``cold_start`` when the webhook annotated why it started cold; ``restored`` when the
    restore init container exited 0, ``failed`` when it exited with a restore failure.
    """
    meta = pod.metadata
    reason = meta.annotation(keys.COLD_START_REASON_ANNOTATION)
    if reason:
        return Outcome(COLD_START, cold_start_code(reason), meta.creation_timestamp)
    if not meta.annotation(keys.RESTORE_FROM_ANNOTATION):
        return None
    for status in (pod.status.init_container_statuses if pod.status else None) or []:
        if status.name != keys.RESTORE_INIT_CONTAINER:
            continue
        for state in (status.state, status.last_state):
            done = state.terminated if state is not None else None
            if done is None:
                continue
            if done.exit_code == 0:
                return Outcome(RESTORED, "Restored", done.finished_at, done.started_at)
            if restore.failed(done.exit_code, pod_deleting=meta.deletion_timestamp is not None):
                return Outcome(FAILED, f"Exit{done.exit_code}", done.finished_at, done.started_at)
    return None


def queue_of(pod: core.Pod) -> str:
    """The queue a pod ran under: its ClusterQueue (Kueue stamps it at admission), else its
    LocalQueue, else its Volcano queue; ``""`` when none is known."""
    meta = pod.metadata
    for label in (keys.KUEUE_CLUSTER_QUEUE_LABEL, keys.KUEUE_QUEUE_NAME_LABEL):
        if value := (meta.labels or {}).get(label):
            return value
    return meta.annotation(keys.VOLCANO_POD_QUEUE_ANNOTATION) or ""


def running_since(pod: core.Pod) -> datetime.datetime | None:
    """When the pod's first workload container started running, if it is running."""
    for status in (pod.status.container_statuses if pod.status else None) or []:
        running = status.state.running if status.state is not None else None
        if running and running.get("startedAt"):
            return _time(running["startedAt"])
    return None


def _aware(value: datetime.datetime) -> datetime.datetime:
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)


def _time(value: object) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if isinstance(value, str):
        try:
            return base.parse_time(value)
        except ValueError:
            return None
    return None


class Metrics:
    """The bridge's instruments (Prometheus names in docs/operations.md)."""

    def __init__(
        self,
        meter: metrics.Meter,
        caches: caches_module.Caches,
        queue: queueing.WorkQueue[kinds.Key],
        leading: Callable[[], bool],
        *,
        clock: Callable[[], datetime.datetime] | None = None,
        tracer: trace.Tracer | None = None,
        registry: prometheus_client.CollectorRegistry | None = None,
    ) -> None:
        """``registry``: where ``/metrics`` reads the time per key from (it is counted here, not
        by the meter: :class:`kontinue.telemetry.Histogram`); without one it is not exported."""
        self._clock = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self.tracer = tracer or trace.NoOpTracer()
        """Spans of one eviction's trace (kontinue/tracing.py): the creation's in
        queue_bridge/handlers/creating.py, the saves' and restores' here."""
        self.started = self._clock().replace(microsecond=0)
        """Outcomes before this (second resolution, as the kubelet's times) are not counted."""
        self._counted: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._running: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._eviction_reasons = telemetry.BoundedLabel()
        self._failure_kinds = telemetry.BoundedLabel()
        self._queues = _Names(limit=100)

        def by_phase(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            counts = collections.Counter(cp.status.phase.value for cp in caches.checkpoints.items())
            for phase in checkpoint.Phase:
                yield metrics.Observation(counts.get(phase.value, 0), {"phase": phase.value})

        meter.create_observable_gauge(
            "kontinue.bridge.checkpoints",
            callbacks=[by_phase],
            unit="{checkpoint}",
            description="Checkpoints in the cluster, by phase (this replica's cache)",
        )

        def leader(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            yield metrics.Observation(1 if leading() else 0)

        meter.create_observable_gauge(
            "kontinue.bridge.leader",
            callbacks=[leader],
            unit="1",
            description="1 while this replica holds the Lease and works, else 0",
        )

        def depth(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            yield metrics.Observation(len(queue))

        meter.create_observable_gauge(
            "kontinue.bridge.queue.depth",
            callbacks=[depth],
            unit="{key}",
            description="Keys waiting in the work queue",
        )
        for name, read, what in (
            ("adds", lambda: queue.added, "Keys newly added to the work queue"),
            ("drops", lambda: queue.dropped, "Keys refused because the work queue was full"),
            ("retries", lambda: queue.retried, "Keys re-queued with backoff after a failure"),
        ):
            meter.create_observable_counter(
                f"kontinue.bridge.queue.{name}",
                callbacks=[_reading(read)],
                unit="{key}",
                description=what,
            )
        self.transitions = meter.create_counter(
            "kontinue.bridge.checkpoint.transitions",
            unit="{checkpoint}",
            description="Checkpoints created (phase Pending) or moved to a phase, by phase",
        )
        self.evictions = meter.create_counter(
            "kontinue.bridge.evictions",
            unit="{eviction}",
            description="Evictions of opted-in workloads that started a Checkpoint, by source "
            "and reason",
        )
        self.reaction = meter.create_histogram(
            "kontinue.bridge.reaction",
            unit="s",
            description="From the eviction's condition time (1 s resolution) to its Checkpoint",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.save_duration = meter.create_histogram(
            "kontinue.bridge.member.save.duration",
            unit="s",
            description="Per member: told to stop (deletion) to the container's exit, by result",
            explicit_bucket_boundaries_advisory=HANDOVER_BUCKETS,
        )
        self.save_size = meter.create_histogram(
            "kontinue.bridge.member.save.size",
            unit="By",
            description="Per saved member: bytes its termination message reports",
            explicit_bucket_boundaries_advisory=BYTES_BUCKETS,
        )
        self.handover = meter.create_histogram(
            "kontinue.bridge.handover",
            unit="s",
            description="From the eviction (trigger time) to each stage: victims_exited "
            "(Checkpoint terminal), restored_running (a pod restored from it running)",
            explicit_bucket_boundaries_advisory=HANDOVER_BUCKETS,
        )
        self.restores = meter.create_counter(
            "kontinue.restores",
            unit="{pod}",
            description="Opted-in pods by how they started: restored, cold_start or failed "
            "(restore init container), by reason and queue",
        )
        self.errors = meter.create_counter(
            "kontinue.bridge.reconcile.errors",
            unit="{error}",
            description="Reconciles that failed (retried with backoff), by kind and error",
        )
        # recorded for every key (~18 per eviction): counted here, read when Prometheus scrapes
        self.reconciles = telemetry.Histogram(
            "kontinue_bridge_reconcile_duration_seconds",
            description="Time spent handling one key, by kind",
            label="kind",
            bounds=SECONDS_BUCKETS,
        )
        if registry is not None:
            self.reconciles.register(registry)
        self.finalizers = meter.create_counter(
            "kontinue.bridge.finalizers.released",
            unit="{pod}",
            description="Pod finalizers removed, by reason",
        )

    # -- calls from the handlers ---------------------------------------------------------------

    def checkpoint_created(self, trigger: checkpoint.Trigger, latency: float) -> None:
        source = trigger.source.value
        self.evictions.add(1, {"source": source, "reason": self._eviction_reasons(trigger.reason)})
        self.reaction.record(max(0.0, latency), {"source": source})
        self.transitions.add(1, {"phase": checkpoint.Phase.PENDING.value})

    def reconcile_failed(self, kind: str, exc: BaseException) -> None:
        self.errors.add(1, {"kind": kind, "error": self._failure_kinds(type(exc).__name__)})

    def finalizer_released(self, reason: str) -> None:
        why = reason.split(":")[0].split(" in ")[0]
        self.finalizers.add(1, {"reason": FINALIZER_REASONS.get(why, telemetry.BoundedLabel.OTHER)})

    def checkpoint_finished(
        self,
        cp: checkpoint.Checkpoint,
        pods: Iterable[core.Pod],
        status: checkpoint.CheckpointStatus,
    ) -> None:
        """A set reached Succeeded or Failed: each member's save, and the victims' handover."""
        by_name = {p.name: p for p in pods}
        for result in status.members:
            finished = _time(result.finished_at)
            told = _told_at(by_name.get(result.pod_name))
            outcome = {"result": result.state.value}
            if finished is not None and told is not None:
                self.save_duration.record(max(0.0, (finished - told).total_seconds()), outcome)
            if result.state is checkpoint.MemberState.SAVED and result.bytes is not None:
                self.save_size.record(result.bytes)
        ends = [t for r in status.members if (t := _time(r.finished_at)) is not None]
        if ends:
            seconds = (max(ends) - _aware(cp.spec.trigger.time)).total_seconds()
            self.handover.record(max(0.0, seconds), {"stage": "victims_exited"})
        self._save_spans(cp, by_name, status, max(ends) if ends else None)

    def _save_spans(
        self,
        cp: checkpoint.Checkpoint,
        pods: dict[str, core.Pod],
        status: checkpoint.CheckpointStatus,
        end: datetime.datetime | None,
    ) -> None:
        cause = tracing.parent(cp.metadata.annotation(keys.TRACEPARENT_ANNOTATION))
        failed = status.phase is checkpoint.Phase.FAILED
        saved = tracing.record(
            self.tracer,
            tracing.CHECKPOINT_SAVE,
            cause=cause,
            start=cp.metadata.creation_timestamp,
            end=end,
            attributes={
                "kontinue.checkpoint": cp.name,
                "kontinue.checkpoint.members": len(cp.spec.members),
                "kontinue.checkpoint.phase": status.phase.value,
                "k8s.namespace.name": cp.metadata.namespace or "",
            },
            error=status.message if failed else None,
        )
        inside = trace.set_span_in_context(saved)
        for result in status.members:
            attributes: dict[str, str | int] = {
                "kontinue.checkpoint": cp.name,
                "k8s.pod.name": result.pod_name,
                "kontinue.member.state": result.state.value,
            }
            if result.bytes is not None:
                attributes["kontinue.member.bytes"] = result.bytes
            if result.exit_code is not None:
                attributes["kontinue.member.exit_code"] = result.exit_code
            tracing.record(
                self.tracer,
                tracing.MEMBER_SAVE,
                cause=inside,
                start=_told_at(pods.get(result.pod_name)) or _time(result.started_at),
                end=_time(result.finished_at),
                attributes=attributes,
                error=None if result.state.good else result.reason,
            )

    def _restore_span(self, pod: core.Pod, source: checkpoint.Checkpoint, outcome: Outcome) -> None:
        tracing.record(
            self.tracer,
            tracing.RESTORE,
            cause=tracing.parent(source.metadata.annotation(keys.TRACEPARENT_ANNOTATION)),
            start=_time(outcome.started),
            end=_time(outcome.when),
            attributes={
                "kontinue.checkpoint": source.name,
                "kontinue.checkpoint.members": len(source.spec.members),
                "k8s.pod.name": pod.name,
                "k8s.namespace.name": pod.namespace,
                "kontinue.restore.result": outcome.result,
            },
            error=outcome.reason if outcome.result == FAILED else None,
        )

    def pod_seen(
        self, pod: core.Pod, restored_from: checkpoint.Checkpoint | None
    ) -> tuple[str, str] | None:
        """Count the pod's restore outcome once (module doc); ``(result, reason)`` when this
        call counted it, so the caller can tell the user (Events) exactly once too."""
        uid = pod.metadata.uid or ""
        counted = None
        if uid and uid not in self._counted:
            outcome = restore_outcome(pod)
            if outcome is not None:
                _remember(self._counted, uid)
                if outcome.when is None or _aware(outcome.when) >= self.started:
                    queue = self._queues(queue_of(pod) or "none")
                    labels = {"result": outcome.result, "reason": outcome.reason, "queue": queue}
                    self.restores.add(1, labels)
                    counted = (outcome.result, outcome.reason)
                    if restored_from is not None and outcome.result != COLD_START:
                        self._restore_span(pod, restored_from, outcome)
        if restored_from is not None and uid and uid not in self._running:
            since = running_since(pod)
            if since is not None:
                _remember(self._running, uid)
                if since >= self.started:
                    evicted = _aware(restored_from.spec.trigger.time)
                    seconds = (since - evicted).total_seconds()
                    self.handover.record(max(0.0, seconds), {"stage": "restored_running"})
        return counted


def _told_at(pod: core.Pod | None) -> datetime.datetime | None:
    """When the kubelet told the pod to stop: its deletion timestamp minus the grace period."""
    if pod is None or pod.metadata.deletion_timestamp is None:
        return None
    grace = pod.metadata.deletion_grace_period_seconds
    if grace is None:
        return None
    return _aware(pod.metadata.deletion_timestamp) - datetime.timedelta(seconds=grace)


class _Names:
    """Queue names as a label: the first ``limit`` distinct ones, then ``Other`` (a cluster
    has tens of queues; the cap only guards against a pathological one)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()

    def __call__(self, name: str) -> str:
        if name in self._seen:
            return name
        if len(self._seen) >= self.limit:
            return telemetry.BoundedLabel.OTHER
        self._seen.add(name)
        return name


def _remember(seen: collections.OrderedDict[str, None], uid: str) -> None:
    seen[uid] = None
    while len(seen) > _REMEMBERED_PODS:
        seen.popitem(last=False)


def _reading(
    read: Callable[[], int],
) -> Callable[[metrics.CallbackOptions], Iterable[metrics.Observation]]:
    def callback(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        yield metrics.Observation(read())

    return callback
