"""The real webhook app over real HTTPS on 127.0.0.1, with certificates from webhook.certs and
an aiohttp client that verifies them against our CA (no ``ssl=False`` anywhere)."""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from kontinue import telemetry
from webhook import app as app_module
from webhook import certs, settings, tls
from webhook import state as state_module

NAMES = ["localhost", "127.0.0.1"]


@pytest.fixture(scope="session")
def bundle() -> certs.Bundle:
    return certs.new_bundle(names=NAMES)


def client_context(trust: bytes) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=trust.decode())
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


@contextlib.asynccontextmanager
async def serving(
    application: web.Application, serving_certificate: tls.ServingCertificate
) -> AsyncIterator[str]:
    """Serve ``application`` over TLS on a free 127.0.0.1 port; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    runner = app_module.runner(application)
    await runner.setup()
    site = app_module.site(runner, ssl_context=serving_certificate.context, sock=sock)
    await site.start()
    try:
        yield f"https://localhost:{port}"
    finally:
        await runner.cleanup()
        sock.close()


class Server:
    """A running webhook and a verifying client for it."""

    def __init__(self, url: str, session: aiohttp.ClientSession, app: web.Application) -> None:
        self.url = url
        self.session = session
        self.app = app


@contextlib.asynccontextmanager
async def running_webhook(
    bundle: certs.Bundle,
    state: state_module.State,
    *,
    config: settings.Settings | None = None,
    readiness: app_module.Readiness | None = None,
    tel: telemetry.Telemetry | None = None,  # metrics, GET /metrics and spans
) -> AsyncIterator[Server]:
    cert = tls.ServingCertificate()
    cert.load(bundle.serving.cert_pem, bundle.serving.key_pem)
    application = app_module.create_app(
        config or settings.Settings(image="registry.example/kontinue:test"),
        state=state,
        readiness=readiness,
        meter=tel.meter if tel else None,
        registry=tel.registry if tel else None,
        tracer=tel.tracer if tel else None,
        expiry=lambda: cert.not_after,
    )
    async with (
        serving(application, cert) as url,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=client_context(bundle.trust))
        ) as session,
    ):
        yield Server(url, session, application)
