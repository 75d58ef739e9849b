"""``ApiServer``: the emulator as a real HTTP(S) server on 127.0.0.1, plus in-process clients.

    async with server.ApiServer() as api:
        api_client = await kontinue.kube.client.api_client_from_dict(api.kubeconfig())
        kube = api.client(user="system:serviceaccount:kube-system:job-controller")

Both go through the same ``registry.Registry`` pipeline (faults, admission, validation,
resourceVersion), so an emulated controller using ``api.client()`` is seen by webhooks and
watchers exactly as a remote one would be.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any

from aiohttp import web

from emulator.apiserver import faults, registry, routes, tls, users, watches
from kontinue.kube import errors, interface
from kontinue.kube.resources import Resource

Object = dict[str, Any]


def _selector(labels: Mapping[str, str] | str | None) -> str | None:
    if labels is None or isinstance(labels, str):
        return labels
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class ApiServer:
    """The emulated kube-apiserver. Use as ``async with ApiServer() as api``.

    ``history`` bounds the watch history (older resourceVersions get 410), ``bookmark_interval``
    is how often an idle watch with allowWatchBookmarks gets a BOOKMARK (upstream: about a
    minute), ``watch_timeout`` ends watches that ask for no timeoutSeconds (upstream: 30-60 min).
    """

    def __init__(
        self,
        *,
        tls: bool = False,
        history: int = 1000,
        bookmark_interval: float = 1.0,
        watch_timeout: float = 1800.0,
    ) -> None:
        self.tls = tls
        # (namespace, name, port) of a Service -> base URL, for webhooks with clientConfig.service
        self.service_urls: dict[tuple[str, str, int], str] = {}
        self.registry = registry.Registry(
            history=history,
            bookmark_interval=bookmark_interval,
            watch_timeout=watch_timeout,
            service_url=lambda ns, name, port: self.service_urls.get((ns, name, port)),
        )
        self._tokens: dict[str, users.User] = {}
        self._runner: web.AppRunner | None = None
        self._port = 0
        self.ca: tls_module.KeyPair | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> ApiServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        app = routes.Routes(
            self.registry, authenticate=self._tokens.get, address=lambda: f"127.0.0.1:{self._port}"
        ).app()
        self._runner = web.AppRunner(
            app, handle_signals=False, shutdown_timeout=1.0, handler_cancellation=True
        )
        await self._runner.setup()
        context = None
        if self.tls:
            self.ca = tls_module.make_ca("kontinue-emulator-ca")
            context = tls_module.server_context(
                tls_module.issue(self.ca, hosts=["127.0.0.1", "localhost"])
            )
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self._port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self.registry.store.drop_watches()
        for task in list(self.registry.tasks):
            task.cancel()
        if self.registry.tasks:
            await asyncio.gather(*self.registry.tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- the public surface --------------------------------------------------------------------

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._port}"

    @property
    def faults(self) -> faults.Faults:
        return self.registry.faults

    @property
    def webhook_calls(self) -> list[Object]:
        """Every AdmissionReview the emulator sent, oldest first (for tests)."""
        return self.registry.admission.calls

    def kubeconfig(self, user: str = "admin", *, groups: tuple[str, ...] | None = None) -> Object:
        """A kubeconfig dict whose bearer token authenticates as ``user``."""
        token = secrets.token_urlsafe(24)
        self._tokens[token] = users.user(user, groups=groups)
        cluster: Object = {"server": self.url}
        if self.ca is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca.cert_pem).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": user}}],
            "current-context": "emulator",
        }

    def install_crd(self, crd: Object) -> Object:
        """Serve a CustomResourceDefinition at once (as if Established)."""
        return self.registry.install_crd(crd)

    def drop_watches(self) -> None:
        """Abruptly cut every open watch (HTTP connections are aborted)."""
        self.registry.store.drop_watches()

    def compact(self) -> None:
        """Forget the watch history: watching from any older resourceVersion now gets 410."""
        self.registry.store.compact()

    def client(self, user: str = "admin", *, groups: tuple[str, ...] | None = None) -> Client:
        return Client(self.registry, users.user(user, groups=groups))


tls_module = tls


class Client:
    """An in-process client acting as one user; plain dicts in and out, kontinue errors raised.

    Same signatures as :class:`kontinue.kube.api.Api` where they overlap.
    """

    def __init__(self, reg: registry.Registry, user: users.User) -> None:
        self.registry = reg
        self.user = user

    def _kind(self, resource: Resource) -> Any:
        return self.registry.kind(resource.group, resource.version, resource.plural)

    async def create(
        self,
        resource: Resource,
        obj: Object,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> Object:
        return await self.registry.create(
            self._kind(resource),
            obj,
            namespace=namespace or (obj.get("metadata") or {}).get("namespace"),
            user=self.user,
            dry_run=dry_run,
            field_manager=field_manager,
        )

    async def get(
        self, resource: Resource, name: str, *, namespace: str | None = None, subresource: str = ""
    ) -> Object:
        return await self.registry.get(
            self._kind(resource), name, namespace=namespace, user=self.user, subresource=subresource
        )

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | str | None = None,
        field_selector: str | None = None,
    ) -> Object:
        return await self.registry.list(
            self._kind(resource),
            namespace=namespace,
            user=self.user,
            label_selector=_selector(label_selector),
            field_selector=field_selector,
        )

    async def replace(self, resource: Resource, obj: Object, *, subresource: str = "") -> Object:
        meta = obj.get("metadata") or {}
        return await self.registry.replace(
            self._kind(resource),
            obj,
            name=meta.get("name", ""),
            namespace=meta.get("namespace"),
            user=self.user,
            subresource=subresource,
        )

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        content_type: str,
        namespace: str | None = None,
        subresource: str = "",
        field_manager: str | None = None,
        force: bool = False,
    ) -> Object:
        obj, _ = await self.registry.patch(
            self._kind(resource),
            name,
            patch,
            content_type=content_type,
            namespace=namespace,
            user=self.user,
            subresource=subresource,
            field_manager=field_manager,
            force=force,
        )
        return obj

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
        obj, _ = await self.registry.delete(
            self._kind(resource),
            name,
            namespace=namespace,
            user=self.user,
            grace_period_seconds=grace_period_seconds,
            propagation_policy=propagation_policy,
            preconditions=dict(preconditions) if preconditions else None,
        )
        return obj

    async def bind(
        self, resource: Resource, name: str, *, node: str, namespace: str | None = None
    ) -> Object:
        """POST the pod's ``binding`` subresource (what kube-scheduler does to bind)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        return await self.registry.bind(
            self._kind(resource), name, body, namespace=namespace, user=self.user
        )

    async def evict(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Object:
        """POST the pod's ``eviction`` subresource (what ``kubectl drain`` does)."""
        options: Object = {}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "deleteOptions": options}
        return await self.registry.evict(
            self._kind(resource), name, body, namespace=namespace, user=self.user
        )

    async def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: Mapping[str, str] | str | None = None,
        field_selector: str | None = None,
        timeout_seconds: float | None = None,
        allow_bookmarks: bool = True,
    ) -> AsyncIterator[Object]:
        """Like ``Api.watch``: ERROR events raise (``errors.Gone`` for 410), a drop raises
        ``errors.ServerError``, and the iteration ends at the server-side timeout."""
        stream = await self.registry.watch(
            self._kind(resource),
            namespace=namespace,
            user=self.user,
            resource_version=resource_version,
            label_selector=_selector(label_selector),
            field_selector=field_selector,
            allow_bookmarks=allow_bookmarks,
            timeout_seconds=timeout_seconds,
        )
        try:
            async for event in stream:
                if event["type"] == "ERROR":
                    status = event["object"]
                    raise errors.from_status(int(status.get("code") or 500), status)
                yield event
        except watches.Dropped as exc:
            raise errors.ServerError("watch dropped by the emulator") from exc
        finally:
            await stream.aclose()  # type: ignore[attr-defined]


_CONFORMS: type[interface.Client] = Client  # mypy checks Client against the interface
