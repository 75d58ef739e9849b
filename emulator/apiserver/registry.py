"""The request pipeline every client goes through, HTTP or in-process.

Order of a write, as in staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go and
pkg/endpoints/handlers: fault check -> decode + defaults -> mutating admission -> strategy
(PrepareForCreate/Update, generateName, uid) -> validation -> validating admission -> a
compare-and-swap on the stored resourceVersion (retried for unconditional writes, 409 Conflict
for a stale one) -> store. A write that changes nothing is not stored and keeps its
resourceVersion, as upstream. Deletion decisions live in ``deletion``, garbage collection in
``collector``, watch streams in ``watches``, server-side apply in ``applying``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import random
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import yaml

from emulator.apiserver import (
    admission,
    applying,
    collector,
    deletion,
    faults,
    kinds,
    patching,
    selectors,
    statuses,
    store,
    strategy,
    users,
    validation,
    watches,
)
from kontinue import json_copy
from kontinue.kube import errors

Object = dict[str, Any]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

NAMESPACE_USER = users.user("system:serviceaccount:kube-system:namespace-controller")
_CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery/pkg/util/rand alphanums
_IMMUTABLE_META = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "generateName",
)


class _Retry(Exception):
    """The object changed while admission ran; redo the write on the new object."""


def _meta(obj: Object) -> Object:
    meta: Object = obj.setdefault("metadata", {})
    return meta


def _same(a: Object, b: Object) -> bool:
    strip = ("resourceVersion", "managedFields")
    am = {k: v for k, v in a.get("metadata", {}).items() if k not in strip}
    bm = {k: v for k, v in b.get("metadata", {}).items() if k not in strip}
    rest_a = {k: v for k, v in a.items() if k != "metadata"}
    rest_b = {k: v for k, v in b.items() if k != "metadata"}
    return am == bm and rest_a == rest_b


class Registry:
    def __init__(
        self,
        *,
        history: int = 1000,
        bookmark_interval: float = 1.0,
        watch_timeout: float = 1800.0,
        service_url: admission.ServiceUrl,
    ) -> None:
        self.store = store.Store(history=history)
        self.faults = faults.Faults()
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.kinds: dict[tuple[str, str, str], kinds.Kind] = {}
        self.owners: dict[str, applying.Owners] = {}  # object uid -> field manager -> paths
        self.tasks: set[asyncio.Task[None]] = set()
        self.admission = admission.Dispatcher(
            configurations=lambda key: self.store.items(key),
            namespace_labels=self._namespace_labels,
            service_url=service_url,
        )
        for kind in kinds.BUILTINS:
            self._register(kind)
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self._put_direct(self.kind("", "v1", "namespaces"), {"metadata": {"name": name}})

    # --- kinds ---------------------------------------------------------------------------------

    def _register(self, kind: kinds.Kind) -> None:
        self.kinds[(kind.group, kind.version, kind.plural)] = kind

    def kind(self, group: str, version: str, plural: str) -> kinds.Kind:
        found = self.kinds.get((group, version, plural))
        if found is None:
            raise statuses.no_resource(group, plural)
        return found

    def _crd_changed(self, crd: Object | None, removed: Object | None = None) -> None:
        if removed is not None:
            spec = removed["spec"]
            for key in [
                k for k in self.kinds if k[0] == spec["group"] and k[2] == spec["names"]["plural"]
            ]:
                del self.kinds[key]
            for obj in self.store.items((spec["group"], spec["names"]["plural"])):
                self.store.remove((spec["group"], spec["names"]["plural"]), obj)
        if crd is not None:
            for kind in kinds.from_crd(crd):
                self._register(kind)

    def install_crd(self, crd: Object) -> Object:
        """Serve a CRD at once (no admission): tests and the demo call this synchronously."""
        kind = self.kind("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        old = self.store.get(kind.key, "", crd["metadata"]["name"])
        if old is not None:
            self.store.remove(kind.key, old)
            self._crd_changed(None, removed=old)
        stored = self._put_direct(kind, json_copy.copied(crd))
        self._crd_changed(stored)
        return self._out(stored, kind)

    def _put_direct(self, kind: kinds.Kind, obj: Object) -> Object:
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        meta = _meta(obj)
        for field in ("resourceVersion", "uid", "creationTimestamp"):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = strategy.now()
        strategy.defaults(obj, kind)
        strategy.prepare_for_create(obj, kind)
        return self.store.put(kind.key, obj, old=None)

    # --- helpers -------------------------------------------------------------------------------

    def _namespace_labels(self, namespace: str) -> dict[str, str] | None:
        ns = self.store.get(("", "namespaces"), "", namespace)
        return None if ns is None else dict(ns["metadata"].get("labels") or {})

    def _out(self, obj: Object, kind: kinds.Kind) -> Object:
        result = json_copy.copied(obj)
        result["apiVersion"], result["kind"] = kind.api_version, kind.kind
        return result

    def _namespace_of(self, kind: kinds.Kind, namespace: str | None) -> str:
        if not kind.namespaced:
            return ""
        if not namespace:
            raise statuses.bad_request("the namespace is required for a namespaced resource")
        return namespace

    def _require_namespace(self, kind: kinds.Kind, namespace: str) -> None:
        """NamespaceLifecycle (plugin/pkg/admission/namespace/lifecycle): no writes elsewhere."""
        if kind.namespaced and self.store.get(("", "namespaces"), "", namespace) is None:
            raise statuses.not_found("", "namespaces", namespace)

    def _pod_admission(self, obj: Object) -> None:
        name = (obj.get("spec") or {}).get("priorityClassName")
        found = None
        if name and name not in strategy.SYSTEM_PRIORITIES:
            found = self.store.get(("scheduling.k8s.io", "priorityclasses"), "", name)
            if found is None:
                raise statuses.forbidden(
                    f"pods is forbidden: no PriorityClass with name {name} was found"
                )
        strategy.pod_admission(obj, found)

    def _get(self, kind: kinds.Kind, name: str, namespace: str) -> Object:
        obj = self.store.get(kind.key, namespace, name)
        if obj is None:
            raise statuses.not_found(kind.group, kind.plural, name)
        return obj

    async def _fault(
        self, verb: str, kind: kinds.Kind, sub: str, name: str, ns: str, user: users.User
    ) -> None:
        await self.faults.check(
            verb=verb,
            resource=kind.plural,
            subresource=sub,
            name=name,
            namespace=ns,
            user=user.name,
        )

    # --- reads ---------------------------------------------------------------------------------

    async def get(
        self,
        kind: kinds.Kind,
        name: str,
        *,
        namespace: str | None,
        user: users.User,
        subresource: str = "",
    ) -> Object:
        ns = self._namespace_of(kind, namespace)
        await self._fault("get", kind, subresource, name, ns, user)
        return self._out(self._get(kind, name, ns), kind)

    async def list(
        self,
        kind: kinds.Kind,
        *,
        namespace: str | None,
        user: users.User,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
    ) -> Object:
        await self._fault("list", kind, "", "", namespace or "", user)
        labels = selectors.parse_labels(label_selector)
        fields = selectors.parse_fields(field_selector, key=kind.key)
        items = [
            obj
            for obj in self.store.items(
                kind.key, namespace if kind.namespaced and namespace else None
            )
            if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)
        ]
        rv, start = str(self.store.rv), 0
        if continue_:
            try:
                token = json.loads(base64.b64decode(continue_))
                rv, start = str(token["rv"]), int(token["start"])
            except (ValueError, KeyError, TypeError) as exc:
                raise statuses.bad_request(f"invalid continue token: {exc}") from exc
        meta: Object = {"resourceVersion": rv}
        if limit:
            page = items[start : start + limit]
            if start + limit < len(items):
                meta["continue"] = base64.b64encode(
                    json.dumps({"rv": rv, "start": start + limit}).encode()
                ).decode()
                meta["remainingItemCount"] = len(items) - start - limit
            items = page
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": meta,
            "items": [self._out(obj, kind) for obj in items],
        }

    # --- create --------------------------------------------------------------------------------

    async def create(
        self,
        kind: kinds.Kind,
        body: Any,
        *,
        namespace: str | None,
        user: users.User,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: str | None = None,
    ) -> Object:
        if not isinstance(body, dict):
            raise statuses.bad_request("the body of the request is not a JSON object")
        obj = json_copy.copied(body)
        meta = _meta(obj)
        if kind.namespaced:
            if namespace and meta.get("namespace") and meta["namespace"] != namespace:
                raise statuses.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = self._namespace_of(kind, namespace or meta.get("namespace"))
        else:
            meta.pop("namespace", None)
        ns = meta.get("namespace", "")
        await self._fault("create", kind, "", meta.get("name", ""), ns, user)
        if meta.get("resourceVersion"):
            raise statuses.bad_request("resourceVersion should not be set on objects to be created")
        for field in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
        ):
            meta.pop(field, None)
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        strategy.defaults(obj, kind)
        if kind.key == ("", "pods"):
            self._pod_admission(obj)
        options: Object = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        if dry_run:
            options["dryRun"] = ["All"]
        if field_manager:
            options["fieldManager"] = field_manager
        if field_validation:
            options["fieldValidation"] = field_validation
        attrs = admission.Attributes(
            kind, "", "CREATE", meta.get("name", ""), ns, obj, None, user, dry_run, options
        )
        mutated = await self.admission.mutate(attrs)
        assert mutated is not None
        obj = mutated
        meta = _meta(obj)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = strategy.now()
        strategy.prepare_for_create(obj, kind)
        validation.validate(obj, kind)
        self._require_namespace(kind, ns)
        await self.admission.validate(
            admission.Attributes(
                kind, "", "CREATE", meta["name"], ns, obj, None, user, dry_run, options
            )
        )
        if self.store.get(kind.key, ns, meta["name"]) is not None:
            raise statuses.already_exists(kind.group, kind.plural, meta["name"])
        if dry_run:
            return self._out(obj, kind)
        stored = self.store.put(kind.key, obj, old=None)
        if kind.key == _CRD_KEY:
            self._crd_changed(stored)
        return self._out(stored, kind)

    # --- update / patch ------------------------------------------------------------------------

    async def _update(
        self,
        kind: kinds.Kind,
        name: str,
        ns: str,
        make: Callable[[Object], Object],
        *,
        subresource: str,
        user: users.User,
        dry_run: bool,
        options: Object,
        apply_owners: Callable[[Object], tuple[Object, applying.Owners]] | None = None,
    ) -> Object:
        for _ in range(16):
            old = self._get(kind, name, ns)
            try:
                return await self._update_once(
                    kind,
                    old,
                    make,
                    subresource=subresource,
                    user=user,
                    dry_run=dry_run,
                    options=options,
                    apply_owners=apply_owners,
                )
            except _Retry:
                continue
        raise statuses.conflict(kind.group, kind.plural, name, statuses.STALE)

    async def _update_once(
        self,
        kind: kinds.Kind,
        old: Object,
        make: Callable[[Object], Object],
        *,
        subresource: str,
        user: users.User,
        dry_run: bool,
        options: Object,
        apply_owners: Callable[[Object], tuple[Object, applying.Owners]] | None,
    ) -> Object:
        old_meta = old["metadata"]
        name, ns = old_meta["name"], old_meta.get("namespace", "")
        owners: applying.Owners | None = None
        if apply_owners is not None:
            new, owners = apply_owners(old)
        else:
            new = make(old)
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        meta = _meta(new)
        wanted = meta.get("resourceVersion")
        if wanted and wanted != old_meta["resourceVersion"]:
            raise statuses.conflict(kind.group, kind.plural, name, statuses.STALE)
        strategy.defaults(new, kind)
        attrs = admission.Attributes(
            kind, subresource, "UPDATE", name, ns, new, old, user, dry_run, options
        )
        mutated = await self.admission.mutate(attrs)
        assert mutated is not None
        new = strategy.prepare_for_update(mutated, old, kind, subresource=subresource)
        meta = _meta(new)
        for field in _IMMUTABLE_META:
            if field in old_meta:
                meta[field] = json_copy.copied(old_meta[field])
            else:
                meta.pop(field, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if strategy.spec_changed(new, old):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        validation.validate(new, kind)
        validation.validate_update(new, old, kind)
        await self.admission.validate(dataclasses.replace(attrs, obj=new))
        current = self.store.get(kind.key, ns, name)
        if current is None:
            raise statuses.not_found(kind.group, kind.plural, name)
        if current["metadata"]["resourceVersion"] != old_meta["resourceVersion"]:
            raise _Retry
        if _same(new, old):
            if owners is not None and not dry_run:
                self.owners[old_meta["uid"]] = owners
            return self._out(old, kind)
        if dry_run:
            return self._out(new, kind)
        fields = applying.Fields(kind.schema)
        if owners is not None:
            self.owners[old_meta["uid"]] = owners
        elif old_meta["uid"] in self.owners:
            applying.release_changed(self.owners[old_meta["uid"]], old, new, fields)
        stored = self.store.put(kind.key, new, old=old)
        if kind.key == _CRD_KEY:
            self._crd_changed(stored)
        if deletion.finished(stored):
            return self._out(self._remove(kind, stored, propagation=None), kind)
        return self._out(stored, kind)

    async def replace(
        self,
        kind: kinds.Kind,
        body: Any,
        *,
        name: str,
        namespace: str | None,
        user: users.User,
        subresource: str = "",
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> Object:
        """PUT. Without metadata.resourceVersion the update is unconditional, as upstream."""
        ns = self._namespace_of(kind, namespace)
        await self._fault("update", kind, subresource, name, ns, user)
        if not isinstance(body, dict):
            raise statuses.bad_request("the body of the request is not a JSON object")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name != name:
            raise statuses.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        self._check_subresource(kind, subresource)
        return await self._update(
            kind,
            name,
            ns,
            lambda old: json_copy.copied(body),
            subresource=subresource,
            user=user,
            dry_run=dry_run,
            options=self._update_options(dry_run, field_manager),
        )

    @staticmethod
    def _update_options(dry_run: bool, field_manager: str | None, force: bool = False) -> Object:
        options: Object = {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
        if dry_run:
            options["dryRun"] = ["All"]
        if field_manager:
            options["fieldManager"] = field_manager
        return options

    @staticmethod
    def _check_subresource(kind: kinds.Kind, subresource: str) -> None:
        if subresource and not (subresource == "status" and kind.status):
            raise statuses.not_found(kind.group, f"{kind.plural}/{subresource}", "")

    async def patch(
        self,
        kind: kinds.Kind,
        name: str,
        body: Any,
        *,
        content_type: str,
        namespace: str | None,
        user: users.User,
        subresource: str = "",
        dry_run: bool = False,
        field_manager: str | None = None,
        force: bool = False,
    ) -> tuple[Object, bool]:
        """PATCH; returns (object, created) since an apply may create."""
        ns = self._namespace_of(kind, namespace)
        await self._fault("patch", kind, subresource, name, ns, user)
        self._check_subresource(kind, subresource)
        content_type = content_type.split(";")[0].strip()
        if isinstance(body, bytes | str):
            try:
                body = yaml.safe_load(body) if content_type == APPLY_PATCH else json.loads(body)
            except (ValueError, yaml.YAMLError) as exc:
                raise statuses.bad_request(f"error decoding patch: {exc}") from exc
        options = self._update_options(dry_run, field_manager, force)
        if content_type == APPLY_PATCH:
            return await self._apply(
                kind,
                name,
                ns,
                body,
                subresource=subresource,
                user=user,
                dry_run=dry_run,
                field_manager=field_manager,
                force=force,
                options=options,
            )
        if content_type == JSON_PATCH:

            def make(old: Object) -> Object:
                return patching.json_patch(old, body)
        elif content_type == MERGE_PATCH:

            def make(old: Object) -> Object:
                result: Object = patching.merge_patch(old, body)
                return result
        elif content_type == STRATEGIC_MERGE_PATCH:
            if not kind.strategic:
                raise statuses.unsupported_media_type(
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}"
                )

            def make(old: Object) -> Object:
                result: Object = patching.strategic_merge(old, body)
                return result
        else:
            raise statuses.unsupported_media_type(f"unsupported patch type {content_type!r}")
        obj = await self._update(
            kind,
            name,
            ns,
            make,
            subresource=subresource,
            user=user,
            dry_run=dry_run,
            options=options,
        )
        return obj, False

    async def _apply(
        self,
        kind: kinds.Kind,
        name: str,
        ns: str,
        config: Any,
        *,
        subresource: str,
        user: users.User,
        dry_run: bool,
        field_manager: str | None,
        force: bool,
        options: Object,
    ) -> tuple[Object, bool]:
        if not field_manager:
            raise statuses.bad_request(
                "PATCH, application/apply-patch+yaml requests must have a fieldManager parameter"
            )
        if not isinstance(config, dict):
            raise statuses.bad_request("an apply patch must be an object")
        if (config.get("metadata") or {}).get("name") not in (None, name):
            raise statuses.bad_request("the name of the applied object does not match the URL")
        manager = f"{field_manager}/{subresource}" if subresource else field_manager
        fields = applying.Fields(kind.schema)
        if subresource == "status":
            config = {"status": config.get("status", {})}
        elif kind.status:
            config = {k: v for k, v in config.items() if k != "status"}
        if self.store.get(kind.key, ns, name) is None:
            if subresource:
                raise statuses.not_found(kind.group, kind.plural, name)
            body = json_copy.copied(config)
            _meta(body).setdefault("name", name)
            created = await self.create(
                kind,
                body,
                namespace=ns or None,
                user=user,
                dry_run=dry_run,
                field_manager=field_manager,
            )
            if not dry_run:
                self.owners[created["metadata"]["uid"]] = {manager: fields.paths(config)}
            return created, True

        def apply_owners(old: Object) -> tuple[Object, applying.Owners]:
            owners = json_copy.copied(self.owners.get(old["metadata"]["uid"], {}))
            found = applying.conflicts(owners, manager, old, config, fields)
            if found and not force:
                raise applying.conflict_error(
                    kind.group, kind.plural, kind.api_version, name, found
                )
            return applying.apply(owners, manager, old, config, fields, force=force), owners

        obj = await self._update(
            kind,
            name,
            ns,
            lambda old: old,
            subresource=subresource,
            user=user,
            dry_run=dry_run,
            options=options,
            apply_owners=apply_owners,
        )
        return obj, False

    # --- delete --------------------------------------------------------------------------------

    async def delete(
        self,
        kind: kinds.Kind,
        name: str,
        *,
        namespace: str | None,
        user: users.User,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: Object | None = None,
        dry_run: bool = False,
    ) -> tuple[Object, bool]:
        """DELETE; returns (object, gone): not gone while a grace period or finalizers hold it."""
        ns = self._namespace_of(kind, namespace)
        await self._fault("delete", kind, "", name, ns, user)
        old = self._get(kind, name, ns)
        deletion.check_preconditions(kind, old, preconditions or {})
        grace = deletion.effective_grace(kind, old, grace_period_seconds)
        options: Object = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if preconditions:
            options["preconditions"] = preconditions
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if dry_run:
            options["dryRun"] = ["All"]
        attrs = admission.Attributes(
            kind, "", "DELETE", name, ns, None, old, user, dry_run, options
        )
        await self.admission.mutate(attrs)
        await self.admission.validate(attrs)
        if dry_run:
            return self._out(old, kind), False
        return self._delete_now(kind, self._get(kind, name, ns), grace, propagation_policy)

    def _delete_now(
        self, kind: kinds.Kind, current: Object, grace: int | None, propagation: str | None
    ) -> tuple[Object, bool]:
        decided = deletion.plan(kind, current, grace, now=strategy.now)
        if decided.action == "keep":
            return self._out(current, kind), False
        if decided.action == "update":
            return self._out(self.store.put(kind.key, decided.obj, old=current), kind), False
        removed = self._remove(kind, current, propagation=propagation)
        return self._out(removed, kind), True

    async def bind(
        self,
        kind: kinds.Kind,
        name: str,
        body: Any,
        *,
        namespace: str | None,
        user: users.User,
        dry_run: bool = False,
    ) -> Object:
        """POST pods/{name}/binding (pkg/registry/core/pod/storage/storage.go ``assignPod``).

        Webhooks see a CREATE of ``pods/binding`` whose object is the v1 Binding; the pod then
        gets ``spec.nodeName`` and ``PodScheduled=True`` in one internal write (no pod UPDATE
        review). 409 if the pod is already bound or being deleted.
        """
        ns = self._namespace_of(kind, namespace)
        await self._fault("create", kind, "binding", name, ns, user)
        if kind.key != ("", "pods"):
            raise statuses.no_resource(kind.group, f"{kind.plural}/binding")
        target = (body.get("target") or {}) if isinstance(body, dict) else {}
        if not target.get("name"):
            raise statuses.invalid(
                "", "Binding", name, [("target.name", "FieldValueRequired", "Required value")]
            )
        binding = json_copy.copied(body)
        binding.update({"kind": "Binding", "apiVersion": "v1"})
        binding_meta = _meta(binding)
        binding_meta.setdefault("name", name)
        binding_meta["namespace"] = ns
        options: Object = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        if dry_run:
            options["dryRun"] = ["All"]
        attrs = admission.Attributes(
            kind,
            "binding",
            "CREATE",
            name,
            ns,
            binding,
            None,
            user,
            dry_run,
            options,
            object_kind=("", "v1", "Binding"),
        )
        await self.admission.mutate(attrs)
        await self.admission.validate(attrs)
        pod = self._get(kind, name, ns)
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to:
            raise statuses.conflict(
                kind.group,
                kind.plural,
                name,
                f'pod {name} is already assigned to node "{bound_to}"',
            )
        if pod["metadata"].get("deletionTimestamp"):
            raise statuses.conflict(
                kind.group,
                kind.plural,
                name,
                f"pod {name} is being deleted, cannot be assigned to a host",
            )
        success = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
        if not dry_run:
            bound = strategy.bound(
                pod, node=target["name"], annotations=binding_meta.get("annotations")
            )
            self.store.put(kind.key, bound, old=pod)
        return success

    async def evict(
        self,
        kind: kinds.Kind,
        name: str,
        body: Any,
        *,
        namespace: str | None,
        user: users.User,
        dry_run: bool = False,
    ) -> Object:
        """POST pods/{name}/eviction (pkg/registry/core/pod/storage/eviction.go), without PDBs.

        Webhooks see one CREATE of ``pods/eviction`` whose object is the policy/v1 Eviction;
        the DisruptionTarget condition and the graceful deletion that follow are internal
        writes no webhook sees, as recorded on a real v1.36 apiserver.
        """
        ns = self._namespace_of(kind, namespace)
        await self._fault("create", kind, "eviction", name, ns, user)
        if kind.key != ("", "pods"):
            raise statuses.no_resource(kind.group, f"{kind.plural}/eviction")
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            raise statuses.bad_request("the body of an eviction must be a policy/v1 Eviction")
        pod = self._get(kind, name, ns)
        eviction = json_copy.copied(body)
        eviction.update({"kind": "Eviction", "apiVersion": "policy/v1"})
        eviction_meta = _meta(eviction)
        if eviction_meta.setdefault("name", name) != name:
            raise statuses.bad_request(
                f"name in URL does not match name in Eviction object: {eviction_meta['name']}"
            )
        eviction_meta["namespace"] = ns
        eviction.setdefault("deleteOptions", {})
        options: Object = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        if dry_run:
            options["dryRun"] = ["All"]
        attrs = admission.Attributes(
            kind,
            "eviction",
            "CREATE",
            name,
            ns,
            eviction,
            None,
            user,
            dry_run,
            options,
            object_kind=("policy", "v1", "Eviction"),
        )
        await self.admission.mutate(attrs)
        await self.admission.validate(attrs)
        success = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
        if dry_run:
            return success
        delete_options = eviction["deleteOptions"] or {}
        deletion.check_preconditions(kind, pod, delete_options.get("preconditions") or {})
        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            pod = self.store.put(kind.key, strategy.disruption_target(pod), old=pod)
        grace = deletion.effective_grace(kind, pod, delete_options.get("gracePeriodSeconds"))
        self._delete_now(kind, pod, grace, delete_options.get("propagationPolicy"))
        return success

    def _remove(self, kind: kinds.Kind, obj: Object, *, propagation: str | None) -> Object:
        gone = self.store.remove(kind.key, obj)
        uid = obj["metadata"]["uid"]
        self.owners.pop(uid, None)
        if kind.key == _CRD_KEY:
            self._crd_changed(None, removed=obj)
        if kind.key == ("", "namespaces"):
            name = obj["metadata"]["name"]
            for k in {k.key: k for k in self.kinds.values() if k.namespaced}.values():
                for item in self.store.items(k.key, name):
                    self.store.remove(k.key, item)
        orphan = deletion.propagation(kind, propagation) == "Orphan"
        task = asyncio.get_running_loop().create_task(collector.collect(self, uid, orphan=orphan))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return gone

    # --- watch ---------------------------------------------------------------------------------

    async def watch(
        self,
        kind: kinds.Kind,
        *,
        namespace: str | None,
        user: users.User,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = False,
        timeout_seconds: float | None = None,
    ) -> AsyncIterator[Object]:
        """Watch events as dicts; a too-old resourceVersion yields one ERROR event (410)."""
        await self._fault("watch", kind, "", "", namespace or "", user)
        matches = watches.matcher(
            kind, namespace=namespace, label_selector=label_selector, field_selector=field_selector
        )
        since: int | None = None
        if resource_version not in (None, "", "0"):
            try:
                since = int(str(resource_version))
            except ValueError as exc:
                raise statuses.bad_request(f"invalid resource version: {resource_version}") from exc
        try:
            backlog, watcher = self.store.watch(kind.key, since)
        except errors.Gone as exc:
            return watches.error_stream(exc)
        initial = [] if since is not None else [o for o in self.store.items(kind.key) if matches(o)]
        return watches.stream(
            kind=kind,
            source=self.store,
            watcher=watcher,
            initial=initial,
            backlog=backlog,
            matches=matches,
            allow_bookmarks=allow_bookmarks,
            duration=self.watch_timeout if timeout_seconds is None else timeout_seconds,
            bookmark_interval=self.bookmark_interval,
            out=lambda obj: self._out(obj, kind),
        )
