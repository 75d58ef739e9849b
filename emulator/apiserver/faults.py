"""Fault injection: make chosen requests fail, so retry paths can be tested.

A ``Fault`` matches requests by verb (get, list, watch, create, update, patch, delete), resource
(plural), subresource, name, namespace and user, and fires ``count`` times (``None``: until
removed). It answers with a Status of its ``status`` (409 Conflict, 429 TooManyRequests with
``Retry-After``, 500 InternalError, ...), or, with ``hang=True``, holds the request for
``hang_seconds`` (past any sensible client timeout) and then answers 504 Timeout, as the
apiserver's request-timeout filter does. Faults are checked before anything else happens, for
HTTP and in-process clients alike, so a faulted write never changes state.
"""

from __future__ import annotations

import asyncio
import dataclasses

from emulator.apiserver import statuses
from kontinue.kube import errors

_REASONS = {
    409: ("Conflict", statuses.STALE),
    429: (
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
    ),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
}


@dataclasses.dataclass
class Fault:
    verb: str | None = None
    resource: str | None = None
    subresource: str | None = None
    name: str | None = None
    namespace: str | None = None
    user: str | None = None
    status: int = 500
    count: int | None = 1
    hang: bool = False
    hang_seconds: float = 30.0
    retry_after: int = 1
    fired: int = 0

    def matches(
        self, *, verb: str, resource: str, subresource: str, name: str, namespace: str, user: str
    ) -> bool:
        wanted = (
            (self.verb, verb),
            (self.resource, resource),
            (self.subresource, subresource),
            (self.name, name),
            (self.namespace, namespace),
            (self.user, user),
        )
        return all(want is None or want == got for want, got in wanted)

    def error(self) -> errors.ApiError:
        if self.hang:
            return statuses.timeout("Timeout: request did not complete within the allotted timeout")
        reason, message = _REASONS.get(
            self.status, ("InternalError", f"injected HTTP {self.status}")
        )
        if self.status == 429:
            return errors.TooManyRequests(
                message,
                retry_after=float(self.retry_after),
                status=429,
                reason=reason,
                details={"retryAfterSeconds": self.retry_after},
            )
        return errors.from_status(self.status, statuses.status_body(self.status, reason, message))


class Faults:
    """The active faults of one ApiServer (``api.faults``)."""

    def __init__(self) -> None:
        self.active: list[Fault] = []

    def add(
        self,
        *,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
        name: str | None = None,
        namespace: str | None = None,
        user: str | None = None,
        status: int = 500,
        count: int | None = 1,
        hang: bool = False,
        hang_seconds: float = 30.0,
        retry_after: int = 1,
    ) -> Fault:
        """Fail the next ``count`` matching requests; returns the fault (see ``fired``)."""
        fault = Fault(
            verb=verb,
            resource=resource,
            subresource=subresource,
            name=name,
            namespace=namespace,
            user=user,
            status=status,
            count=count,
            hang=hang,
            hang_seconds=hang_seconds,
            retry_after=retry_after,
        )
        self.active.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        if fault in self.active:
            self.active.remove(fault)

    def clear(self) -> None:
        self.active.clear()

    async def check(
        self, *, verb: str, resource: str, subresource: str, name: str, namespace: str, user: str
    ) -> None:
        """Raise (after hanging, for a hang fault) if a fault matches this request."""
        for fault in list(self.active):
            if not fault.matches(
                verb=verb,
                resource=resource,
                subresource=subresource,
                name=name,
                namespace=namespace,
                user=user,
            ):
                continue
            fault.fired += 1
            if fault.count is not None and fault.fired >= fault.count:
                self.active.remove(fault)
            if fault.hang:
                await asyncio.sleep(fault.hang_seconds)
            raise fault.error()
