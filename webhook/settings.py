"""The webhook's configuration, read once from the environment at start.

Every value has a default matching manifests/webhook/, so the Deployment sets only what the
downward API knows (namespace) and the image. Bad values fail at start with the variable named.

No variable name here is one a kubelet's Service links can produce (``<SERVICE>_PORT``,
``<SERVICE>_SERVICE_HOST``, ``<SERVICE>_SERVICE_PORT[_<NAME>]``, ``<SERVICE>_PORT_<N>_<PROTO>[_…]``,
kubernetes/kubernetes ``pkg/kubelet/envvars/envvars.go``): the Service ``kontinue-webhook``
yields ``KONTINUE_WEBHOOK_PORT=tcp://10.96.x.x:443``, which is why the listening port is
``KONTINUE_WEBHOOK_PORT_NUMBER``. The Deployments also turn service links off.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import os
import re
from collections.abc import Mapping

from webhook import limits as limits_module


class CertMode(enum.StrEnum):
    SELF = "self"
    """Generate a CA and serving certificate into a Secret; patch caBundle ourselves."""
    FILES = "files"
    """Serve the certificate mounted at ``cert_dir`` (cert-manager injects caBundle)."""


WEBHOOK_TIMEOUT_SECONDS = 5
"""``timeoutSeconds`` of every webhook in manifests/webhook/webhooks.yaml."""
MAX_LIVE_READ_SECONDS = 3.0
"""The live read's bound must leave the rest of the review (and the network) time within
``WEBHOOK_TIMEOUT_SECONDS``."""


@dataclasses.dataclass(frozen=True)
class Settings:
    namespace: str = "kontinue-system"
    service_account: str = "kontinue-webhook"
    service: str = "kontinue-webhook"
    secret: str = "kontinue-webhook-tls"
    mutating_configuration: str = "kontinue-webhook"
    validating_configuration: str = "kontinue-webhook"
    image: str = "ghcr.io/kontinue/kontinue:0.1.0"
    host: str = "0.0.0.0"
    port: int = 9443
    cert_mode: CertMode = CertMode.SELF
    cert_dir: str = "/tmp/kontinue-webhook-certs"
    cert_poll_seconds: float = 10.0
    queue_systems: tuple[str, ...] = ("kueue", "volcano")
    """Which queue systems' objects to watch (a CRD that is not installed never syncs)."""
    drain_seconds: float = 5.0
    """After SIGTERM: answer /readyz 503 and keep serving this long before closing."""
    trusted_users: tuple[str, ...] = ()
    """Extra usernames allowed to write Kontinue's reserved pod keys (besides our own SAs)."""
    extra_sans: tuple[str, ...] = ()
    """Extra DNS names and IP addresses for the self-managed serving certificate (a webhook
    registered by URL: hosted control planes, local clusters)."""
    live_read_seconds: float = 1.0
    """How long the live read of a plumbed pod's lineage's Checkpoints may take at its CREATE
    (webhook/freshness.py); past it the plan uses the watch cache, with a warning. 0: never read
    live (the cache alone, as before that read existed)."""
    unrecorded_wait_seconds: float = 60.0
    """How long a pod CREATE is denied (429, the controller retries) while a predecessor of its
    lineage stopped and no Checkpoint records it yet (webhook/unrecorded.py); past it the pod is
    planned without that save, with a warning. 0: never (no pod is read)."""
    limits: limits_module.Limits = limits_module.Limits()
    """Connections, bytes and read deadlines any client gets (:mod:`webhook.limits`)."""

    @property
    def own_users(self) -> frozenset[str]:
        """Kontinue's own service accounts: they may set and change reserved keys."""
        prefix = f"system:serviceaccount:{self.namespace}:"
        return frozenset(
            {prefix + self.service_account, prefix + "kontinue-bridge", *self.trusted_users}
        )

    @property
    def hostnames(self) -> list[str]:
        """Names for the serving certificate: every form of the Service's DNS name the apiserver
        may use, then ``extra_sans`` (DNS names or IP addresses)."""
        base = f"{self.service}.{self.namespace}"
        return [self.service, base, f"{base}.svc", f"{base}.svc.cluster.local", *self.extra_sans]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        text_fields = {
            "KONTINUE_NAMESPACE": "namespace",
            "KONTINUE_SERVICE_ACCOUNT": "service_account",
            "KONTINUE_WEBHOOK_SERVICE": "service",
            "KONTINUE_WEBHOOK_SECRET": "secret",
            "KONTINUE_MUTATING_CONFIGURATION": "mutating_configuration",
            "KONTINUE_VALIDATING_CONFIGURATION": "validating_configuration",
            "KONTINUE_IMAGE": "image",
            "KONTINUE_WEBHOOK_HOST": "host",
            "KONTINUE_WEBHOOK_CERT_DIR": "cert_dir",
        }
        for variable, field in text_fields.items():
            if env.get(variable):
                values[field] = env[variable]
        if raw := env.get("KONTINUE_WEBHOOK_PORT_NUMBER"):
            if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) < 65536:
                raise ValueError(f"KONTINUE_WEBHOOK_PORT_NUMBER: {raw!r} is not a port number")
            values["port"] = int(raw)
        if raw := env.get("KONTINUE_WEBHOOK_CERT_MODE"):
            try:
                values["cert_mode"] = CertMode(raw)
            except ValueError:
                choices = ", ".join(m.value for m in CertMode)
                raise ValueError(
                    f"KONTINUE_WEBHOOK_CERT_MODE: {raw!r} is not one of {choices}"
                ) from None
        if raw := env.get("KONTINUE_QUEUE_SYSTEMS"):
            systems = tuple(s.strip() for s in raw.split(",") if s.strip())
            if unknown := set(systems) - {"kueue", "volcano"}:
                raise ValueError(f"KONTINUE_QUEUE_SYSTEMS: unknown {sorted(unknown)}")
            values["queue_systems"] = systems
        for variable, field in (
            ("KONTINUE_WEBHOOK_CERT_POLL_SECONDS", "cert_poll_seconds"),
            ("KONTINUE_WEBHOOK_DRAIN_SECONDS", "drain_seconds"),
            ("KONTINUE_WEBHOOK_LIVE_READ_SECONDS", "live_read_seconds"),
            ("KONTINUE_WEBHOOK_UNRECORDED_WAIT_SECONDS", "unrecorded_wait_seconds"),
        ):
            if raw := env.get(variable):
                try:
                    values[field] = float(raw)
                except ValueError:
                    raise ValueError(f"{variable}: {raw!r} is not a number") from None
        live = values.get("live_read_seconds", cls.live_read_seconds)
        if not isinstance(live, float) or not 0 <= live <= MAX_LIVE_READ_SECONDS:
            raise ValueError(
                f"KONTINUE_WEBHOOK_LIVE_READ_SECONDS: {live!r} is not between 0 and "
                f"{MAX_LIVE_READ_SECONDS:g} (the apiserver waits {WEBHOOK_TIMEOUT_SECONDS} s for "
                "an answer, timeoutSeconds in manifests/webhook/webhooks.yaml: a longer read "
                "would time out the review, and the pod validator's failurePolicy Fail deny pods)"
            )
        if raw := env.get("KONTINUE_TRUSTED_USERS"):
            values["trusted_users"] = tuple(u.strip() for u in raw.split(",") if u.strip())
        if raw := env.get("KONTINUE_WEBHOOK_EXTRA_SANS"):
            values["extra_sans"] = _sans(raw)
        values["limits"] = _limits(env)
        return cls(**values)  # type: ignore[arg-type]


