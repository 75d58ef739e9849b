"""Build the kubernetes-asyncio ``ApiClient``: in-cluster when running in a pod, else kubeconfig.

The choice follows client-go's: ``KUBERNETES_SERVICE_HOST`` set means in-cluster (service
account token, mounted CA); otherwise ``$KUBECONFIG`` or ``~/.kube/config``. Tests and the
emulator pass an explicit kubeconfig dict instead.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import yaml
import yarl
from aiohttp import helpers
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
    return without_env_lookups(client.ApiClient(configuration=configuration))


def without_env_lookups(api: client.ApiClient) -> client.ApiClient:
    """``api`` with the proxy environment read once, here, instead of on every request.

    kubernetes-asyncio opens its aiohttp session with ``trust_env=True``
    (``kubernetes_asyncio/client/rest.py``), and aiohttp then makes two thread-pool hops per
    request: a ``~/.netrc`` lookup and the ``*_PROXY``/``NO_PROXY`` lookup (``aiohttp/client.py``
    ``ClientSession._request``). The proxy answer cannot change for the process's one API
    server, so it is taken once (``aiohttp.helpers.get_env_proxy_for_url``, the same lookup) and
    set as the client's explicit proxy; netrc credentials are not used (with the bearer token
    in the Authorization header aiohttp refuses them anyway). Measured: docs/benchmarks.md,
    issue 14 target 2.
    """
    rest = api.rest_client
    if not rest.proxy:
        with contextlib.suppress(LookupError):
            host = yarl.URL(str(api.configuration.host or ""))
            proxy, auth = helpers.get_env_proxy_for_url(host)
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {
                    **(rest.proxy_headers or {}),
                    "Proxy-Authorization": auth.encode(),
                }
    rest.pool_manager._trust_env = False  # noqa: SLF001 - aiohttp offers no setter
    return api


async def api_client_from_dict(kubeconfig: dict[str, Any]) -> client.ApiClient:
    """An ``ApiClient`` from a kubeconfig held in memory (the emulator hands one out)."""
    configuration = client.Configuration()
    await config.load_kube_config_from_dict(kubeconfig, client_configuration=configuration)
    return without_env_lookups(client.ApiClient(configuration=configuration))


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
    api = without_env_lookups(client.ApiClient(configuration=configuration))
    return api, str(namespace or "default")
