"""What one webhook process gives any client: connections, bytes held, time to send a request.

Found (issue 11 item 3): 60 stalled requests of ~8 MiB each took the webhook from 97 to 621 MiB
(its limit is 512Mi), and 500 slowloris connections were all held open, because nothing bounded
the bytes buffered, the requests in flight, or the time a client may take to send headers and
body. aiohttp's own knobs do not cover it: its keep-alive timer does not restart when a
request's first bytes arrive, and ``client_max_size`` only stops a body once it has been read.

So the server is wrapped at the edge, in three places, each answering with a plain-text status
that says what was exceeded (the apiserver then applies the webhook's failurePolicy):

* **connections** — :class:`GuardedSite` listens with a TLS handshake deadline and wraps each
  connection in a :class:`_Connection`: beyond ``max_connections`` a new one is answered
  ``503`` and closed; a request whose headers are not complete ``header_seconds`` after the
  connection opened (or after its first byte, on a kept-alive connection) is answered ``408``
  and closed. An idle kept-alive connection is closed after ``idle_seconds``.
* **bytes** — :meth:`Guard.read_body` reserves a request's bytes *before* reading them from a
  budget of ``buffer_bytes`` shared by all requests: more than ``max_body`` (or a body that
  decodes to more) is ``413``; a request that does not fit the budget is ``503`` with
  ``Retry-After``. Bodies over ``large_body`` may hold at most half the budget, so stalled
  large bodies can never crowd out the small reviews a real apiserver sends (a pod review is
  ~10 KiB). A body of unknown length (chunked or compressed) reserves ``max_body``.
* **time** — the body must arrive within ``body_seconds`` of its headers (``408``); a body that
  cannot be decoded (corrupt deflate/gzip) is ``400``.

Refusals close the connection (``Connection: close``), so the rest of a refused body is never
read. The budget bounds what the server *holds*; it does not stop a client that opens
connections as fast as it can — that is the NetworkPolicy's job (manifests/, docs/security.md).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import dataclasses
import logging
import socket
import ssl
from typing import Any

from aiohttp import http_exceptions, web

logger = logging.getLogger("kontinue.webhook.limits")

MiB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Limits:
    """The bounds; every one is a setting (``KONTINUE_WEBHOOK_*``, :mod:`webhook.settings`)."""

    max_body: int = 8 * MiB
    """An AdmissionReview carries object and oldObject, each up to etcd's 1.5 MiB limit."""
    buffer_bytes: int = 64 * MiB
    """Request bodies held at once, all requests together."""
    large_body: int = 1 * MiB
    """Bodies above this are "large" and may hold at most half of ``buffer_bytes``."""
    max_requests: int = 128
    """Requests being read or answered at once."""
    max_connections: int = 1024
    header_seconds: float = 5.0
    """From a connection's start (or a kept-alive connection's first byte) to complete headers."""
    body_seconds: float = 5.0
    """From complete headers to the whole body."""
    idle_seconds: float = 60.0
    """A kept-alive connection with no request in flight is closed after this long."""
    handshake_seconds: float = 5.0
    """TLS handshake deadline."""


