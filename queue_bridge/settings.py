"""The bridge's configuration, read once from the environment at start.

Every value has a default that matches manifests/bridge/ (Lease ``kontinue-bridge`` in the
namespace the downward API gives, health on 8081), so the Deployment sets only what it must.
A bad value fails at start with the variable named. No variable name here is one a kubelet's
Service links can produce (see :mod:`webhook.settings`): ports are ``*_PORT_NUMBER``.

Timing knobs, and why they exist:

- ``lease_*``: leader election (client-go defaults scaled down: 15 s lease, 5 s renew, 10 s
  deadline). A takeover after a crash costs at most one lease duration; a clean shutdown releases
  the Lease so the standby takes over within one ``retry`` period.
- ``finalizer_margin_seconds``: how long after a pod's grace period ended (its
  ``deletionTimestamp``) the bridge still waits for the kubelet's final status before recording
  the member as failed and removing the finalizer. Twice this margin is the absolute backstop:
  past it the finalizer goes whatever else failed, so no pod is ever stuck Terminating.
- ``settle_seconds``: a pod that ended without being a member of any Checkpoint keeps its
  finalizer this long after its container finished, so an eviction whose Workload update is
  still in flight to the bridge's cache can still claim it.
  It is also the window that groups pod-level disruptions of one lineage (same reason) into
  one Checkpoint (:mod:`queue_bridge.disruptions`).
- ``pending_timeout_seconds``: a member never told to stop (no ``deletionTimestamp``) this long
  after the eviction is recorded as failed, so a Checkpoint cannot stay ``Pending`` forever.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping

KUEUE = "kueue"
VOLCANO = "volcano"
QUEUE_SYSTEMS = (KUEUE, VOLCANO)


@dataclasses.dataclass(frozen=True)
class Settings:
    namespace: str = "kontinue-system"
    identity: str = dataclasses.field(default_factory=socket.gethostname)
    """This replica's name in the Lease (the pod name in a cluster)."""
    lease_name: str = "kontinue-bridge"
    lease_duration_seconds: int = 15
    lease_renew_seconds: float = 5.0
    lease_deadline_seconds: float = 10.0
    health_host: str = "0.0.0.0"
    health_port: int = 8081
    metrics_port: int = 8080
    """``/metrics`` (also served on the health port); 0 turns the second listener off."""
    workers: int = 4
    max_queued_keys: int = 200_000
    """Bound on distinct waiting keys (a key costs ~100 bytes). Sweeps add keys in batches as
    the queue drains, so a bound below the number of keys only slows them (queueing.py)."""
    resync_seconds: float = 300.0
    finalizer_margin_seconds: float = 30.0
    settle_seconds: float = 5.0
    pending_timeout_seconds: float = 600.0
    admission_check: bool = True
    """Run the AdmissionCheck controller for checks with controllerName ``kontinue.dev/restore``."""
    adopt_unlabelled_pods: bool = True
    """Once per leadership, label pods plumbed before the webhook labelled them
    (``KONTINUE_ADOPT_UNLABELLED_PODS``; :mod:`queue_bridge.adoption`)."""
    queue_systems: tuple[str, ...] = (KUEUE,)
    """Queue systems whose objects to watch (``KONTINUE_QUEUE_SYSTEMS``, comma-separated).

    Name only systems whose CRDs are installed (the overlays set it: ``kueue``, ``volcano`` or
    ``kueue,volcano``): a watch of a CRD that is not installed never syncs, and the bridge
    neither turns ready nor campaigns for the Lease until every cache synced. Without ``kueue``
    the Kueue caches stand empty (:meth:`kontinue.kube.watching.WatchCache.serve_empty`).
    """

    def __post_init__(self) -> None:
        if not self.lease_renew_seconds < self.lease_deadline_seconds < self.lease_duration_seconds:
            raise ValueError(
                "need KONTINUE_LEASE_RENEW_SECONDS < KONTINUE_LEASE_DEADLINE_SECONDS < "
                f"KONTINUE_LEASE_DURATION_SECONDS, got {self.lease_renew_seconds}, "
                f"{self.lease_deadline_seconds}, {self.lease_duration_seconds}"
            )
        if self.workers < 1:
            raise ValueError(f"KONTINUE_BRIDGE_WORKERS: must be >= 1, got {self.workers}")
        if self.max_queued_keys < 1:
            raise ValueError(f"KONTINUE_BRIDGE_MAX_KEYS: must be >= 1, got {self.max_queued_keys}")
        if not 0 < self.health_port < 65536:
            raise ValueError(
                f"KONTINUE_HEALTH_PORT_NUMBER: {self.health_port} is not a port number"
            )
        if not 0 <= self.metrics_port < 65536:
            raise ValueError(
                f"KONTINUE_METRICS_PORT_NUMBER: {self.metrics_port} is not a port number"
            )
        for name, value in (
            ("KONTINUE_RESYNC_SECONDS", self.resync_seconds),
            ("KONTINUE_FINALIZER_MARGIN_SECONDS", self.finalizer_margin_seconds),
            ("KONTINUE_PENDING_TIMEOUT_SECONDS", self.pending_timeout_seconds),
        ):
            if not value > 0:
                raise ValueError(f"{name}: must be > 0, got {value}")
        if unknown := sorted(set(self.queue_systems) - set(QUEUE_SYSTEMS)):
            raise ValueError(
                f"KONTINUE_QUEUE_SYSTEMS: unknown {unknown}; use {', '.join(QUEUE_SYSTEMS)}"
            )
        if not self.queue_systems:
            raise ValueError(
                f"KONTINUE_QUEUE_SYSTEMS: name at least one of {', '.join(QUEUE_SYSTEMS)}"
            )
        if self.settle_seconds < 0:
            raise ValueError(f"KONTINUE_SETTLE_SECONDS: must be >= 0, got {self.settle_seconds}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for variable, field in (
            ("KONTINUE_NAMESPACE", "namespace"),
            ("KONTINUE_POD_NAME", "identity"),
            ("KONTINUE_LEASE_NAME", "lease_name"),
            ("KONTINUE_HEALTH_HOST", "health_host"),
        ):
            if env.get(variable):
                values[field] = env[variable]
        for variable, field in (
            ("KONTINUE_LEASE_DURATION_SECONDS", "lease_duration_seconds"),
            ("KONTINUE_HEALTH_PORT_NUMBER", "health_port"),
            ("KONTINUE_METRICS_PORT_NUMBER", "metrics_port"),
            ("KONTINUE_BRIDGE_WORKERS", "workers"),
            ("KONTINUE_BRIDGE_MAX_KEYS", "max_queued_keys"),
        ):
            if raw := env.get(variable):
                if not raw.strip().isdigit():
                    raise ValueError(f"{variable}: {raw!r} is not a whole number")
                values[field] = int(raw)
        for variable, field in (
            ("KONTINUE_LEASE_RENEW_SECONDS", "lease_renew_seconds"),
            ("KONTINUE_LEASE_DEADLINE_SECONDS", "lease_deadline_seconds"),
            ("KONTINUE_RESYNC_SECONDS", "resync_seconds"),
            ("KONTINUE_FINALIZER_MARGIN_SECONDS", "finalizer_margin_seconds"),
            ("KONTINUE_SETTLE_SECONDS", "settle_seconds"),
            ("KONTINUE_PENDING_TIMEOUT_SECONDS", "pending_timeout_seconds"),
        ):
            if raw := env.get(variable):
                try:
                    values[field] = float(raw)
                except ValueError:
                    raise ValueError(f"{variable}: {raw!r} is not a number") from None
        for variable, field in (
            ("KONTINUE_ADMISSION_CHECK", "admission_check"),
            ("KONTINUE_ADOPT_UNLABELLED_PODS", "adopt_unlabelled_pods"),
        ):
            if raw := env.get(variable):
                if raw.lower() not in ("true", "false"):
                    raise ValueError(f"{variable}: {raw!r} is not true or false")
                values[field] = raw.lower() == "true"
        if (raw := env.get("KONTINUE_QUEUE_SYSTEMS")) is not None:
            values["queue_systems"] = tuple(s.strip() for s in raw.split(",") if s.strip())
        return cls(**values)  # type: ignore[arg-type]
