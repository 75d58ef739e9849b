"""The soak's system: the emulated cluster with Kueue (or, for the Volcano Job shape, Volcano and
no Kueue), the real webhook and two bridge replicas, each of which can be killed and replaced,
and the webhook taken offline and back.

Built as tests/integration/bridge/test_end_to_end.py ``system`` builds it (the repository's CRDs
and webhook manifests, each component under its own service account), with the parts the faults
need to restart held here. An outage of the webhook is what a real cluster sees while the
Service has no ready endpoint: the emulated apiserver cannot connect (``service_urls`` has no
address), so each webhook's ``failurePolicy`` applies; it comes back only once its ``/readyz``
answers 200, as an endpoint is only added for a ready pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import random
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from emulator import cluster, gpus, nodes
from emulator.demo import install
from emulator.kueue import controller as kueue_controller
from emulator.volcano import objects as volcano_objects
from kontinue import keys
from kontinue.kube import api, cacheset, resources
from tests import fixtures
from tests.integration.bridge.conftest import FAST, SYSTEM, config
from tests.integration.cluster import workloads
from tests.integration.cluster.test_kueue import Env

Obj = dict[str, Any]
NS = "default"
OTHER_NS = "evil"
GRACE = 5
MARGIN = 2.0
"""The bridge's ``finalizer_margin_seconds`` (tests/integration/bridge/conftest.py ``config``)."""
WAIT_SECONDS = 3


@dataclasses.dataclass
class Replica:
    identity: str
    task: asyncio.Task[int]
    stop: asyncio.Event
    api_client: Any
    sock: socket.socket


class Stack:
    def __init__(self, c: cluster.Cluster, *, rng: random.Random, queue_system: str) -> None:
        self.cluster = c
        self.queue_system = queue_system
        self.api = c.api
        self.admin = c.client()
        self.rng = rng
        self.replicas: list[Replica] = []
        self.started_replicas = 0
        self.hook: asyncio.Task[int] | None = None
        self.hook_stop = asyncio.Event()
        self.hook_client: Any = None
        self.hook_sock: socket.socket | None = None
        self.hook_url = ""

    # -- the bridge ---------------------------------------------------------------------------

    async def start_replica(self) -> Replica:
        self.started_replicas += 1
        identity = f"bridge-{self.started_replicas}"
        overrides: dict[str, Any] = {}
        if self.queue_system == "volcano":
            overrides = {"queue_systems": ("volcano",), "admission_check": False}
        started = await install.start_bridge(
            self.api,
            config(identity, **overrides),
            stop=asyncio.Event(),
            cache_options=cacheset.CacheOptions(backoff=FAST, rng=random.Random(self.rng.random())),
            name=f"soak {identity}",
        )
        replica = Replica(identity, started.task, started.stop, started.api_client, started.sock)
        self.replicas.append(replica)
        return replica

    async def kill(self, replica: Replica) -> None:
        """The replica dies (its task cancelled: no graceful Lease release)."""
        if replica not in self.replicas:
            return  # two faults at once chose the same replica
        self.replicas.remove(replica)
        replica.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await replica.task
        await replica.api_client.close()
        replica.sock.close()

    async def leader(self) -> Replica | None:
        lease = await self.admin.get(resources.LEASES, "kontinue-bridge", namespace=SYSTEM)
        holder = (lease.get("spec") or {}).get("holderIdentity")
        return next((r for r in self.replicas if r.identity == holder), None)

    # -- the webhook --------------------------------------------------------------------------

    async def start_webhook(self) -> None:
        self.hook_stop = asyncio.Event()
        hook = await install.start_webhook(
            self.api,
            install.webhook_config((self.queue_system,)),
            stop=self.hook_stop,
            cache_options=cacheset.CacheOptions(backoff=FAST),
            register=False,  # only once it is ready, as an endpoint is added for a ready pod
            name="soak webhook",
        )
        self.hook, self.hook_client, self.hook_sock = hook.task, hook.api_client, hook.sock
        self.hook_url = hook.url
        await self._until_ready()
        self.api.service_urls[install.WEBHOOK_SERVICE] = self.hook_url

    async def _until_ready(self) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        async with aiohttp.ClientSession() as session:
            while True:
                if self.hook is not None and self.hook.done():
                    raise RuntimeError(f"the webhook stopped: {self.hook!r}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with session.get(self.hook_url + "/readyz", ssl=context) as answer:
                        if answer.status == 200:
                            return
                if loop.time() > deadline:
                    raise TimeoutError("the webhook did not turn ready within 60 s")
                await asyncio.sleep(0.1)

    async def stop_webhook(self) -> None:
        """The webhook's endpoint is gone: the apiserver cannot reach it."""
        self.api.service_urls.pop(install.WEBHOOK_SERVICE, None)
        self.hook_stop.set()
        if self.hook is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.hook, 15)
        if self.hook_client is not None:
            await self.hook_client.close()
        if self.hook_sock is not None:
            self.hook_sock.close()
        self.hook = None

    async def close(self) -> None:
        for replica in list(self.replicas):
            replica.stop.set()
        await asyncio.gather(
            *(asyncio.wait_for(r.task, 15) for r in self.replicas), return_exceptions=True
        )
        for replica in list(self.replicas):
            await replica.api_client.close()
            replica.sock.close()
        self.replicas.clear()
        await self.stop_webhook()


