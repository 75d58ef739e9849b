"""Our own small exception hierarchy for API failures, mapped in exactly one place.

Callers catch ``errors.Conflict`` rather than inspecting ``ApiException.status``. The message
keeps the apiserver's ``Status.message`` (which names the field for 422) and trims anything else,
so a response body never floods a log or leaks what it should not.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

_MAX_BODY = 256


class ApiError(Exception):
    """Any failed request. ``status`` is the HTTP code (0 when no response came back)."""

    status: int = 0

    def __init__(
        self, message: str, *, status: int = 0, reason: str = "", details: Any = None
    ) -> None:
        super().__init__(message)
        self.status = status or type(self).status
        self.reason = reason
        self.details = details


class ClientError(ApiError):
    """4xx: the request was wrong; retrying the same request will not help (but see 409/429)."""


class ServerError(ApiError):
    """5xx or no response: the server or the network failed; retry with backoff."""


class NotFound(ClientError):
    status = 404


class Conflict(ClientError):
    """409: a stale resourceVersion, or the object already exists (``reason`` says which)."""

    status = 409

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"


class Gone(ClientError):
    """410: the resourceVersion is too old for a watch; re-list."""

    status = 410


class Forbidden(ClientError):
    status = 403


class Invalid(ClientError):
    """422: the object failed validation; ``message`` names the field."""

    status = 422


class TooManyRequests(ClientError):
    status = 429

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


_BY_STATUS: dict[int, type[ApiError]] = {
    404: NotFound,
    409: Conflict,
    410: Gone,
    403: Forbidden,
    422: Invalid,
    429: TooManyRequests,
}


def from_status(status: int, body: Any, headers: Any = None) -> ApiError:
    """Build the right error from a status code and a ``Status`` body (dict, text or bytes)."""
    message, reason, details = "", "", None
    parsed: Any = body
    if isinstance(body, bytes | str):
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
            text = body.decode(errors="replace") if isinstance(body, bytes) else body
            message = text[:_MAX_BODY]
    if isinstance(parsed, dict) and parsed.get("kind") == "Status":
        message = str(parsed.get("message", ""))
        reason = str(parsed.get("reason", ""))
        details = parsed.get("details")
    if not message:
        message = f"HTTP {status}"
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 or status == 0 else ClientError)
    if cls is TooManyRequests:
        retry_after = None
        if headers is not None and headers.get("Retry-After"):
            try:
                retry_after = float(headers["Retry-After"])
            except ValueError:
                retry_after = None
        return TooManyRequests(
            message, retry_after=retry_after, status=status, reason=reason, details=details
        )
    return cls(message, status=status, reason=reason, details=details)


def from_api_exception(exc: ApiException) -> ApiError:
    return from_status(int(exc.status or 0), exc.body, exc.headers)
