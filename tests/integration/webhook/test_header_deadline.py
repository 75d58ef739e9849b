"""The header deadline on a kept-alive connection (webhook/limits.py ``_Connection``), over real
TLS: one timer per connection, re-armed lazily (issue 14), must still cut off a request whose
headers stall *after* earlier requests on the same connection were answered, and never one
whose headers arrive."""

from __future__ import annotations

import asyncio

from tests.integration.webhook import test_limits
from webhook import app as app_module
from webhook import certs


async def _answer(reader: asyncio.StreamReader) -> int:
    """Status of one response on a kept-alive connection (its body read by Content-Length)."""
    async with asyncio.timeout(10):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        length = next(
            int(line.split(":", 1)[1])
            for line in lines
            if line.lower().startswith("content-length")
        )
        await reader.readexactly(length)
    return int(lines[0].split(" ", 2)[1])


async def test_stalled_headers_after_answered_requests_are_answered_408(
    bundle: certs.Bundle,
) -> None:
    async with test_limits._server(bundle, header_seconds=0.3) as server:
        reader, writer = await test_limits._connect(server, bundle)
        review = test_limits._review()
        for _ in range(3):
            writer.write(test_limits._head(len(review)) + review)
            assert await _answer(reader) == 200
            await asyncio.sleep(0.2)  # the first deadline passes while the connection is idle
        writer.write(b"POST /validate HTTP/1.1\r\nHost: local")  # and never the rest
        status, body = await test_limits._status(reader)
        writer.close()
        assert status == 408
        assert b"request headers not received within 0.3s" in body
        assert server.app[app_module.GUARD].refused["header_timeout"] == 1
