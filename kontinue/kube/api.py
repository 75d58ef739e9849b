"""Generic, typed-at-the-edge REST calls through kubernetes-asyncio's ``ApiClient``.

Why not the generated ``CoreV1Api``/``CustomObjectsApi``? Their models are not ours (we use the
pydantic models in :mod:`kontinue.models`), and ``CustomObjectsApi`` sends a dict patch as
``application/json-patch+json``, which a real apiserver rejects for a merge patch body
(kubernetes-asyncio: the generated ``client/api/custom_objects_api.py`` lists that type first and
``ApiClient.select_header_content_type`` in ``client/api_client.py`` takes the first). Every
write here names its Content-Type; every failure becomes a :mod:`kontinue.kube.errors` error.

Objects go in and come out as plain dicts; callers validate them into models at their boundary.

Requests that are not streams skip two steps of ``ApiClient.call_api`` that do nothing for plain
JSON dicts but cost CPU on every request (:meth:`Api._call`): the recursive
``sanitize_for_serialization`` walk of the body, and the body's trip through a ``str`` payload.
Everything else is what kubernetes-asyncio does (``client/api_client.py`` ``__call_api``,
``client/rest.py`` ``RESTClientObject.request``): the same session, default headers, auth
settings (a refreshed token included), proxy, TLS server name and error mapping.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import datetime
import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import pydantic_core
from kubernetes_asyncio import client

from kontinue.kube import errors, interface
from kontinue.kube.resources import Resource

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

Object = dict[str, Any]

_RESPONSE_TYPES = {200: "object", 201: "object", 202: "object"}
_PODS_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
_CHARSET = re.compile(r"charset=([a-zA-Z\-\d]+)[\s\;]?")


def _jsonable(value: Any) -> Any:
    """What ``sanitize_for_serialization`` makes of the non-JSON values it accepts (dates)."""
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _encode(body: Any) -> bytes:
    return json.dumps(body, default=_jsonable).encode()


def parse_json(data: bytes) -> Any:
    """``json.loads(data)``, by pydantic-core's parser where it can: a list page of pods
    parses ~30% faster (docs/benchmarks.md, issue 14). What that parser refuses goes to
    ``json.loads`` (a lone surrogate escape, which no apiserver sends, is one that
    ``json.loads`` accepts), so the result and any error are the standard library's."""
    try:
        return pydantic_core.from_json(data)
    except ValueError:
        return json.loads(data)


def _decode(data: bytes, content_type: str | None) -> Any:
    """The response body as kubernetes-asyncio's ``deserialize(..., "object")`` returns it:
    parsed JSON, or the text when it is not JSON (UTF-8 bodies parsed as :func:`parse_json`
    does; anything it refuses takes the standard library's path, as before)."""
    match = _CHARSET.search(content_type) if content_type is not None else None
    charset = match.group(1) if match else "utf-8"
    if charset.lower() in ("utf-8", "utf8"):
        with contextlib.suppress(ValueError):
            return pydantic_core.from_json(data)
    text = data.decode(charset)
    try:
        return json.loads(text)
    except ValueError:
        return text


