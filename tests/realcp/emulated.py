"""The emulator's kubelet and Kueue, pointed at the real kube-apiserver instead of the emulator's.

Both take an ``api`` and act through ``api.client(user)`` (emulator/kubelet/agent.py,
emulator/nodes.py, emulator/kueue/controller.py, emulator/kueue/webhook.py). :class:`RealApi`
is that ``api`` for a :class:`tests.realcp.controlplane.ControlPlane`: each ``client(user)`` is
the product's own client (:class:`kontinue.kube.api.Api`, kubernetes-asyncio over real HTTPS)
with the admin token and Kubernetes impersonation (``Impersonate-User`` /
``Impersonate-Group``, https://kubernetes.io/docs/reference/access-authn-authz/authentication/
#user-impersonation), so the real apiserver authorizes every request as that user: a kubelet as
``system:node:<name>`` in ``system:nodes`` (the Node authorizer), Kueue as its ServiceAccount
(RBAC: bound to ``cluster-admin`` by :func:`grant`, as wide as Kueue's own manager role is
for what the emulation writes), and likewise the emulated Volcano's scheduler and job controller
(emulator/volcano, tests/realcp/test_volcano_identity.py).

Nothing else changes: the kubelet still runs each container as a real local process that gets
real signals (emulator/kubelet/runtime.py), and the emulated Kueue registers its Job webhook
``mjob.kb.io`` by URL with the real apiserver, which calls it over HTTPS.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from kontinue.kube import api, client
from kontinue.kube.resources import Resource
from tests.realcp import controlplane

Object = dict[str, Any]
NODES_GROUP = "system:nodes"
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)


def _groups_of(user: str) -> str | None:
    """The group a user is impersonated with: kubelets are ``system:nodes``; a ServiceAccount
    user gets its ``system:serviceaccounts`` groups from the apiserver itself."""
    return NODES_GROUP if user.startswith("system:node:") else None


class RealClient:
    """The signatures of ``emulator.apiserver.server.Client`` over :class:`api.Api`, for the
    calls the kubelet, Kueue and Volcano emulations make (no ``evict``: none calls it)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self._api = api.Api(api_client, field_manager="emulated")

    def _with(self, field_manager: str | None) -> api.Api:
        if field_manager is None:
            return self._api
        return api.Api(self.api_client, field_manager=field_manager)

    async def create(
        self,
        resource: Resource,
        obj: Object,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> Object:
        return await self._with(field_manager).create(
            resource, obj, namespace=namespace, dry_run=dry_run
        )

    async def get(
        self, resource: Resource, name: str, *, namespace: str | None = None, subresource: str = ""
    ) -> Object:
        return await self._api.get(resource, name, namespace=namespace, subresource=subresource)

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | str | None = None,
        field_selector: str | None = None,
    ) -> Object:
        listed = await self._api.list(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        # The items of a real list carry no apiVersion/kind (the List has them); client-go's
        # typed clients and controller-runtime fill them from the scheme before an Event names
        # the object. The emulations read them from each item, as the API emulator returns it.
        for item in listed.get("items") or []:
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
        return listed

    async def replace(self, resource: Resource, obj: Object, *, subresource: str = "") -> Object:
        return await self._api.replace(resource, obj, subresource=subresource)

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
        return await self._with(field_manager).patch(
            resource,
            name,
            patch,
            content_type=content_type,
            namespace=namespace,
            subresource=subresource,
            force=force,
        )

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
        return await self._api.delete(
            resource,
            name,
            namespace=namespace,
            grace_period_seconds=grace_period_seconds,
            propagation_policy=propagation_policy,
            preconditions=preconditions,
        )

    async def bind(
        self, resource: Resource, name: str, *, node: str, namespace: str | None = None
    ) -> Object:
        """POST the pod's ``binding`` subresource (the emulated Volcano scheduler binds so)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = resource.path(namespace=namespace, name=name, subresource="binding")
        result: Object = await self._api._call("POST", path, body=body)
        return result

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
        async for event in self._api.watch(
            resource,
            namespace=namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=None if timeout_seconds is None else int(timeout_seconds),
            allow_bookmarks=allow_bookmarks,
        ):
            yield event


class RealApi:
    """Stands where the emulator's components take an ``ApiServer``. ``await open()`` first
    (one HTTP client per user, made up front), ``await close()`` after."""

    def __init__(self, plane: controlplane.ControlPlane, users: list[str]) -> None:
        self.plane = plane
        self.users = ["admin", *users]
        self._clients: dict[str, RealClient] = {}

    async def open(self) -> RealApi:
        for user in self.users:
            api_client = await client.api_client_from_dict(self.plane.kubeconfig())
            if user != "admin":
                api_client.set_default_header("Impersonate-User", user)
                group = _groups_of(user)
                if group:
                    api_client.set_default_header("Impersonate-Group", group)
            self._clients[user] = RealClient(api_client)
        return self

    async def close(self) -> None:
        for real in self._clients.values():
            await real.api_client.close()
        self._clients.clear()

    def client(self, user: str = "admin", *, groups: tuple[str, ...] | None = None) -> RealClient:
        if user not in self._clients:
            raise KeyError(f"RealApi: no client for {user!r}; list it in users={self.users}")
        return self._clients[user]

    def install_crd(self, crd: Object) -> None:
        """The CRDs are applied server-side by the tier's ``crds`` fixture; nothing to do."""


async def grant(admin: api.Api, user: str) -> None:
    """Bind an emulated component's ServiceAccount user (``system:serviceaccount:<ns>:<name>``)
    to ``cluster-admin`` (idempotent): as wide as the component's own manager role is for what
    the emulation writes."""
    _, _, sa_namespace, sa_name = user.split(":")
    body = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"realcp-emulated-{sa_namespace}-{sa_name}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}],
    }
    await admin.apply(CLUSTER_ROLE_BINDINGS, body, force=True)
