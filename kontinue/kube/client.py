"""Build the kubernetes-asyncio ``ApiClient``: in-cluster when running in a pod, else kubeconfig.

The choice follows client-go's: ``KUBERNETES_SERVICE_HOST`` set means in-cluster (service
account token, mounted CA); otherwise ``$KUBECONFIG`` or ``~/.kube/config``. Tests and the
emulator pass an explicit kubeconfig dict instead.
"""

from __future__ import annotations

import os
from typing import Any

from kubernetes_asyncio import client, config


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
