"""The elector campaigns only while its replica is ready and gives up a Lease it cannot use.

Seen on a real cluster with the Volcano overlay: a bridge whose watches could never sync took the
Lease at start and kept renewing it, so the healthy standby never led. Now ``ready`` (the bridge:
every watch cache synced) gates the campaign, and a leader unready for ``deadline_seconds``
stops renewing and releases the Lease. Against the API emulator (tests/realcp/test_bridge.py
shows the same with the real apiserver and RBAC).
"""

from __future__ import annotations

import asyncio

from emulator.apiserver import server
from kontinue.kube import errors, resources
from queue_bridge import leader

NS = "kontinue-system"


async def test_campaign_waits_for_ready_and_an_unready_leader_lets_go() -> None:
    async with server.ApiServer() as emulated:
        admin = emulated.client()
        await admin.create(
            resources.NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        ready = False
        elector = leader.LeaderElector(
            emulated.client("system:serviceaccount:kontinue-system:kontinue-bridge"),  # type: ignore[arg-type]
            namespace=NS,
            name="kontinue-bridge",
            identity="a",
            duration_seconds=3,
            renew_seconds=0.1,
            deadline_seconds=0.5,
            ready=lambda: ready,
        )
        worked = asyncio.Event()

        async def work() -> None:
            worked.set()
            await asyncio.Event().wait()

        running = asyncio.create_task(elector.run(work))
        await asyncio.sleep(0.5)
        try:
            await admin.get(resources.LEASES, "kontinue-bridge", namespace=NS)
            raise AssertionError("an unready replica created the Lease")
        except errors.NotFound:
            pass
        assert not worked.is_set()
        ready = True
        await asyncio.wait_for(worked.wait(), 5)
        lease = await admin.get(resources.LEASES, "kontinue-bridge", namespace=NS)
        assert lease["spec"]["holderIdentity"] == "a"
        ready = False
        await asyncio.wait_for(running, 5)  # gave up: run() returns, the caller exits
        lease = await admin.get(resources.LEASES, "kontinue-bridge", namespace=NS)
        assert lease["spec"]["holderIdentity"] == ""  # released for the standby
