"""A certificate rotation under load: no request fails, established connections survive, and
new connections see the new certificate. Real TLS on 127.0.0.1, real aiohttp clients.

Load: several workers POST recorded reviews to /mutate back to back, half over one keep-alive
connection each, half opening a fresh connection per request (``force_close``), while the
served pair is replaced several times (each a new leaf from the same CA, as a renewal does).
"""

from __future__ import annotations

import asyncio
import ssl

import aiohttp
import pytest
from cryptography import x509

from tests.integration.webhook import conftest
from tests.unit.webhook import support
from webhook import app as app_module
from webhook import certs, settings, state, tls

ROTATIONS = 4
WORKERS = 6


async def _peer_serial(url: str, context: ssl.SSLContext) -> int:
    host, port = url.removeprefix("https://").split(":")
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", int(port), ssl=context, server_hostname=host
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()
        await writer.wait_closed()


async def test_rotation_under_load_fails_no_request(bundle: certs.Bundle) -> None:
    cert = tls.ServingCertificate()
    cert.load(bundle.serving.cert_pem, bundle.serving.key_pem)
    snap = state.Snapshot.of(cluster_queues=[support.opted_in_cq("cq-gpu")])
    application = app_module.create_app(settings.Settings(), state=snap)
    body = support.request_for(support.kueue_pod())
    context = conftest.client_context(bundle.trust)

    stop = asyncio.Event()
    results = {"ok": 0, "failed": 0, "ok_after_first_rotation": 0}
    rotated = asyncio.Event()
    connections_opened: list[int] = [0] * WORKERS
    errors: list[BaseException] = []
    progress = asyncio.Event()

    async def more_requests(count: int) -> None:
        """Wait (bounded) until ``count`` more requests have succeeded."""
        target = results["ok"] + count
        async with asyncio.timeout(30):
            while results["ok"] < target:
                progress.clear()
                await progress.wait()

    async def worker(index: int, url: str) -> None:
        keep_alive = index % 2 == 0
        trace = aiohttp.TraceConfig()

        async def opened(*_: object) -> None:
            connections_opened[index] += 1

        trace.on_connection_create_end.append(opened)
        connector = aiohttp.TCPConnector(ssl=context, limit=1, force_close=not keep_alive)
        async with aiohttp.ClientSession(connector=connector, trace_configs=[trace]) as session:
            while not stop.is_set():
                try:
                    async with session.post(url + "/mutate", json=body) as response:
                        answer = await response.json()
                        assert response.status == 200
                        assert answer["response"]["allowed"] is True
                        assert answer["response"]["patch"]
                    results["ok"] += 1
                    progress.set()
                    if rotated.is_set():
                        results["ok_after_first_rotation"] += 1
                except (aiohttp.ClientError, AssertionError, OSError) as exc:
                    results["failed"] += 1
                    errors.append(exc)

    async with conftest.serving(application, cert) as url:
        first_serial = await _peer_serial(url, context)
        workers = [asyncio.create_task(worker(i, url)) for i in range(WORKERS)]
        serials = [first_serial]
        for _ in range(ROTATIONS):
            await more_requests(40)
            leaf = certs.issue(bundle.ca, names=conftest.NAMES)
            assert cert.load(leaf.cert_pem, leaf.key_pem) is True
            rotated.set()
            serials.append(await _peer_serial(url, context))
            assert serials[-1] == leaf.cert.serial_number
        await more_requests(40)
        stop.set()
        await asyncio.gather(*workers)

    assert errors == []
    assert results["failed"] == 0
    assert results["ok_after_first_rotation"] >= 40 * ROTATIONS
    assert len(set(serials)) == ROTATIONS + 1
    assert cert.loads == ROTATIONS + 1
    # keep-alive workers kept their one connection across every rotation ...
    assert [connections_opened[i] for i in range(0, WORKERS, 2)] == [1] * (WORKERS // 2)
    # ... while the others really did handshake anew, many times over
    assert all(connections_opened[i] > ROTATIONS for i in range(1, WORKERS, 2))


@pytest.mark.parametrize("broken", ["mismatched", "garbage"])
async def test_a_bad_pair_never_replaces_the_served_one(bundle: certs.Bundle, broken: str) -> None:
    cert = tls.ServingCertificate()
    cert.load(bundle.serving.cert_pem, bundle.serving.key_pem)
    other = certs.issue(bundle.ca, names=conftest.NAMES)
    pair = {
        "mismatched": (other.cert_pem, bundle.serving.key_pem),  # new certificate, old key
        "garbage": (b"not a certificate", b"not a key"),
    }[broken]
    with pytest.raises(ssl.SSLError):
        cert.load(*pair)
    application = app_module.create_app(settings.Settings(), state=state.Snapshot())
    async with conftest.serving(application, cert) as url:
        serial = await _peer_serial(url, conftest.client_context(bundle.trust))
    assert serial == bundle.serving.cert.serial_number


async def test_mounted_files_are_reloaded_when_they_change(
    bundle: certs.Bundle, tmp_path: object
) -> None:
    from pathlib import Path

    cert_dir = Path(str(tmp_path))
    (cert_dir / "tls.crt").write_bytes(bundle.serving.cert_pem)
    (cert_dir / "tls.key").write_bytes(bundle.serving.key_pem)
    cert = tls.ServingCertificate()
    assert await tls.load_files(cert, cert_dir) is True
    application = app_module.create_app(settings.Settings(), state=state.Snapshot())
    context = conftest.client_context(bundle.trust)
    async with conftest.serving(application, cert) as url:
        # a half-written pair (new cert, old key) does not load; the old pair keeps serving
        leaf = certs.issue(bundle.ca, names=conftest.NAMES)
        (cert_dir / "tls.crt").write_bytes(leaf.cert_pem)
        with pytest.raises(ssl.SSLError):
            await tls.load_files(cert, cert_dir)
        assert await _peer_serial(url, context) == bundle.serving.cert.serial_number
        watcher = asyncio.create_task(tls.watch_files(cert, cert_dir, interval=0.01))
        try:
            (cert_dir / "tls.key").write_bytes(leaf.key_pem)
            for _ in range(1000):  # bounded: 10 s
                if await _peer_serial(url, context) == leaf.cert.serial_number:
                    break
                await asyncio.sleep(0.01)
            else:
                pytest.fail("the rotated files were never served")
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
