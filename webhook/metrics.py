"""The webhook's instruments and the bounded ``decision`` each admission is counted under.

Prometheus names (kontinue/telemetry.py writes them; all listed in docs/operations.md):

- ``kontinue_webhook_admission_requests_total{path, decision, outcome}``: ``path`` ``/mutate``
  or ``/validate``; ``decision`` one of :data:`DECISIONS`; ``outcome`` ``allowed``,
  ``denied`` or ``error`` (HTTP 400/500: the apiserver then applies the failurePolicy);
- ``kontinue_webhook_admission_duration_seconds{path}``: body read to answer encoded;
- ``kontinue_webhook_certificate_expiry_timestamp_seconds``: ``notAfter`` of the serving
  certificate (Unix time), absent until one is loaded.

``decision`` for ``/mutate`` comes from the rules (:class:`webhook.review.Verdict`
``decision``); a pod's is read off its JSON Patch, the exact thing the apiserver applies:
``restore`` when it sets ``kontinue.dev/restore-from``, ``cold_start`` when it sets
``kontinue.dev/cold-start-reason``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import prometheus_client
from opentelemetry import metrics

from kontinue import keys, telemetry

PLUMBED = "plumbed"
RESTORE = "restore"
COLD_START = "cold_start"
NOT_OPTED_IN = "not_opted_in"
NOT_PLUMBED = "not_plumbed"
CLAIM_MISSING = "claim_missing"
"""Opted in, left untouched: the namespace lacks the policy's PersistentVolumeClaim."""
DENIED = "denied"
ALLOWED = "allowed"
ERROR = "error"
DECISIONS = (
    PLUMBED,
    RESTORE,
    COLD_START,
    NOT_OPTED_IN,
    NOT_PLUMBED,
    CLAIM_MISSING,
    DENIED,
    ALLOWED,
    ERROR,
)
"""``allowed``: a request no mutating rule is about, or that validation passed."""

SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Admission answers take milliseconds; the apiserver gives up at the webhook's timeout."""


def annotation_set(patch: Sequence[dict[str, Any]], key: str) -> str | None:
    """The value a JSON Patch gives annotation ``key`` (whole-map or per-key op), if any."""
    pointer = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
    for op in patch:
        if op.get("op") not in ("add", "replace"):
            continue
        if op.get("path") == pointer:
            return str(op.get("value"))
        if op.get("path") == "/metadata/annotations" and isinstance(op.get("value"), dict):
            value = op["value"].get(key)
            if value is not None:
                return str(value)
    return None


def pod_decision(patch: Sequence[dict[str, Any]]) -> str:
    """``restore``, ``cold_start`` or ``plumbed`` for a pod the rules patched."""
    if annotation_set(patch, keys.RESTORE_FROM_ANNOTATION):
        return RESTORE
    if annotation_set(patch, keys.COLD_START_REASON_ANNOTATION) is not None:
        return COLD_START
    return PLUMBED


def decision_of(*, allowed: bool | None, decided: str) -> str:
    """The bounded label: ``error`` without an answer, ``denied``, else the rules' decision."""
    if allowed is None:
        return ERROR
    if not allowed:
        return DENIED
    return decided if decided in DECISIONS else ALLOWED


def not_after(cert_pem: bytes) -> float:
    """``notAfter`` of the first certificate of a PEM chain, as Unix time."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.not_valid_after_utc.replace(tzinfo=datetime.UTC).timestamp()


DURATION = "kontinue_webhook_admission_duration_seconds"
DURATION_HELP = "From the request body read to the answer encoded, by path"


def durations(bounds: Sequence[float] = SECONDS_BUCKETS) -> telemetry.Histogram:
    """``kontinue_webhook_admission_duration_seconds{path}``, aggregated here and written by
    the Prometheus registry when it is scraped (:class:`kontinue.telemetry.Histogram`).

    The OpenTelemetry histogram's ``record`` cost each admission ~5 µs of CPU in a loop (its
    attribute set, lock and aggregation per reader); this is a ``bisect`` and two additions.
    The exposition is the one the OpenTelemetry Prometheus exporter wrote for the histogram
    (``opentelemetry-exporter-prometheus`` ``_convert_buckets``: the same name, HELP, ``le``
    values and cumulative counts, the paths in the order first seen; nothing before the first
    observation), which tests/unit/webhook/test_durations.py checks against it."""
    return telemetry.Histogram(
        DURATION,
        description=DURATION_HELP,
        label="path",
        bounds=bounds,
        written_empty=False,
        ordered=False,
    )


class Metrics:
    """The webhook's instruments. With ``registry`` (the one ``meter``'s Prometheus reader
    writes into, ``kontinue.telemetry.setup``), the latency histogram is a :func:`durations`
    collector in it; without, an OpenTelemetry histogram on ``meter`` (same exposition)."""

    def __init__(
        self,
        meter: metrics.Meter,
        *,
        expiry: Callable[[], float | None] = lambda: None,
        registry: prometheus_client.CollectorRegistry | None = None,
    ) -> None:
        # Counted here and read by the meter when it collects (an observable counter: the same
        # Prometheus counter as ``create_counter`` gives). A synchronous counter's ``add`` cost
        # each admission ~7 µs of CPU in the OpenTelemetry SDK; a dict increment costs ~0.1 µs.
        self.counts: dict[tuple[str, str, str], int] = {}

        def read_counts(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            for (path, decision, outcome), count in list(self.counts.items()):
                yield metrics.Observation(
                    count, {"path": path, "decision": decision, "outcome": outcome}
                )

        meter.create_observable_counter(
            "kontinue.webhook.admission.requests",
            callbacks=[read_counts],
            unit="{request}",
            description="AdmissionReviews answered, by path, decision and outcome",
        )
        self.durations: telemetry.Histogram | None = None
        self.duration: metrics.Histogram | None = None
        if registry is not None:
            self.durations = durations()
            self.durations.register(registry)
        else:
            self.duration = meter.create_histogram(
                "kontinue.webhook.admission.duration",
                unit="s",
                description=DURATION_HELP,
                explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
            )

        def read_expiry(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            value = expiry()
            if value is not None:
                yield metrics.Observation(value)

        meter.create_observable_gauge(
            "kontinue.webhook.certificate.expiry_timestamp",
            callbacks=[read_expiry],
            unit="s",
            description="notAfter of the serving certificate, Unix time",
        )

    def answered(
        self, path: str, *, allowed: bool | None, decided: str, status: int, seconds: float
    ) -> None:
        outcome = "error" if status >= 400 else ("allowed" if allowed else "denied")
        decision = decision_of(allowed=allowed if status < 400 else None, decided=decided)
        key = (path, decision, outcome)
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.durations is not None:
            self.durations.observe(path, seconds)
        else:
            assert self.duration is not None
            self.duration.record(seconds, {"path": path})


def owner_of(obj: dict[str, Any] | None, namespace: str) -> dict[str, Any] | None:
    """The controller owner of an object under admission, as an Event's involved object."""
    meta = (obj or {}).get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid") and ref.get("name"):
            return {
                "apiVersion": ref.get("apiVersion", ""),
                "kind": ref.get("kind", ""),
                "metadata": {"name": ref["name"], "namespace": namespace, "uid": ref["uid"]},
            }
    return None
