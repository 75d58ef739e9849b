"""Fixtures shared by the integration tests: an emulated apiserver reached as ``admin``.

Directories and modules that need another shape (tests/integration/emulator's bookmarking
apiserver, the CLI's harness) define their own ``kube``, which overrides this one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from emulator.apiserver import server
from kontinue.kube import api, client


@pytest.fixture
async def kube() -> AsyncIterator[api.Api]:
    """``kontinue.kube.api.Api`` over real HTTP as ``admin``, on a fresh emulated apiserver."""
    async with server.ApiServer() as emulated:
        api_client = await client.api_client_from_dict(emulated.kubeconfig("admin"))
        try:
            yield api.Api(api_client, field_manager="test")
        finally:
            await api_client.close()