def _selector(labels: Mapping[str, str] | str | None) -> str | None:
    if labels is None or isinstance(labels, str):
        return labels
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class Api:
    """One client for every resource in :mod:`kontinue.kube.resources` (and any other)."""

    def __init__(self, api_client: client.ApiClient, *, field_manager: str = "kontinue") -> None:
        self.api_client = api_client
        self.field_manager = field_manager

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Any:
        """One request that is not a stream (module doc: ``call_api`` without its body walk)."""
        api_client = self.api_client
        rest_client = api_client.rest_client
        headers = {"Accept": JSON, "Content-Type": content_type}
        headers.update(api_client.default_headers)
        if api_client.cookie:
            headers["Cookie"] = api_client.cookie
        params = list(query or [])
        await api_client.update_params_for_auth(headers, params, ["BearerToken"])
        url = str(api_client.configuration.host) + path
        if params:
            url += "?" + urlencode(params)
        args: dict[str, Any] = {"headers": headers, "timeout": aiohttp.ClientTimeout()}
        if body is not None and method != "GET":
            args["data"] = _encode(body)
        if rest_client.proxy:
            args["proxy"] = rest_client.proxy
        if rest_client.proxy_headers:
            args["proxy_headers"] = rest_client.proxy_headers
        if rest_client.server_hostname:
            args["server_hostname"] = rest_client.server_hostname
        try:
            response = await rest_client.pool_manager.request(method, url, **args)
            data = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.ServerError(f"{method} {path}: {exc!r}") from exc
        if not 200 <= response.status <= 299:  # as ApiException(http_resp=...) then mapped
            # the bytes: from_status decodes a non-UTF-8 body with replacement characters
            raise errors.from_status(response.status, data, response.headers)
        if _RESPONSE_TYPES.get(response.status) is None:
            return None
        return _decode(data, response.headers.get("content-type"))

    async def get(
        self, resource: Resource, name: str, *, namespace: str | None = None, subresource: str = ""
    ) -> Object:
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        result: Object = await self._call("GET", path)
        return result

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
    ) -> Object:
        """One page of a list: ``{"items": [...], "metadata": {"resourceVersion": ...}}``."""
        query: list[tuple[str, Any]] = []
        if selector := _selector(label_selector):
            query.append(("labelSelector", selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        if limit:
            query.append(("limit", limit))
        if continue_:
            query.append(("continue", continue_))
        result: Object = await self._call("GET", resource.path(namespace=namespace), query=query)
        return result

    async def create(
        self,
        resource: Resource,
        body: Object,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        """POST; ``dry_run`` runs admission and validation but stores nothing (``dryRun=All``)."""
        ns = namespace or body.get("metadata", {}).get("namespace")
        query = [("dryRun", "All")] if dry_run else None
        result: Object = await self._call(
            "POST", resource.path(namespace=ns), query=query, body=body
        )
        return result

    async def replace(self, resource: Resource, body: Object, *, subresource: str = "") -> Object:
        """PUT: fails with ``Conflict`` when ``metadata.resourceVersion`` is stale."""
        meta = body.get("metadata", {})
        path = resource.path(
            namespace=meta.get("namespace"), name=meta["name"], subresource=subresource
        )
        result: Object = await self._call("PUT", path, body=body)
        return result

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> Object:
        options: Object = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = dict(preconditions)
        path = resource.path(namespace=namespace, name=name)
        result: Object = await self._call("DELETE", path, body=options)
        return result

    async def evict(
        self,
        name: str,
        *,
        namespace: str,
        delete_options: Mapping[str, Any] | None = None,
    ) -> Object:
        """POST ``pods/{name}/eviction``: a graceful delete that respects PodDisruptionBudgets.

        What ``kubectl drain`` sends (k8s.io/kubectl ``pkg/drain/drain.go``, ``EvictPod``): a
        policy/v1 ``Eviction`` named after the pod. A budget that forbids it is a 429
        (:class:`~kontinue.kube.errors.TooManyRequests`), which the caller retries.
        """
        body: Object = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if delete_options:
            body["deleteOptions"] = dict(delete_options)
        path = _PODS_PATH.format(namespace=quote(namespace, safe=""), name=quote(name, safe=""))
        result: Object = await self._call("POST", path, body=body)
        return result

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        content_type: str,
        namespace: str | None = None,
        subresource: str = "",
        force: bool = False,
    ) -> Object:
        """PATCH with an explicit Content-Type (never guessed from the body's Python type)."""
        query: list[tuple[str, Any]] = []
        if content_type == APPLY_PATCH:
            query.append(("fieldManager", self.field_manager))
            if force:
                query.append(("force", "true"))
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        result: Object = await self._call(
            "PATCH", path, query=query, body=patch, content_type=content_type
        )
        return result

    async def merge_patch(
        self,
        resource: Resource,
        name: str,
        patch: Object,
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> Object:
        return await self.patch(
            resource,
            name,
            patch,
            content_type=MERGE_PATCH,
            namespace=namespace,
            subresource=subresource,
        )

    async def json_patch(
        self,
        resource: Resource,
        name: str,
        operations: builtins.list[Object],
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> Object:
        return await self.patch(
            resource,
            name,
            operations,
            content_type=JSON_PATCH,
            namespace=namespace,
            subresource=subresource,
        )

    async def apply(
        self,
        resource: Resource,
        body: Object,
        *,
        subresource: str = "",
        force: bool = True,
    ) -> Object:
        """Server-side apply as ``self.field_manager`` (sent as JSON, which is valid YAML)."""
        meta = body["metadata"]
        return await self.patch(
            resource,
            meta["name"],
            body,
            content_type=APPLY_PATCH,
            namespace=meta.get("namespace"),
            subresource=subresource,
            force=force,
        )

    async def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: Mapping[str, str] | str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
    ) -> AsyncIterator[Object]:
        """Yield raw watch events (``{"type": ..., "object": {...}}``) until the server ends.

        An ``ERROR`` event becomes the matching :mod:`errors` exception (``Gone`` for 410), so
        the caller decides whether to re-list. The stream is not resumed here: that decision
        belongs to the watch cache, which knows the last resourceVersion it applied.
        """
        query: list[tuple[str, Any]] = [("watch", "true")]
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        if selector := _selector(label_selector):
            query.append(("labelSelector", selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if timeout_seconds is not None:
            query.append(("timeoutSeconds", timeout_seconds))
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        path = resource.path(namespace=namespace)
        try:
            response = await self.api_client.call_api(
                path,
                "GET",
                query_params=query,
                header_params={"Accept": JSON},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.ServerError(f"watch {path}: {exc!r}") from exc
        async with response:
            if response.status != 200:
                raise errors.from_status(response.status, await response.read(), response.headers)
            try:
                while line := await response.content.readline():
                    if not line.strip():
                        continue
                    event: Object = parse_json(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object", {})
                        raise errors.from_status(int(status.get("code") or 500), status)
                    yield event
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise errors.ServerError(f"watch {path} dropped: {exc!r}") from exc


async def list_pages(
    api: Api,
    resource: Resource,
    *,
    namespace: str | None,
    label_selector: Mapping[str, str] | str | None,
    field_selector: str | None,
    page_size: int,
    page_timeout: float,
) -> AsyncIterator[tuple[builtins.list[Object], str]]:
    """Every page of one list as it arrives: (items, the first page's resourceVersion).

    A caller that folds each page into something smaller before the next arrives (the watch
    cache) never holds the whole list. Each page must arrive within ``page_timeout`` seconds.
    The first page's version is the snapshot all pages are served from on a real apiserver; were
    a server to serve later pages fresher, watching from the first page's version can only
    repeat an event (dropped as stale), never miss one. Items get the ``apiVersion``/``kind`` a
    watch event's object has (a list's items carry none), so an object reads the same whichever
    way it arrived.
    """
    version: str | None = None
    token: str | None = None
    while True:
        async with asyncio.timeout(page_timeout):
            page = await api.list(
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_=token,
            )
        meta = page.get("metadata") or {}
        if version is None:
            version = str(meta.get("resourceVersion") or "")
        items: builtins.list[Object] = page.get("items") or []
        for raw in items:
            raw.setdefault("apiVersion", resource.api_version)
            raw.setdefault("kind", resource.kind)
        token = meta.get("continue") or None
        yield items, version
        if token is None:
            return


_CONFORMS: type[interface.Client] = Api  # mypy checks Api against the interface
