"""The server's TLS context, and swapping its certificate without dropping a connection.

One :class:`ssl.SSLContext` lives as long as the listening socket. Loading a new chain into that
same context changes what *new* handshakes present; established connections keep the session
they negotiated (OpenSSL copies the certificate into each connection at handshake time), so a
rotation never resets a keep-alive connection and never refuses a new one. The alternative kopf
uses — restarting the server when the files change — closes every connection, which an
apiserver calling under load sees as failed admission requests.

Two sources feed it:

* :mod:`webhook.certs` (mode ``self``): PEM bytes straight from the Secret;
* mounted files (mode ``files``, cert-manager): :func:`watch_files` polls ``tls.crt``/``tls.key``
  by sha256, because a Secret volume is updated by an atomic symlink swap that inotify does not
  report reliably (kopf ``__sleep_forever_or_until_ssl_files_change``). A pair that fails to load
  (caught between the two writes) is retried on the next poll while the old one keeps serving.

TLS 1.2 is the floor (kube-apiserver speaks 1.2 and 1.3).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import pathlib
import ssl
import tempfile

from webhook import metrics as webhook_metrics

logger = logging.getLogger("kontinue.webhook.tls")


class ServingCertificate:
    """The server's SSL context and which certificate it currently presents."""

    def __init__(self) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.fingerprint = ""
        """sha256 of the pair now served; ``""`` until the first :meth:`load`."""
        self.loads = 0
        self.not_after: float | None = None
        """``notAfter`` of the certificate now served (Unix time), for the expiry metric."""

    @property
    def loaded(self) -> bool:
        return bool(self.fingerprint)

    def load(self, cert_pem: bytes, key_pem: bytes) -> bool:
        """Serve this pair from the next handshake on; ``False`` if it is the one already served.

        ``load_cert_chain`` only reads files, so the pair goes through a private (0700) temporary
        directory that is removed before returning. Raises :class:`ssl.SSLError` for a pair that
        does not match or does not parse; the previous pair keeps serving then (checked on a
        scratch context first: a failed load into the live context would leave it half-swapped).
        """
        fingerprint = hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()
        if fingerprint == self.fingerprint:
            return False
        with tempfile.TemporaryDirectory(prefix="kontinue-tls-") as directory:
            cert_path = pathlib.Path(directory, "tls.crt")
            key_path = pathlib.Path(directory, "tls.key")
            cert_path.write_bytes(cert_pem)
            fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as key_file:
                key_file.write(key_pem)
            # NB: a failing load_cert_chain leaves the new certificate in the context with the
            # old key, and every later handshake fails. Prove the pair on a scratch context
            # first, so the live one only ever receives a pair that loads.
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
            self.context.load_cert_chain(cert_path, key_path)
        self.fingerprint = fingerprint
        self.not_after = webhook_metrics.not_after(cert_pem)
        self.loads += 1
        return True


def _read_pair(cert_dir: pathlib.Path) -> tuple[bytes, bytes]:
    return (cert_dir / "tls.crt").read_bytes(), (cert_dir / "tls.key").read_bytes()


async def load_files(serving: ServingCertificate, cert_dir: pathlib.Path) -> bool:
    """Load the mounted pair once (blocking file reads go to a thread)."""
    cert_pem, key_pem = await asyncio.to_thread(_read_pair, cert_dir)
    return serving.load(cert_pem, key_pem)


async def watch_files(
    serving: ServingCertificate, cert_dir: pathlib.Path, *, interval: float
) -> None:
    """Reload the mounted pair whenever its bytes change; runs until cancelled."""
    while True:
        await asyncio.sleep(interval)
        try:
            if await load_files(serving, cert_dir):
                logger.info("serving a rotated certificate from %s", cert_dir)
        except (OSError, ssl.SSLError) as exc:
            logger.warning("certificate in %s not loadable yet: %s", cert_dir, exc)
