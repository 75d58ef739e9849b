"""The REST surface over aiohttp: paths, query parameters, bodies and Status responses.

Copies the URL layout of staging/src/k8s.io/apiserver/pkg/endpoints/installer.go
(``/api/v1/namespaces/{ns}/{resource}/{name}/{subresource}`` and the ``/apis/{group}/{version}``
forms), bearer-token authentication (401 for an unknown token), and the watch wire format:
one JSON event per line on a chunked response; a too-old resourceVersion is a 200 carrying
one ERROR event with a 410 Status, as the cacher answers. ``drop_watches`` aborts the TCP
connection under the stream, as a broken network would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from emulator.apiserver import discovery, registry, statuses, users, watches
from kontinue.kube import errors

Object = dict[str, Any]
_TRUE = ("true", "True", "1")


def _json(body: Object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


def _error(exc: errors.ApiError) -> web.Response:
    headers = {}
    if isinstance(exc, errors.TooManyRequests):
        headers["Retry-After"] = str(int(exc.retry_after or 1))
    return _json(statuses.to_body(exc), status=exc.status or 500, headers=headers)


class Routes:
    def __init__(
        self,
        reg: registry.Registry,
        *,
        authenticate: Callable[[str], users.User | None],
        address: Callable[[], str],
    ) -> None:
        self.registry = reg
        self.authenticate = authenticate
        self.address = address

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/version", self.version)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.healthz)
        app.router.add_get("/livez", self.healthz)
        app.router.add_route("*", "/api{tail:.*}", self.handle)
        app.router.add_route("*", "/apis{tail:.*}", self.handle)
        return app

    async def version(self, request: web.Request) -> web.Response:
        return _json(
            {
                "major": "1",
                "minor": "36",
                "gitVersion": "v1.36.2-kontinue-emulator",
                "platform": "linux/amd64",
            }
        )

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        user = self.authenticate(header[7:]) if header.startswith("Bearer ") else None
        if user is None:
            return _json(statuses.status_body(401, "Unauthorized", "Unauthorized"), status=401)
        try:
            return await self._route(request, user)
        except errors.ApiError as exc:
            return _error(exc)

    async def _route(self, request: web.Request, user: users.User) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        kinds = list(self.registry.kinds.values())
        if parts[0] == "api":
            if len(parts) == 1:
                return _json(discovery.versions(self.address()))
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return _json(discovery.group_list(kinds))
            if len(parts) == 2:
                found = discovery.group(kinds, parts[1])
                if found is None:
                    raise statuses.no_resource(parts[1], "")
                return _json(found)
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            listing = discovery.resource_list(kinds, group, version)
            if listing is None:
                raise statuses.no_resource(group, "")
            return _json(listing)
        namespace: str | None = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and (group, version, rest[2]) in self.registry.kinds
        ):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise statuses.no_resource(group, rest[0])
        kind = self.registry.kind(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        return await self._verb(request, user, kind, namespace, name, sub)

    async def _verb(
        self,
        request: web.Request,
        user: users.User,
        kind: Any,
        namespace: str | None,
        name: str | None,
        sub: str,
    ) -> web.StreamResponse:
        q = request.query
        reg = self.registry
        dry_run = q.get("dryRun") == "All"
        manager = q.get("fieldManager")
        method = request.method
        if name is None:
            if method == "GET" and q.get("watch") in _TRUE:
                return await self._watch(request, user, kind, namespace)
            if method == "GET":
                limit = int(q["limit"]) if q.get("limit") else None
                return _json(
                    await reg.list(
                        kind,
                        namespace=namespace,
                        user=user,
                        label_selector=q.get("labelSelector"),
                        field_selector=q.get("fieldSelector"),
                        limit=limit,
                        continue_=q.get("continue"),
                    )
                )
            if method == "POST":
                created = await reg.create(
                    kind,
                    await self._body(request),
                    namespace=namespace,
                    user=user,
                    dry_run=dry_run,
                    field_manager=manager,
                    field_validation=q.get("fieldValidation"),
                )
                return _json(created, status=201)
            if method == "DELETE":
                listing = await reg.list(
                    kind,
                    namespace=namespace,
                    user=user,
                    label_selector=q.get("labelSelector"),
                    field_selector=q.get("fieldSelector"),
                )
                for item in listing["items"]:
                    await reg.delete(kind, item["metadata"]["name"], namespace=namespace, user=user)
                return _json(listing)
            raise statuses.not_acceptable(
                f"the server does not allow this method on the requested resource: {method}"
            )
        if method == "POST" and sub == "binding":
            bound = await reg.bind(
                kind,
                name,
                await self._body(request),
                namespace=namespace,
                user=user,
                dry_run=dry_run,
            )
            return _json(bound, status=201)
        if method == "POST" and sub == "eviction":
            evicted = await reg.evict(
                kind,
                name,
                await self._body(request),
                namespace=namespace,
                user=user,
                dry_run=dry_run,
            )
            return _json(evicted, status=201)
        if method == "GET":
            return _json(await reg.get(kind, name, namespace=namespace, user=user, subresource=sub))
        if method == "PUT":
            return _json(
                await reg.replace(
                    kind,
                    await self._body(request),
                    name=name,
                    namespace=namespace,
                    user=user,
                    subresource=sub,
                    dry_run=dry_run,
                    field_manager=manager,
                )
            )
        if method == "PATCH":
            obj, made = await reg.patch(
                kind,
                name,
                await request.read(),
                content_type=request.headers.get("Content-Type", ""),
                namespace=namespace,
                user=user,
                subresource=sub,
                dry_run=dry_run,
                field_manager=manager,
                force=q.get("force") in _TRUE,
            )
            return _json(obj, status=201 if made else 200)
        if method == "DELETE":
            options: Object = await self._body(request, empty={})
            grace = options.get("gracePeriodSeconds", q.get("gracePeriodSeconds"))
            obj, gone = await reg.delete(
                kind,
                name,
                namespace=namespace,
                user=user,
                grace_period_seconds=None if grace is None else int(grace),
                propagation_policy=options.get("propagationPolicy") or q.get("propagationPolicy"),
                preconditions=options.get("preconditions"),
                dry_run=dry_run or options.get("dryRun") == ["All"],
            )
            return _json(obj, status=200 if gone else 202)
        raise statuses.not_acceptable(
            f"the server does not allow this method on the requested resource: {method}"
        )

    @staticmethod
    async def _body(request: web.Request, empty: Object | None = None) -> Any:
        raw = await request.read()
        if not raw.strip():
            if empty is not None:
                return empty
            raise statuses.bad_request("the request body is empty")
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise statuses.bad_request(f"the request body is not JSON: {exc}") from exc

    async def _watch(
        self, request: web.Request, user: users.User, kind: Any, namespace: str | None
    ) -> web.StreamResponse:
        q = request.query
        timeout = q.get("timeoutSeconds")
        stream = await self.registry.watch(
            kind,
            namespace=namespace,
            user=user,
            resource_version=q.get("resourceVersion"),
            label_selector=q.get("labelSelector"),
            field_selector=q.get("fieldSelector"),
            allow_bookmarks=q.get("allowWatchBookmarks") in _TRUE,
            timeout_seconds=None if timeout is None else float(timeout),
        )
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            async for event in stream:
                await response.write(json.dumps(event).encode() + b"\n")
        except watches.Dropped:
            if request.transport is not None:
                request.transport.abort()
            return response
        except ConnectionError:
            return response
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        await response.write_eof()
        return response