def policy(name: str = "soak") -> Obj:
    return {
        "apiVersion": keys.API_VERSION,
        "kind": "CheckpointPolicy",
        "metadata": {"name": name},
        "spec": {
            "storage": {"hostPath": {"path": "/var/kontinue"}, "mountPath": "/ckpt"},
            "minGracePeriodSeconds": GRACE,
            "restore": {"waitForSavingSeconds": WAIT_SECONDS},
        },
    }


def volcano_queue(name: str, *, gpus: int, deserved: int, opted_in: bool) -> Obj:
    labels = {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "soak"} if opted_in else {}
    return volcano_objects.queue(
        name,
        capability={keys.GPU_RESOURCE: str(gpus)},
        deserved={keys.GPU_RESOURCE: str(deserved)},
        labels=labels,
    )


@contextlib.asynccontextmanager
async def running(
    workdir: Path, *, members: int, rng: random.Random, queue_system: str = "kueue"
) -> AsyncIterator[Stack]:
    """The whole system, ``members`` one-GPU nodes; with ``kueue`` a ClusterQueue of ``members``
    GPUs opted in; with ``volcano`` (no Kueue CRDs) the opted-in Queue ``research`` (deserved
    nothing) and the Queue ``prod`` (deserved every GPU: Volcano reclaims for it)."""
    one_gpu = gpus.GpuProfile(count=1)
    specs = [nodes.NodeSpec(f"gpu-{i}", gpu=one_gpu) for i in range(members)]
    volcano = queue_system == "volcano"
    async with cluster.Cluster(
        nodes=specs, workdir=workdir, queue_system="volcano" if volcano else None
    ) as c:
        if not volcano:
            kueue_controller.install_crds(c.api, fixtures.UPSTREAM / "kueue" / "crds")
            kueue_controller.install_crds(c.api, fixtures.FIXTURES / "kueue-emulation")
        await install.install(c.api)
        admin = c.client()
        await admin.create(resources.NAMESPACES, {"metadata": {"name": OTHER_NS}})
        stack = Stack(c, rng=rng, queue_system=queue_system)
        try:
            await stack.start_webhook()
            for _ in range(2):
                await stack.start_replica()
            if volcano:
                for name, value in (("low", 100), ("high", 1000)):
                    await admin.create(
                        resources.PRIORITY_CLASSES, workloads.priority_class(name, value)
                    )
                await admin.create(resources.CHECKPOINT_POLICIES, copy.deepcopy(policy()))
                for queue in (
                    volcano_queue("research", gpus=members, deserved=0, opted_in=True),
                    volcano_queue("prod", gpus=members, deserved=members, opted_in=False),
                ):
                    await admin.create(resources.VOLCANO_QUEUES, queue)
                yield stack
                return
            async with kueue_controller.Kueue(c.api):
                await Env(c.api).setup_queues(gpus=members)
                await admin.create(resources.CHECKPOINT_POLICIES, copy.deepcopy(policy()))
                labels = {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "soak"}
                await admin.patch(
                    resources.CLUSTER_QUEUES,
                    "gpu-cq",
                    {"metadata": {"labels": labels}},
                    content_type=api.MERGE_PATCH,
                )
                yield stack
        finally:
            await stack.close()
