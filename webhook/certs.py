"""The webhook's own certificates: a CA and a serving certificate, kept in one Secret.

Pure parts (:func:`make_ca`, :func:`issue`, :func:`needs_renewal`, the Secret codec) and two edge
functions that talk to the API (:func:`ensure_secret`, :func:`patch_ca_bundle`).

Shape (kopf ``WebhookServer.build_certificate``, kueue ``pkg/util/cert``; docs/webhook.md,
"Certificates"):

* ECDSA P-256 keys: accepted by every apiserver and ~100x cheaper to generate than RSA-2048, so
  tests make fresh ones freely;
* SANs are split into DNS names and IP addresses and normalised (lower case, no trailing dot);
  unspecified addresses (``0.0.0.0``, ``::``) are dropped, nobody can connect to them; the
  subject CN is the first DNS name (else the first IP);
* the Secret is pre-created empty by the manifests, so RBAC grants only ``get``/``update`` on that
  one ``resourceName`` (``create`` cannot be limited by name); ``ensure_secret`` still creates it
  when absent and allowed to, for development. Several replicas race safely: a write that loses
  on resourceVersion re-reads and adopts the winner's certificate;
* only our *named* webhook configurations get ``caBundle`` (RBAC ``resourceNames`` again), each
  webhook's entry patched with a JSON Patch ``test`` on its name, so a reordering between our read
  and our write fails instead of patching the wrong webhook;
* when the CA itself is renewed, the bundle carries the new and the previous CA until the old
  one expires, so pods serving the old leaf stay trusted while replicas roll over.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import ipaddress
import logging
from collections.abc import Iterable

from cryptography import exceptions as cryptography_exceptions
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kontinue.kube import api as api_module
from kontinue.kube import errors, resources

logger = logging.getLogger("kontinue.webhook.certs")

CA_VALIDITY = datetime.timedelta(days=3650)
SERVING_VALIDITY = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)
CLOCK_SKEW = datetime.timedelta(minutes=5)

IP = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclasses.dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclasses.dataclass(frozen=True)
class Bundle:
    """What the Secret holds: the CA (with key, to sign renewals), the leaf, and the trust set.

    ``trust`` is the PEM for ``caBundle``: the CA, plus the previous CA during a CA rollover.
    """

    ca: KeyPair
    serving: KeyPair
    trust: bytes


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def split_names(names: Iterable[str]) -> tuple[list[str], list[IP]]:
    """Normalised, de-duplicated DNS names and IP addresses; unusable addresses dropped."""
    dns: list[str] = []
    ips: list[IP] = []
    for raw in names:
        name = raw.strip().rstrip(".").lower()
        if not name:
            continue
        try:
            address = ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            if name not in dns:
                dns.append(name)
            continue
        if address.is_unspecified:
            continue
        if address not in ips:
            ips.append(address)
    return dns, ips


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


def make_ca(
    *,
    common_name: str = "kontinue-webhook-ca",
    valid_for: datetime.timedelta = CA_VALIDITY,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A self-signed CA (``BasicConstraints(ca=True, path_length=0)``, keyCertSign only)."""
    now = now or _now()
    key = _key()
    subject = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue(
    ca: KeyPair,
    *,
    names: Iterable[str],
    valid_for: datetime.timedelta = SERVING_VALIDITY,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A serving certificate for ``names`` (DNS names and IPs), signed by ``ca``.

    Raises :class:`ValueError` when no usable name is left after normalisation.
    """
    dns, ips = split_names(names)
    if not dns and not ips:
        raise ValueError("a serving certificate needs at least one DNS name or usable IP")
    now = now or _now()
    ca_cert = ca.cert
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key")
    key = _key()
    not_after = min(now + valid_for, ca_cert.not_valid_after_utc)
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ip) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns[0] if dns else str(ips[0])))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_bundle(*, names: Iterable[str], now: datetime.datetime | None = None) -> Bundle:
    ca = make_ca(now=now)
    return Bundle(ca=ca, serving=issue(ca, names=names, now=now), trust=ca.cert_pem)


def _sans(cert: x509.Certificate) -> tuple[set[str], set[IP]]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    ips = {
        ip
        for ip in ext.get_values_for_type(x509.IPAddress)
        if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address)
    }
    return set(ext.get_values_for_type(x509.DNSName)), ips


def needs_renewal(
    bundle: Bundle,
    *,
    names: Iterable[str],
    now: datetime.datetime | None = None,
    renew_before: datetime.timedelta = RENEW_BEFORE,
) -> str:
    """Why the serving certificate must be re-issued (``""`` when it need not be).

    Expiring within ``renew_before``, missing a wanted name, or not signed by the CA.
    """
    now = now or _now()
    leaf = bundle.serving.cert
    if leaf.not_valid_after_utc - renew_before <= now:
        return f"serving certificate expires {leaf.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    dns, ips = split_names(names)
    have_dns, have_ips = _sans(leaf)
    if missing := sorted(set(dns) - have_dns) + sorted(str(ip) for ip in set(ips) - have_ips):
        return f"serving certificate lacks {', '.join(missing)}"
    try:
        leaf.verify_directly_issued_by(bundle.ca.cert)
    except (ValueError, TypeError, cryptography_exceptions.InvalidSignature):
        return "serving certificate is not signed by the CA"
    return ""


def renew(bundle: Bundle, *, names: Iterable[str], now: datetime.datetime | None = None) -> Bundle:
    """A new leaf; also a new CA when the CA itself is within :data:`RENEW_BEFORE` of expiry."""
    now = now or _now()
    if bundle.ca.cert.not_valid_after_utc - RENEW_BEFORE - SERVING_VALIDITY > now:
        return dataclasses.replace(bundle, serving=issue(bundle.ca, names=names, now=now))
    ca = make_ca(now=now)
    trust = ca.cert_pem
    if bundle.ca.cert.not_valid_after_utc > now:
        trust += bundle.ca.cert_pem
    return Bundle(ca=ca, serving=issue(ca, names=names, now=now), trust=trust)


# --- the Secret ----------------------------------------------------------------------------

SECRET_KEYS = ("tls.crt", "tls.key", "ca.crt", "ca.key")


def to_secret_data(bundle: Bundle) -> dict[str, str]:
    values = (bundle.serving.cert_pem, bundle.serving.key_pem, bundle.trust, bundle.ca.key_pem)
    return {k: base64.b64encode(v).decode() for k, v in zip(SECRET_KEYS, values, strict=True)}


def from_secret_data(data: dict[str, str] | None) -> Bundle | None:
    """The bundle in a Secret's ``data``; ``None`` when empty, incomplete or unreadable."""
    if not data or not all(data.get(k) for k in SECRET_KEYS):
        return None
    try:
        crt, key, trust, ca_key = (base64.b64decode(data[k], validate=True) for k in SECRET_KEYS)
        ca_cert = x509.load_pem_x509_certificates(trust)[0]
        bundle = Bundle(
            ca=KeyPair(ca_cert.public_bytes(serialization.Encoding.PEM), ca_key),
            serving=KeyPair(crt, key),
            trust=trust,
        )
        bundle.serving.cert  # noqa: B018 - parse now, not at first use
    except ValueError:
        return None
    return bundle


async def ensure_secret(
    api: api_module.Api,
    *,
    namespace: str,
    name: str,
    names: list[str],
    now: datetime.datetime | None = None,
    attempts: int = 5,
) -> Bundle:
    """The valid bundle in Secret ``namespace/name``, generating or renewing it when needed.

    Safe to run from every replica at once: each write carries the resourceVersion it read, and
    a loser re-reads and adopts the winner's certificate. Raises the API error if the Secret
    cannot be read or written after ``attempts``.
    """
    for _ in range(attempts):
        try:
            secret = await api.get(resources.SECRETS, name, namespace=namespace)
        except errors.NotFound:
            secret = None
        bundle = from_secret_data(secret.get("data") if secret else None)
        if bundle is not None and not needs_renewal(bundle, names=names, now=now):
            return bundle
        why = needs_renewal(bundle, names=names, now=now) if bundle else "no certificate yet"
        fresh = renew(bundle, names=names, now=now) if bundle else new_bundle(names=names, now=now)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": to_secret_data(fresh),
        }
        try:
            if secret is None:
                await api.create(resources.SECRETS, body, namespace=namespace)
            else:
                body["metadata"] = {**secret["metadata"]}
                body["type"] = secret.get("type", "Opaque")
                await api.replace(resources.SECRETS, body)
        except errors.Conflict:
            logger.info(
                "certificate secret %s/%s written concurrently; re-reading", namespace, name
            )
            continue
        logger.info("wrote certificate secret %s/%s: %s", namespace, name, why)
        return fresh
    raise errors.Conflict(f"secret {namespace}/{name}: still conflicting after {attempts} tries")


