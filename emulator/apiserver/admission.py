"""Calling admission webhooks the way kube-apiserver does.

Copies staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/:
- ``predicates/rules/rules.go``: operations, apiGroups, apiVersions, resources (``pods``,
  ``pods/status``, ``*``, ``*/*``, ``pods/*``), scope;
- ``predicates/namespace`` and ``predicates/object``: namespaceSelector against the namespace's
  labels (skipped for cluster-scoped objects), objectSelector against object or oldObject;
- ``request/admissionreview.go``: the AdmissionReview v1 request, field for field (see
  tests/fixtures/admission for recorded ones);
- ``mutating/dispatcher.go`` and ``validating/dispatcher.go``: webhooks in configuration-name
  order, mutating ones one after another applying their base64 JSONPatch, validating ones after
  object validation; ``failurePolicy`` (default Fail), ``timeoutSeconds`` (default 10), the
  ``?timeout=`` query, ``caBundle`` verification (for a service reference, against the name
  ``<service>.<namespace>.svc``), ``sideEffects`` on dry run, and the denial message.
Not copied: matchConditions (CEL; a webhook with matchConditions is called as if they matched),
reinvocationPolicy, matchPolicy Equivalent conversion, admissionReviewVersions v1beta1.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import ssl
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp

from emulator.apiserver import kinds, patching, selectors, statuses, strategy, users
from kontinue.kube import errors

Object = dict[str, Any]
ServiceUrl = Callable[[str, str, int], str | None]

_MUTATING = ("admissionregistration.k8s.io", "mutatingwebhookconfigurations")
_VALIDATING = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")


@dataclasses.dataclass(frozen=True)
class Attributes:
    """One admission request: what is being done, to what, by whom."""

    kind: kinds.Kind
    subresource: str
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    name: str
    namespace: str
    obj: Object | None
    old: Object | None
    user: users.User
    dry_run: bool
    options: Object
    # the object's (group, version, kind) when it is not the resource's kind (pods/eviction)
    object_kind: tuple[str, str, str] | None = None


def review_request(attrs: Attributes) -> Object:
    """The ``request`` of an AdmissionReview v1, keys in kube-apiserver's order."""
    k = attrs.kind
    group, version, kind = attrs.object_kind or (k.group, k.version, k.kind)
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": k.group, "version": k.version, "resource": k.plural}
    request: Object = {"uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr}
    if attrs.subresource:
        request["subResource"] = attrs.subresource
    request["requestKind"] = dict(gvk)
    request["requestResource"] = dict(gvr)
    if attrs.subresource:
        request["requestSubResource"] = attrs.subresource
    if attrs.name:
        request["name"] = attrs.name
    if attrs.namespace:
        request["namespace"] = attrs.namespace
    request["operation"] = attrs.operation
    request["userInfo"] = attrs.user.info()
    request["object"] = attrs.obj
    request["oldObject"] = attrs.old
    request["dryRun"] = attrs.dry_run
    request["options"] = attrs.options
    return request


def _rule_matches(rule: Object, attrs: Attributes) -> bool:
    def has(values: list[str] | None, value: str) -> bool:
        return bool(values) and ("*" in values or value in values)  # type: ignore[operator]

    k = attrs.kind
    if not has(rule.get("operations"), attrs.operation):
        return False
    if not has(rule.get("apiGroups"), k.group) or not has(rule.get("apiVersions"), k.version):
        return False
    scope = rule.get("scope", "*")
    if scope == "Namespaced" and not k.namespaced or scope == "Cluster" and k.namespaced:
        return False
    for resource in rule.get("resources") or ():
        res, _, sub = resource.partition("/")
        if res not in ("*", k.plural):
            continue
        if sub == "*" or sub == attrs.subresource:
            return True
    return False


def _labels(obj: Object | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


@dataclasses.dataclass
class Dispatcher:
    """Finds the webhooks that match a request and calls them."""

    configurations: Callable[[tuple[str, str]], list[Object]]
    namespace_labels: Callable[[str], dict[str, str] | None]
    service_url: ServiceUrl
    calls: list[Object] = dataclasses.field(default_factory=list)

    def _matching(self, key: tuple[str, str], attrs: Attributes) -> list[Object]:
        if attrs.kind.group == "admissionregistration.k8s.io":
            return []  # webhook configurations are never themselves subject to webhooks
        found = []
        for config in sorted(self.configurations(key), key=lambda c: c["metadata"]["name"]):
            for hook in config.get("webhooks") or ():
                if self._hook_matches(hook, attrs):
                    found.append(hook)
        return found

    def _hook_matches(self, hook: Object, attrs: Attributes) -> bool:
        if not any(_rule_matches(rule, attrs) for rule in hook.get("rules") or ()):
            return False
        if attrs.kind.namespaced or attrs.kind.key == ("", "namespaces"):
            ns_labels = (
                _labels(attrs.obj or attrs.old)
                if attrs.kind.key == ("", "namespaces")
                else self.namespace_labels(attrs.namespace) or {}
            )
            if not selectors.from_label_selector(hook.get("namespaceSelector")).matches(ns_labels):
                return False
        object_selector = selectors.from_label_selector(hook.get("objectSelector"))
        return object_selector.matches(_labels(attrs.obj)) or (
            attrs.old is not None and object_selector.matches(_labels(attrs.old))
        )

    async def mutate(self, attrs: Attributes) -> Object | None:
        """Run every matching mutating webhook in turn; returns the (patched) object."""
        obj = attrs.obj
        for hook in self._matching(_MUTATING, attrs):
            current = dataclasses.replace(attrs, obj=obj)
            response = await self._call(hook, current)
            if response is None:
                continue
            patch = response.get("patch")
            if patch and obj is not None:
                if response.get("patchType", "JSONPatch") != "JSONPatch":
                    raise statuses.internal(
                        f'webhook "{hook["name"]}" returned an unsupported patchType'
                    )
                obj = patching.json_patch(obj, json.loads(base64.b64decode(patch)))
                # The patched object is decoded and defaulted again (k8s.io/apiserver
                # pkg/admission/plugin/webhook/mutating/dispatcher.go, callAttrMutatingHook:
                # ``o.GetObjectDefaulter().Default(attr.VersionedObject)``): a container a
                # webhook adds gets the same defaults as one the user wrote.
                # (the request's own kind only: a subresource such as ``pods/eviction``
                # carries another kind, an Eviction, which has no pod defaults)
                if not attrs.subresource:
                    strategy.defaults(obj, attrs.kind)
        return obj

    async def validate(self, attrs: Attributes) -> None:
        hooks = self._matching(_VALIDATING, attrs)
        await asyncio.gather(*(self._call(hook, attrs) for hook in hooks))

    def _target(self, hook: Object) -> tuple[str, str | None]:
        client_config = hook.get("clientConfig") or {}
        if client_config.get("url"):
            return str(client_config["url"]), None
        service = client_config.get("service")
        if not service:
            raise statuses.internal(f'webhook "{hook["name"]}" has no clientConfig url or service')
        port = int(service.get("port", 443))
        base = self.service_url(service["namespace"], service["name"], port)
        if base is None:
            raise ConnectionError(
                f"no address for service {service['namespace']}/{service['name']}:{port} "
                "(register one with ApiServer.service_urls)"
            )
        path = service.get("path") or ""
        return base.rstrip("/") + path, f"{service['name']}.{service['namespace']}.svc"

    async def _call(self, hook: Object, attrs: Attributes) -> Object | None:
        """POST the review; None when the webhook failed and its failurePolicy is Ignore."""
        name = hook["name"]
        if attrs.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise statuses.bad_request(f'admission webhook "{name}" does not support dry run')
        timeout = int(hook.get("timeoutSeconds") or 10)
        request = review_request(attrs)
        review: Object = {
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": request,
        }
        try:
            url, server_name = self._target(hook)
            context = ssl.create_default_context()
            ca = (hook.get("clientConfig") or {}).get("caBundle")
            if ca:
                context = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
            full_url = f"{url}{'&' if '?' in url else '?'}timeout={timeout}s"
            self.calls.append(review)
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
                session.post(
                    full_url, json=review, ssl=context, server_hostname=server_name
                ) as reply,
            ):
                if reply.status != 200:
                    raise ConnectionError(f"webhook answered HTTP {reply.status}")
                body = await reply.json(content_type=None)
            response: Object = body["response"]
            if response.get("uid") != request["uid"]:
                raise ValueError("expected response.uid to match the request.uid")
        except (OSError, aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return None
            raise statuses.internal(
                f'failed calling webhook "{name}": failed to call webhook: {exc!r}'
            ) from exc
        if not response.get("allowed"):
            result = response.get("status") or {}
            code = int(result.get("code") or 403)
            message = f'admission webhook "{name}" denied the request'
            if result.get("message"):
                message += f": {result['message']}"
            raise errors.from_status(
                code,
                statuses.status_body(code, str(result.get("reason") or "Forbidden"), message),
            )
        return response