class Refused(Exception):
    """A request the server will not read further; :attr:`response` says why."""

    def __init__(self, status: int, text: str, *, retry_after: int | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.retry_after = retry_after

    @property
    def response(self) -> web.Response:
        headers = {"Connection": "close"}
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        response = web.Response(status=self.status, text=self.text, headers=headers)
        response.force_close()
        return response


def _raw(status: int, reason: str, text: str) -> bytes:
    """A whole HTTP/1.1 response, for a connection that never reached the application."""
    body = text.encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class _Connection(asyncio.Protocol):
    """One client connection: aiohttp's protocol inside, the header deadline and count outside.

    States: ``headers`` (waiting for a complete request head: the deadline runs), ``busy`` (a
    request is being read or answered: :meth:`Guard.read_body` owns the time), ``idle``
    (kept alive between requests: the next byte starts a new header deadline).
    """

    def __init__(self, guard: Guard, inner: Any) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.state = "headers"
        self.refused = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._timer_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        guard = self.guard
        if len(guard.connections) >= guard.limits.max_connections:
            self.refused = True
            guard.refused["connections"] += 1
            transport.write(_raw(503, "Service Unavailable", "too many connections\n"))
            transport.close()
            return
        guard.connections[transport] = self
        self._arm()
        self.inner.connection_made(transport)

    def _arm(self) -> None:
        """Start the header deadline. One timer per connection, not one per request: a timer
        still pending from an earlier request finds the later deadline when it fires and waits
        on for it (:meth:`_expired`), so a kept-alive connection's requests schedule and cancel
        nothing (each cost the loop a timer handle in its heap: issue 14)."""
        self.state = "headers"
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self.guard.limits.header_seconds
        if self._timer is None:
            self._timer_at = self._deadline
            self._timer = loop.call_at(self._deadline, self._expired)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.state != "headers" or self.transport is None or self.transport.is_closing():
            return
        if self._deadline > self._timer_at and self._loop is not None:  # re-armed: wait on
            self._timer_at = self._deadline
            self._timer = self._loop.call_at(self._deadline, self._expired)
            return
        self.guard.refused["header_timeout"] += 1
        seconds = self.guard.limits.header_seconds
        text = f"request headers not received within {seconds:g}s\n"
        self.transport.write(_raw(408, "Request Timeout", text))
        self.transport.close()

    def started(self) -> None:
        self.state = "busy"  # a pending header timer finds this and lets the request be

    def finished(self) -> None:
        self.state = "idle"

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if self.state == "idle":
            self._arm()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self.refused:
            return None
        result: bool | None = self.inner.eof_received()
        return result

    def pause_writing(self) -> None:
        if not self.refused:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if not self.refused:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        if self.refused:
            return
        if self.transport is not None:
            self.guard.connections.pop(self.transport, None)
        self.inner.connection_lost(exc)


class Guard:
    """The shared accounting of one server: connections, requests in flight, bytes reserved."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.connections: dict[asyncio.BaseTransport, _Connection] = {}
        self.in_flight = 0
        self.reserved = 0
        self.reserved_large = 0
        self.refused: dict[str, int] = {
            "connections": 0,
            "header_timeout": 0,
            "body_timeout": 0,
            "too_large": 0,
            "busy": 0,
            "undecodable": 0,
            "lost": 0,
        }

    def protocol(self, inner: Any) -> _Connection:
        return _Connection(self, inner)

    def _connection(self, request: web.BaseRequest) -> _Connection | None:
        return self.connections.get(request.transport) if request.transport else None

    def _reservation(self, request: web.BaseRequest) -> int:
        limits = self.limits
        length = request.content_length
        encoded = request.headers.get("Content-Encoding", "identity").lower() != "identity"
        if length is not None and length > limits.max_body:
            self.refused["too_large"] += 1
            raise Refused(413, f"request body of {length} bytes exceeds {limits.max_body}\n")
        if length is None or encoded:
            return limits.max_body
        return length

    def _acquire(self, size: int) -> bool:
        """Reserve ``size`` bytes and one request slot; :class:`Refused` (503) when they do not
        fit. Returns whether the body counts as large (:meth:`_release` needs it)."""
        limits = self.limits
        large = size > limits.large_body
        fits = self.reserved + size <= limits.buffer_bytes and (
            not large or self.reserved_large + size <= limits.buffer_bytes // 2
        )
        if self.in_flight >= limits.max_requests or not fits:
            self.refused["busy"] += 1
            raise Refused(503, "webhook busy: request budget in use, retry\n", retry_after=1)
        self.in_flight += 1
        self.reserved += size
        if large:
            self.reserved_large += size
        return large

    def _release(self, size: int, large: bool) -> None:
        self.in_flight -= 1
        self.reserved -= size
        if large:
            self.reserved_large -= size

    async def _read(self, request: web.BaseRequest, cap: int) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while chunk := await request.content.readany():
            total += len(chunk)
            if total > cap:
                self.refused["too_large"] += 1
                raise Refused(413, f"request body exceeds {cap} bytes\n")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _read_within(self, request: web.BaseRequest, cap: int) -> bytes:
        """The whole body, at most ``cap`` bytes, within ``body_seconds``; else
        :class:`Refused`."""
        content = request.content
        try:
            if content.is_eof() and "Content-Encoding" not in request.headers:
                # Already all here (a review of a few KiB arrives with its headers, in one TLS
                # record): no deadline to arm, nothing to wait for. Its length was bounded before
                # it was buffered (the parser stops at Content-Length, checked by _reservation).
                body = content.read_nowait(-1)
                if len(body) > cap:
                    self.refused["too_large"] += 1
                    raise Refused(413, f"request body exceeds {cap} bytes\n")
                return body
            async with asyncio.timeout(self.limits.body_seconds):
                return await self._read(request, cap)
        except TimeoutError:
            self.refused["body_timeout"] += 1
            seconds = self.limits.body_seconds
            raise Refused(408, f"request body not received within {seconds:g}s\n") from None
        except ConnectionError:
            # the client went away mid-body: nobody to answer, nothing to log loudly
            self.refused["lost"] += 1
            raise Refused(400, "connection lost while reading the body\n") from None
        except (http_exceptions.HttpProcessingError, web.RequestPayloadError) as exc:
            # aiohttp wraps a decoding failure of the body (corrupt deflate or gzip)
            self.refused["undecodable"] += 1
            cause = str(exc).strip().replace("\n", " ")
            raise Refused(400, f"request body cannot be decoded: {cause}\n") from None

    def read_body(self, request: web.BaseRequest) -> _Body:
        """The body of ``request``, read within the limits; held reserved for the block
        (``async with guard.read_body(request) as body``).

        Raises :class:`Refused` (413, 408, 503 or 400) instead of reading past a limit.
        """
        return _Body(self, request)


class _Body:
    """:meth:`Guard.read_body`'s context: a plain class rather than an
    ``asynccontextmanager`` generator, which cost every request a few microseconds more."""

    __slots__ = ("_connection", "_guard", "_large", "_request", "_size")

    def __init__(self, guard: Guard, request: web.BaseRequest) -> None:
        self._guard = guard
        self._request = request
        self._connection = guard._connection(request)
        self._size = -1
        self._large = False

    async def __aenter__(self) -> bytes:
        guard, connection = self._guard, self._connection
        if connection is not None:
            connection.started()
        try:
            size = guard._reservation(self._request)
            self._large = guard._acquire(size)
            self._size = size
            return await guard._read_within(self._request, size)
        except BaseException:
            self._done()
            raise

    async def __aexit__(self, *_: object) -> None:
        self._done()

    def _done(self) -> None:
        if self._size >= 0:
            self._guard._release(self._size, self._large)
            self._size = -1
        if self._connection is not None:
            self._connection.finished()
            self._connection = None


TLS_READ_BUFFER = 32 * 1024
"""Per-connection TLS read buffer: two TLS records (at most 16 KiB each)."""


def small_tls_buffers() -> None:
    """Make asyncio's TLS layer allocate :data:`TLS_READ_BUFFER` per connection, not 256 KiB.

    ``asyncio.sslproto.SSLProtocol`` (CPython 3.11-3.13) allocates ``bytearray(max_size)``,
    ``max_size = 256 * 1024``, for every connection, zero-filled and so resident: 500 idle
    connections held 125 MiB of it (benchmarks/bench_hostile.py). ``max_size`` only bounds one
    read from the socket and one decrypted chunk, so a smaller value costs a few more loop turns
    on a large body and nothing else. The attribute is process-wide (the webhook's client
    connections to the apiserver get the smaller buffer too); it is set when a
    :class:`GuardedSite` starts.
    """
    protocol: Any = getattr(asyncio.sslproto, "SSLProtocol", None)
    if protocol is not None and getattr(protocol, "max_size", 0) > TLS_READ_BUFFER:
        protocol.max_size = TLS_READ_BUFFER


class GuardedSite(web.BaseSite):
    """A listening socket whose connections go through :class:`Guard` (TCP host/port or a
    bound socket), with a TLS handshake deadline; otherwise as ``web.TCPSite``/``SockSite``."""

    __slots__ = ("_guard", "_host", "_port", "_sock")

    def __init__(
        self,
        runner: web.BaseRunner,
        guard: Guard,
        *,
        ssl_context: ssl.SSLContext | None,
        host: str | None = None,
        port: int | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._guard = guard
        self._host = host
        self._port = port
        self._sock = sock

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        if self._sock is not None:
            host, port = self._sock.getsockname()[:2]
        else:
            host, port = self._host or "0.0.0.0", self._port
        return f"{scheme}://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        small_tls_buffers()
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        guard = self._guard

        def factory() -> _Connection:
            return guard.protocol(server())

        handshake = guard.limits.handshake_seconds if self._ssl_context else None
        if self._sock is not None:
            self._server = await loop.create_server(
                factory,
                sock=self._sock,
                ssl=self._ssl_context,
                ssl_handshake_timeout=handshake,
                backlog=self._backlog,
            )
        else:
            self._server = await loop.create_server(
                factory,
                self._host,
                self._port or 0,
                ssl=self._ssl_context,
                ssl_handshake_timeout=handshake,
                backlog=self._backlog,
                reuse_address=True,
            )