def _sans(raw: str) -> tuple[str, ...]:
    """``KONTINUE_WEBHOOK_EXTRA_SANS``: comma-separated DNS names and IP addresses."""
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    for name in names:
        try:
            ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            if not _DNS_NAME.match(name.rstrip(".").lower()):
                raise ValueError(
                    f"KONTINUE_WEBHOOK_EXTRA_SANS: {name!r} is neither a DNS name nor an IP address"
                ) from None
    return names


_DNS_NAME = re.compile(
    r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)

_LIMIT_VARIABLES: dict[str, str] = {
    "KONTINUE_WEBHOOK_MAX_BODY_BYTES": "max_body",
    "KONTINUE_WEBHOOK_BUFFER_BYTES": "buffer_bytes",
    "KONTINUE_WEBHOOK_LARGE_BODY_BYTES": "large_body",
    "KONTINUE_WEBHOOK_MAX_REQUESTS": "max_requests",
    "KONTINUE_WEBHOOK_MAX_CONNECTIONS": "max_connections",
    "KONTINUE_WEBHOOK_HEADER_TIMEOUT_SECONDS": "header_seconds",
    "KONTINUE_WEBHOOK_BODY_TIMEOUT_SECONDS": "body_seconds",
    "KONTINUE_WEBHOOK_IDLE_TIMEOUT_SECONDS": "idle_seconds",
    "KONTINUE_WEBHOOK_HANDSHAKE_TIMEOUT_SECONDS": "handshake_seconds",
}


def _limits(env: Mapping[str, str]) -> limits_module.Limits:
    """The ``KONTINUE_WEBHOOK_*`` limits; each a positive number (whole for bytes and counts)."""
    values: dict[str, float | int] = {}
    for variable, field in _LIMIT_VARIABLES.items():
        raw = env.get(variable)
        if not raw:
            continue
        whole = not field.endswith("_seconds")
        try:
            value: float | int = int(raw) if whole and raw.isascii() else float(raw)
        except ValueError:
            kind = "a whole number" if whole else "a number"
            raise ValueError(f"{variable}: {raw!r} is not {kind}") from None
        if whole and not isinstance(value, int) or not value > 0 or value != value:
            raise ValueError(
                f"{variable}: {raw!r} must be a positive {'whole ' if whole else ''}number"
            )
        values[field] = value
    found = limits_module.Limits(**values)  # type: ignore[arg-type]
    if found.max_body > found.buffer_bytes // 2:
        raise ValueError(
            "KONTINUE_WEBHOOK_MAX_BODY_BYTES: at most half of KONTINUE_WEBHOOK_BUFFER_BYTES "
            f"({found.buffer_bytes // 2}), so one large body always fits the large share"
        )
    return found
