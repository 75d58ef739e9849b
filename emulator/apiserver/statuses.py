"""``Status`` failures shaped like kube-apiserver's, raised as :mod:`kontinue.kube.errors` errors.

Copies staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go (NewNotFound, NewAlreadyExists,
NewConflict, NewInvalid, NewResourceExpired, ...): the same ``reason``, ``message`` wording and
``details``, so a client parsing the body cannot tell the emulator from the real server.
The in-process client raises these errors directly; the HTTP layer turns them back into bodies.
"""

from __future__ import annotations

from typing import Any

from kontinue.kube import errors


def _error(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> errors.ApiError:
    return errors.from_status(code, status_body(code, reason, message, details))


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def to_body(exc: errors.ApiError) -> dict[str, Any]:
    """The Status body for an error raised anywhere in the emulator."""
    return status_body(exc.status or 500, exc.reason or "InternalError", str(exc), exc.details)


def _details(name: str, group: str, kind: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    return details


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> errors.ApiError:
    return _error(
        404,
        "NotFound",
        f'{_qualified(group, plural)} "{name}" not found',
        _details(name, group, plural),
    )


def already_exists(group: str, plural: str, name: str) -> errors.ApiError:
    return _error(
        409,
        "AlreadyExists",
        f'{_qualified(group, plural)} "{name}" already exists',
        _details(name, group, plural),
    )


def conflict(group: str, plural: str, name: str, why: str) -> errors.ApiError:
    return _error(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": {why}',
        _details(name, group, plural),
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid(
    group: str, kind: str, name: str, causes: list[tuple[str, str, str]]
) -> errors.ApiError:
    """422 with one cause per ``(field, reason, message)``; the message lists them as kube does."""
    qualified = f"{kind}.{group}" if group else kind
    text = "; ".join(f"{field}: {message}" for field, _, message in causes)
    if len(causes) > 1:
        text = "[" + ", ".join(f"{field}: {message}" for field, _, message in causes) + "]"
    details = _details(name, group, kind)
    details["causes"] = [
        {"reason": reason, "message": message, "field": field} for field, reason, message in causes
    ]
    return _error(422, "Invalid", f'{qualified} "{name}" is invalid: {text}', details)


def gone(message: str) -> errors.ApiError:
    return _error(410, "Expired", message)


def bad_request(message: str) -> errors.ApiError:
    return _error(400, "BadRequest", message)


def unsupported_media_type(message: str) -> errors.ApiError:
    return _error(415, "UnsupportedMediaType", message)


def forbidden(message: str) -> errors.ApiError:
    return _error(403, "Forbidden", message)


def internal(message: str) -> errors.ApiError:
    return _error(500, "InternalError", f"Internal error occurred: {message}")


def too_many_requests(message: str, retry_after: int) -> errors.ApiError:
    return _error(429, "TooManyRequests", message, {"retryAfterSeconds": retry_after})


def timeout(message: str) -> errors.ApiError:
    return _error(504, "Timeout", message)


def not_acceptable(message: str) -> errors.ApiError:
    return _error(405, "MethodNotAllowed", message)


def invalid_patch(message: str) -> errors.ApiError:
    return _error(
        422, "Invalid", f"the server rejected our request due to an error in our request: {message}"
    )


def no_resource(group: str, plural: str) -> errors.ApiError:
    """404 for a URL naming no served resource (a CRD not installed, a typo)."""
    return _error(
        404,
        "NotFound",
        "the server could not find the requested resource",
        {"group": group, "kind": plural} if group else {"kind": plural},
    )
