"""A throw-away certificate authority and serving certificates, from the webhook's own code.

Used by ``ApiServer(tls=True)``, the emulated Kueue webhook and tests that stand up an HTTPS
admission webhook: the CA's PEM goes into a kubeconfig's certificate-authority-data or a
webhook's ``caBundle``. The certificates are the ones :mod:`webhook.certs` issues for the real
webhook, and the context is :class:`webhook.tls.ServingCertificate`'s, so the emulator and the
tests exercise the same TLS code the product serves with (one implementation, not two).
"""

from __future__ import annotations

import ssl

from webhook import certs
from webhook import tls as serving

KeyPair = certs.KeyPair


def make_ca(common_name: str = "emulator-ca") -> KeyPair:
    return certs.make_ca(common_name=common_name)


def issue(ca: KeyPair, *, hosts: list[str]) -> KeyPair:
    """A serving certificate for ``hosts`` (DNS names or IP addresses) signed by ``ca``."""
    return certs.issue(ca, names=hosts)


def server_context(pair: KeyPair) -> ssl.SSLContext:
    """An SSL context serving ``pair`` (:meth:`webhook.tls.ServingCertificate.load`)."""
    certificate = serving.ServingCertificate()
    certificate.load(pair.cert_pem, pair.key_pem)
    return certificate.context
