"""A large review waiting on its live read does not hold back the next large review.

webhook/app.py answers reviews larger than ``YIELD_ABOVE`` one at a time (a 0.5 MiB review
parses in milliseconds on the event loop), but the live read of a plumbed pod's lineage
(webhook/freshness.py) is network I/O of up to ``KONTINUE_WEBHOOK_LIVE_READ_SECONDS``: awaited
under that lock, a queue of large pod CREATEs would each wait for every earlier one's read, past
the apiserver's webhook timeout. Here the emulator hangs the webhook's Checkpoint LIST: one large
opted-in pod's CREATE waits on it, and a large pod that needs no live read is answered meanwhile.
Real HTTPS, the real webhook app, the real client to the API emulator.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import aiohttp
import pytest

from emulator.apiserver import server
from kontinue.kube import api, client
from tests import fixtures
from tests.integration.webhook import conftest
from tests.integration.webhook import test_emulator as hooked
from tests.unit.webhook import support
from tests.waiting import eventually
from webhook import app as app_module
from webhook import certs, freshness, settings, state, tls

Obj = dict[str, Any]


@pytest.fixture
async def emulated() -> Any:
    async with server.ApiServer() as running:
        ours = sorted((fixtures.MANIFESTS / "crds").glob("kontinue.dev_*.yaml"))
        for path in [*ours, *hooked.CRDS]:
            running.install_crd(fixtures.load_one(path))
        yield running


def _large(pod: Obj) -> Obj:
    padded = copy.deepcopy(pod)
    pad = "x" * (2 * app_module.YIELD_ABOVE)
    padded["metadata"].setdefault("annotations", {})["example.com/pad"] = pad
    return support.request_for(padded)


async def test_a_large_review_is_not_queued_behind_another_ones_live_read(
    emulated: server.ApiServer, bundle: certs.Bundle
) -> None:
    hanging = emulated.faults.add(
        verb="list",
        resource="checkpoints",
        user=hooked.WEBHOOK_USER,
        status=500,
        count=None,
        hang=True,
        hang_seconds=60,
    )
    api_client = await client.api_client_from_dict(emulated.kubeconfig(hooked.WEBHOOK_USER))
    cert = tls.ServingCertificate()
    cert.load(bundle.serving.cert_pem, bundle.serving.key_pem)
    config = settings.Settings(image="registry.example/kontinue:test")
    application = app_module.create_app(
        config,
        state=state.Snapshot.of(cluster_queues=[support.opted_in_cq("cq-gpu")]),
        fresh=freshness.Reader(api.Api(api_client), seconds=20),
    )
    connector = aiohttp.TCPConnector(ssl=conftest.client_context(bundle.trust))
    try:
        async with (
            conftest.serving(application, cert) as url,
            aiohttp.ClientSession(connector=connector) as session,
        ):

            async def post(body: Obj) -> Obj:
                async with session.post(url + "/mutate", data=json.dumps(body)) as response:
                    assert response.status == 200
                    answer: Obj = await response.json()
                    return answer

            waiting = asyncio.ensure_future(post(_large(support.kueue_pod())))
            await eventually(lambda: hanging.fired >= 1, within=20, what="the live read hangs")
            # not opted in (no opted-in ClusterQueue): no live read; answered while the other is
            # still in its 20 s read (before the fix: only after it, behind the lock)
            other = await post(_large(support.kueue_pod(cluster_queue="cq-other")))
            assert other["response"]["allowed"] is True
            assert not waiting.done()  # still in its read: the other did not queue behind it
            # then, at the read's deadline, planned from the cache with the warning
            answer = await asyncio.wait_for(waiting, timeout=60)
            assert answer["response"]["allowed"] is True
            warnings = answer["response"].get("warnings") or []
            assert any("planned from the webhook's cache" in w for w in warnings)
    finally:
        await api_client.close()
