"""The resource types the emulator serves: built-in kinds plus every CRD installed at runtime.

A ``Kind`` carries what discovery needs (plural, singular, short names, scope, verbs) and what
the write path needs (status subresource, the CRD schema, strategic-merge support). The list of
built-ins is deliberately short: only what Kontinue, Kueue, Volcano and the job controller touch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kontinue.kube import resources
from kontinue.kube.resources import Resource

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclasses.dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    status: bool = False
    # core kinds accept strategic-merge patches; custom resources answer 415 (as upstream)
    strategic: bool = False
    schema: dict[str, Any] | None = dataclasses.field(default=None, compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> Resource:
        return Resource(self.group, self.version, self.plural, self.kind, self.namespaced)

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: one store per group/resource, whatever version it is read at."""
        return (self.group, self.plural)


def _builtin(
    res: Resource, *, short: tuple[str, ...] = (), status: bool = False, core: bool = True
) -> Kind:
    return Kind(
        group=res.group,
        version=res.version,
        plural=res.plural,
        kind=res.kind,
        namespaced=res.namespaced,
        singular=res.kind.lower(),
        short_names=short,
        status=status,
        strategic=core,
    )


BUILTINS: tuple[Kind, ...] = (
    _builtin(resources.PODS, short=("po",), status=True),
    _builtin(resources.NODES, short=("no",), status=True),
    _builtin(resources.NAMESPACES, short=("ns",), status=True),
    _builtin(resources.EVENTS, short=("ev",)),
    _builtin(resources.SERVICES, short=("svc",), status=True),
    _builtin(resources.SECRETS),
    _builtin(resources.PVCS, short=("pvc",), status=True),
    _builtin(Resource("", "v1", "configmaps", "ConfigMap"), short=("cm",)),
    _builtin(Resource("", "v1", "podtemplates", "PodTemplate")),
    _builtin(resources.JOBS, status=True),
    _builtin(resources.PRIORITY_CLASSES, short=("pc",)),
    _builtin(resources.LEASES),
    _builtin(resources.MUTATING_WEBHOOKS),
    _builtin(resources.VALIDATING_WEBHOOKS),
    _builtin(resources.CRDS, short=("crd", "crds"), status=True, core=False),
)


def from_crd(crd: dict[str, Any]) -> list[Kind]:
    """One ``Kind`` per served version of a CustomResourceDefinition (apiextensions.k8s.io/v1)."""
    spec = crd["spec"]
    names = spec["names"]
    kinds = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        kinds.append(
            Kind(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular", names["kind"].lower()),
                short_names=tuple(names.get("shortNames", ())),
                status="status" in (version.get("subresources") or {}),
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            )
        )
    return kinds


def storage_version(crd: dict[str, Any]) -> str:
    for version in crd["spec"]["versions"]:
        if version.get("storage"):
            return str(version["name"])
    return str(crd["spec"]["versions"][0]["name"])
