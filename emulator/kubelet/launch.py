"""From a pod and one of its containers to a runnable plan: env, argv, directories (pure).

What the kubelet computes before asking the runtime to create a container
(pkg/kubelet/kubelet_pods.go ``makeEnvironmentVariables``, ``podFieldSelectorRuntimeValue``,
``makeMounts``; pkg/kubelet/container/helpers.go ``ExpandContainerCommandAndArgs``,
``ExpandContainerVolumeMounts``):

- env in spec order, each ``value`` expanded against the variables defined *before* it and the
  service env; ``valueFrom.fieldRef`` from the pod; command and args expanded against the final env;
- volume mounts to host directories, ``subPathExpr`` expanded against the env (an unresolved or
  empty reference is the kubelet's ``CreateContainerConfigError``).

There are no mount namespaces here, so a container-side path must become a host path. The plan
rewrites every occurrence of a mount path (and of the termination-message path) in env values and
argv to the host directory behind it -- textually, at path boundaries. That is what lets the
recorded manifests (which open ``/dev/termination-log`` and ``/checkpoint/...`` inline) run
unmodified; the limit is that a path built at run time from pieces is not rewritten. Each process
also gets ``KONTINUE_TERMINATION_LOG`` naming its real termination-message file.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from emulator.kubelet import expansion
from kontinue import keys

DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# The PATH a Debian-based image sets (the recorded pods' env, 10-downward-env.log).
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ConfigError(Exception):
    """The kubelet's ``CreateContainerConfigError``: the container cannot be created as specified.

    ``field`` names the offending spec field.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclasses.dataclass(frozen=True)
class HookSpec:
    """A ``lifecycle.preStop`` handler: ``exec`` argv, ``sleep`` seconds, or unsupported."""

    command: tuple[str, ...] | None = None
    sleep_seconds: int | None = None
    unsupported: str | None = None


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """Everything the runtime needs to start one container as a local process."""

    name: str
    image: str
    command: tuple[str, ...] | None  # expanded; None: the image's entrypoint
    args: tuple[str, ...] | None  # expanded; None: the image's cmd
    env: Mapping[str, str]
    cwd: Path
    termination_message_path: Path  # host file
    termination_message_policy: str
    log_path: Path
    pre_stop: HookSpec | None = None
    volumes: tuple[Path, ...] = ()  # host directories to create before the start (mounts)


@dataclasses.dataclass(frozen=True)
class Node:
    """What a pod's env and paths need to know about the node it runs on."""

    name: str
    ip: str
    root: Path  # this node's private directory (emptyDir, pod sandboxes, logs)
    shared_root: Path  # one directory for the whole cluster (hostPath, PVCs): what RWX storage sees


_FIELD_LABEL = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(pod: Mapping[str, Any], path: str, *, field: str) -> str:
    """``podFieldSelectorRuntimeValue``: a downward-API ``fieldPath`` read from the pod."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs") or []),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs") or []),
    }
    if path in simple:
        return str(simple[path] or "")
    match = _FIELD_LABEL.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(field, f"unsupported fieldPath {path!r}")


def environment(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    where: str,
    service_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The container's env exactly as ``makeEnvironmentVariables`` builds it (spec order).

    ``where`` is the container's field path (``spec.containers[0]``) for error messages. Only
    ``value`` and ``valueFrom.fieldRef`` are supported; configMap/secret/resource refs and
    ``envFrom`` raise :class:`ConfigError` naming the field.
    """
    services = dict(service_env or {})
    if container.get("envFrom"):
        raise ConfigError(f"{where}.envFrom", "not supported by the emulated kubelet")
    env: dict[str, str] = {}
    resolve = expansion.mapping_for(env, services)
    for index, var in enumerate(container.get("env") or []):
        field = f"{where}.env[{index}]"
        value = var.get("value") or ""
        source = var.get("valueFrom")
        if value:
            value = expansion.expand(value, resolve)
        elif source is not None:
            if "fieldRef" not in source:
                raise ConfigError(f"{field}.valueFrom", f"only fieldRef is supported, got {source}")
            value = field_ref(pod, source["fieldRef"]["fieldPath"], field=f"{field}.valueFrom")
        env[var["name"]] = value
    # Service links come first in the final env; the container's own vars override them.
    return {**services, **env}


def volume_host_path(
    pod: Mapping[str, Any], volume: Mapping[str, Any], *, node: Node, where: str
) -> Path:
    """The host directory standing in for one pod volume.

    hostPath and persistentVolumeClaim live under ``node.shared_root`` (every node sees them, as
    with a ReadWriteMany checkpoint volume); emptyDir and projected/configMap/secret/downwardAPI
    volumes are per pod under ``node.root``.
    """
    meta = pod.get("metadata") or {}
    if "hostPath" in volume:
        path = PurePosixPath(str(volume["hostPath"]["path"]))
        return node.shared_root / "hostpath" / path.relative_to(path.anchor)
    if "persistentVolumeClaim" in volume:
        claim = str(volume["persistentVolumeClaim"]["claimName"])
        return node.shared_root / "pvc" / str(meta.get("namespace", "default")) / claim
    kinds = ("emptyDir", "projected", "configMap", "secret", "downwardAPI")
    if any(kind in volume for kind in kinds):
        return node.root / "pods" / str(meta.get("uid", "")) / "volumes" / str(volume["name"])
    raise ConfigError(where, f"volume type not supported by the emulated kubelet: {sorted(volume)}")