async def patch_ca_bundle(
    api: api_module.Api, *, trust: bytes, mutating: str | None, validating: str | None
) -> int:
    """Write ``trust`` as ``caBundle`` into every webhook of our two named configurations.

    Returns how many webhook entries changed. A configuration that does not exist is skipped
    with a log line (the manifests may install only one of them).
    """
    encoded = base64.b64encode(trust).decode()
    changed = 0
    for resource, name in (
        (resources.MUTATING_WEBHOOKS, mutating),
        (resources.VALIDATING_WEBHOOKS, validating),
    ):
        if not name:
            continue
        try:
            configuration = await api.get(resource, name)
        except errors.NotFound:
            logger.warning("%s %s not found; caBundle not written", resource.kind, name)
            continue
        ops: list[dict[str, object]] = []
        for i, webhook in enumerate(configuration.get("webhooks") or []):
            client_config = webhook.get("clientConfig") or {}
            if client_config.get("caBundle") == encoded:
                continue
            ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": webhook["name"]})
            ops.append(
                {
                    "op": "add",  # add replaces an existing member (RFC 6902 4.1)
                    "path": f"/webhooks/{i}/clientConfig/caBundle",
                    "value": encoded,
                }
            )
        if ops:
            await api.json_patch(resource, name, ops)
            changed += len(ops) // 2
    return changed
