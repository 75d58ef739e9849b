"""The API client interface: what code that reads and writes objects may call.

Two implementations satisfy it, and mypy checks both (a conformance line beside each):
:class:`kontinue.kube.api.Api` over kubernetes-asyncio's HTTP client (the deployables), and
``emulator.apiserver.server.Client``, the API emulator's in-process client (the emulated
controllers). Code typed against :class:`Client` — the emulator's informer, the bridge's Event
recorder — runs on either. Plain dicts in and out; failures raise :mod:`kontinue.kube.errors`.
Parameters before ``/`` are positional, so implementations may name them as they like.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from kontinue.kube.resources import Resource

Object = dict[str, Any]


class Client(Protocol):
    async def get(
        self,
        resource: Resource,
        name: str,
        /,
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> Object: ...

    async def list(
        self,
        resource: Resource,
        /,
        *,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | str | None = None,
        field_selector: str | None = None,
    ) -> Object:
        """``{"items": [...], "metadata": {"resourceVersion": ...}}``."""
        ...

    async def create(
        self, resource: Resource, body: Object, /, *, namespace: str | None = None
    ) -> Object: ...

    async def replace(
        self, resource: Resource, body: Object, /, *, subresource: str = ""
    ) -> Object:
        """PUT: ``Conflict`` when ``metadata.resourceVersion`` is stale."""
        ...

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        /,
        *,
        content_type: str,
        namespace: str | None = None,
        subresource: str = "",
        force: bool = False,
    ) -> Object:
        """PATCH with an explicit Content-Type (``kontinue.kube.api.MERGE_PATCH``, ...)."""
        ...

    async def delete(
        self,
        resource: Resource,
        name: str,
        /,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> Object: ...

    def watch(
        self,
        resource: Resource,
        /,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: Mapping[str, str] | str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
    ) -> AsyncIterator[Object]:
        """Raw watch events until the server ends the stream; ``ERROR`` events raise."""
        ...
