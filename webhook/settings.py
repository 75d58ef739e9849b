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
import os
from collections.abc import Mapping


class CertMode(enum.StrEnum):
    SELF = "self"
    """Generate a CA and serving certificate into a Secret; patch caBundle ourselves."""
    FILES = "files"
    """Serve the certificate mounted at ``cert_dir`` (cert-manager injects caBundle)."""


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

    @property
    def own_users(self) -> frozenset[str]:
        """Kontinue's own service accounts: they may set and change reserved keys."""
        prefix = f"system:serviceaccount:{self.namespace}:"
        return frozenset(
            {prefix + self.service_account, prefix + "kontinue-bridge", *self.trusted_users}
        )

    @property
    def hostnames(self) -> list[str]:
        """DNS names the apiserver may use for the Service (all forms it may resolve)."""
        base = f"{self.service}.{self.namespace}"
        return [self.service, base, f"{base}.svc", f"{base}.svc.cluster.local"]

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
            if not raw.isdigit() or not 0 < int(raw) < 65536:
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
        ):
            if raw := env.get(variable):
                try:
                    values[field] = float(raw)
                except ValueError:
                    raise ValueError(f"{variable}: {raw!r} is not a number") from None
        if raw := env.get("KONTINUE_TRUSTED_USERS"):
            values["trusted_users"] = tuple(u.strip() for u in raw.split(",") if u.strip())
        return cls(**values)  # type: ignore[arg-type]
