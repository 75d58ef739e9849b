"""Build the kubernetes-asyncio ``ApiClient``: in-cluster when running in a pod, else kubeconfig.

The choice follows client-go's: ``KUBERNETES_SERVICE_HOST`` set means in-cluster (service
account token, mounted CA); otherwise ``$KUBECONFIG`` or ``~/.kube/config``. Tests and the
emulator pass an explicit kubeconfig dict instead.
"""

from __future__ import annotations

import os
from typing import Any

import yaml
from kubernetes_asyncio import client, config

ApiClient = client.ApiClient
"""kubernetes-asyncio's HTTP client, named here so nothing outside ``kontinue.kube`` imports it."""
ConfigException = config.ConfigException
"""No usable in-cluster or kubeconfig configuration."""


async def make_api_client(
    *, kubeconfig: str | None = None, context: str | None = None
) -> client.ApiClient:
    """An ``ApiClient`` for wherever this process runs. Close it with ``await api.close()``."""
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    return client.ApiClient(configuration=configuration)


async def api_client_from_dict(kubeconfig: dict[str, Any]) -> client.ApiClient:
    """An ``ApiClient`` from a kubeconfig held in memory (the emulator hands one out)."""
    configuration = client.Configuration()
    await config.load_kube_config_from_dict(kubeconfig, client_configuration=configuration)
    return client.ApiClient(configuration=configuration)


class KubeconfigError(Exception):
    """No usable kubeconfig (no file, a broken one, an unknown context), said for a person."""


def _any_exists(paths: str) -> bool:
    """Whether one of the ``os.pathsep``-separated kubeconfig paths exists (kubectl's list)."""
    return any(os.path.exists(os.path.expanduser(p)) for p in paths.split(os.pathsep) if p)


async def for_user(
    *, kubeconfig: str | None = None, context: str | None = None
) -> tuple[client.ApiClient, str]:
    """A command-line tool's ``ApiClient`` and its default namespace, by kubectl's rules.

    The kubeconfig is ``kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config`` (never the
    in-cluster account: a person's tool acts as that person); the namespace is the chosen
    context's, else ``default``. Raises :class:`KubeconfigError` with the loader's reason.
    """
    configuration = client.Configuration()
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if not _any_exists(where):
        raise KubeconfigError(f"no kubeconfig at {where}: pass --kubeconfig or set KUBECONFIG")
    try:
        await config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        reason = " ".join(str(exc).split())  # YAML errors span lines
        raise KubeconfigError(f"cannot use kubeconfig {where}: {reason}") from exc
    chosen = current
    if context is not None:
        chosen = next((c for c in contexts if c.get("name") == context), None)
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return client.ApiClient(configuration=configuration), str(namespace or "default")