def mounts(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    node: Node,
    where: str,
) -> dict[str, Path]:
    """Container mount path -> host directory, with ``subPath``/``subPathExpr`` applied."""
    volumes = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
    found: dict[str, Path] = {}
    for index, mount in enumerate(container.get("volumeMounts") or []):
        field = f"{where}.volumeMounts[{index}]"
        if mount["name"] not in volumes:
            raise ConfigError(f"{field}.name", f"no volume named {mount['name']!r}")
        host = volume_host_path(pod, volumes[mount["name"]], node=node, where=field)
        sub = mount.get("subPath") or ""
        if mount.get("subPathExpr"):
            missing: list[str] = []
            sub = expansion.expand(mount["subPathExpr"], _lookup_into(env, missing))
            if missing:
                raise ConfigError(
                    f"{field}.subPathExpr", f"missing value for {', '.join(sorted(set(missing)))}"
                )
        if sub:
            relative = PurePosixPath(sub)
            if relative.is_absolute() or ".." in relative.parts:
                raise ConfigError(f"{field}.subPath", f"must be a relative path, got {sub!r}")
            host = host / relative
        found[mount["mountPath"]] = host
    return found


def _lookup_into(env: Mapping[str, str], missing: list[str]) -> Callable[[str], str]:
    """``ExpandContainerVolumeMounts``' mapping: an unset or empty variable is an error."""

    def lookup(name: str) -> str:
        value = env.get(name, "")
        if not value:
            missing.append(name)
        return value

    return lookup


def rewrite(text: str, paths: Mapping[str, Path]) -> str:
    """Replace container paths by host paths where they appear as whole path prefixes."""
    for inside in sorted(paths, key=len, reverse=True):
        pattern = r"(?<![\w.\-/])" + re.escape(inside.rstrip("/")) + r"(?=$|[/\s\"'`):,;])"
        host = str(paths[inside]).replace("\\", "\\\\")
        text = re.sub(pattern, host, text)
    return text


def _hook(container: Mapping[str, Any]) -> HookSpec | None:
    handler = (container.get("lifecycle") or {}).get("preStop")
    if handler is None:
        return None
    if "exec" in handler:
        return HookSpec(command=tuple(handler["exec"].get("command") or []))
    if "sleep" in handler:
        return HookSpec(sleep_seconds=int(handler["sleep"]["seconds"]))
    return HookSpec(unsupported=f"preStop handler {sorted(handler)} is not supported")


def plan(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    where: str,
    node: Node,
    service_env: Mapping[str, str] | None = None,
) -> LaunchSpec:
    """The launch plan of one container; :class:`ConfigError` names what cannot be honoured."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    name = container["name"]
    env = environment(pod, container, where=where, service_env=service_env)
    paths = mounts(pod, container, env, node=node, where=where)
    volumes = tuple(paths.values())
    box = node.root / "pods" / meta.get("uid", "") / "containers" / name
    message_inside = container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
    message_host = box / "termination-log"
    paths = {**paths, message_inside: message_host}
    resolve = expansion.mapping_for(env)

    def expanded(items: Sequence[str] | None) -> tuple[str, ...] | None:
        if items is None:
            return None
        return tuple(rewrite(expansion.expand(item, resolve), paths) for item in items)

    rootfs = box / "rootfs"
    working = container.get("workingDir")
    if working:
        cwd = Path(rewrite(working, paths))
        if not cwd.is_absolute() or cwd == Path(working):
            cwd = rootfs / PurePosixPath(working).relative_to("/")
    else:
        cwd = rootfs
    final_env = {
        "PATH": IMAGE_PATH,
        "HOSTNAME": node.name if spec.get("hostNetwork") else str(meta.get("name", "")),
        "HOME": str(rootfs),
        **{k: rewrite(v, paths) for k, v in env.items()},
        keys.ENV_TERMINATION_LOG: str(message_host),
    }
    return LaunchSpec(
        name=name,
        image=str(container.get("image") or ""),
        command=expanded(container.get("command")),
        args=expanded(container.get("args")),
        env=final_env,
        cwd=cwd,
        termination_message_path=message_host,
        termination_message_policy=container.get("terminationMessagePolicy") or "File",
        log_path=box / "log",
        pre_stop=_hook(container),
        volumes=volumes,
    )
