"""The whole system on this machine: emulated GPU cluster + emulated Kueue or Volcano
(+ Kontinue).

``queue_system``: ``kueue`` and ``scheduler`` run the emulated Kueue (emulator/kueue; in
``scheduler`` the demo gives it quota to spare, so the emulated kube-scheduler's priority
preemption does the evicting); ``volcano`` runs the emulated Volcano scheduler and vc-controller
(emulator/volcano) on a cluster with no Kueue CRDs at all, and Kontinue watches Volcano only.

``with_kontinue=False`` is the honest baseline: the same cluster, the same Kueue, the same
workloads and arrivals, with Kontinue's webhook and bridge simply not installed — what a cluster
without Kontinue does today. ``with_kontinue=True`` runs the *real* webhook
(``webhook.__main__.serve``, called by the API emulator over HTTPS exactly as kube-apiserver
calls it, using the repository's own webhook manifests) and the *real* bridge
(``queue_bridge.app.run``, over HTTP through kubernetes-asyncio), each under its own service
account, in this process's event loop.

Upstream CRDs come from the repository's copies under ``tests/fixtures/upstream`` (their
provenance is recorded there); ours from ``manifests/crds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from emulator import cluster, nodes
from emulator.demo import install
from emulator.kueue import controller as kueue_controller
from kontinue import keys
from kontinue.kube import api, cacheset, resources, watching
from queue_bridge import settings as bridge_settings

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = install.SYSTEM
FAST = watching.Backoff(initial=0.05, factor=2.0, cap=0.5, jitter=0.5)

Obj = dict[str, Any]


@dataclasses.dataclass
class Stack:
    cluster: cluster.Cluster
    with_kontinue: bool
    bridge_url: str = ""
    """``http://127.0.0.1:<port>`` of the bridge's health server, which serves ``/metrics``."""

    @property
    def admin(self) -> Any:
        return self.cluster.client()

    async def freeze(self) -> None:
        """Stop the cluster's progress at the end of a run: every kubelet stops (its containers
        are killed, no pod status is written any more; their logs stay readable). What the pods'
        statuses say, which the bridge's ``/metrics`` and the demo's recorder both count from
        (a restore is counted when the restore init container's exit is written), can then no
        longer change, so the two can be compared (emulator/demo/scrape.py)."""
        await asyncio.gather(*(k.stop() for k in self.cluster.kubelets.values()))


async def _eventually(check: Any, *, within: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        with contextlib.suppress(Exception):
            if await check():
                return
        if loop.time() > deadline:
            raise TimeoutError(f"{what} not ready within {within}s")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def running(
    *,
    workdir: Path,
    node_specs: Sequence[nodes.NodeSpec],
    with_kontinue: bool,
    policy: Obj | None = None,
    tls: bool = False,
    queue_system: str = "kueue",
    pod_failure_backoff: float = 0.0,
) -> AsyncIterator[Stack]:
    """Start everything; on exit stop it all (pods get their graceful stop).

    ``pod_failure_backoff``: the Job controller's (emulator/jobs/backoff.py; the demos pass
    the real 10 s, so a preempted pod's replacement waits as long as on a cluster).

    ``tls``: the API emulator serves HTTPS (its kubeconfigs carry the CA), for clients that
    must reach it as they reach a real cluster (``kubectl``, ``kubectl-kontinue``).
    """
    volcano = queue_system == "volcano"
    systems = ("volcano",) if volcano else ("kueue",)
    async with cluster.Cluster(
        nodes=node_specs,
        workdir=workdir,
        tls=tls,
        queue_system="volcano" if volcano else None,
        pod_failure_backoff=pod_failure_backoff,
    ) as c:
        if not volcano:
            kueue_controller.install_crds(c.api, ROOT / "tests/fixtures/upstream/kueue/crds")
            kueue_controller.install_crds(c.api, ROOT / "tests/fixtures/kueue-emulation")
        admin = c.client()
        queues: Any = contextlib.nullcontext() if volcano else kueue_controller.Kueue(c.api)
        if not with_kontinue:
            async with queues:
                yield Stack(c, with_kontinue=False)
            return
        await install.install(c.api)
        stop = asyncio.Event()
        options = cacheset.CacheOptions(backoff=FAST)
        hook = await install.start_webhook(
            c.api,
            install.webhook_config(systems, image="ghcr.io/kontinue/kontinue:dev"),
            stop=stop,
            cache_options=options,
            name="kontinue-webhook",
        )
        bridge = await install.start_bridge(
            c.api,
            bridge_settings.Settings(
                namespace=SYSTEM,
                identity="kontinue-bridge-0",
                lease_duration_seconds=6,
                lease_renew_seconds=1.0,
                lease_deadline_seconds=4.0,
                finalizer_margin_seconds=5.0,
                settle_seconds=0.5,
                queue_systems=systems,
                admission_check=not volcano,
            ),
            stop=stop,
            cache_options=options,
            name="kontinue-bridge",
        )
        try:
            async with queues:
                if policy is not None:

                    async def policy_accepted() -> bool:  # through the validating webhook
                        if hook.task.done():
                            raise RuntimeError(f"the webhook stopped: {hook.task!r}")
                        await admin.create(resources.CHECKPOINT_POLICIES, policy)
                        return True

                    await _eventually(policy_accepted, within=30, what="the Kontinue webhook")
                yield Stack(c, with_kontinue=True, bridge_url=bridge.url)
        finally:
            await install.shut_down([hook, bridge], timeout=20)


async def wait_plumbing(stack: Stack, *, probe_job: Obj) -> None:
    """Wait until the webhook's caches see the opted-in queue (a dry-run Job gets plumbed: a
    batch Job its ``podReplacementPolicy``, a Volcano Job its lifecycle policies rewritten)."""
    volcano = probe_job["apiVersion"].startswith(keys.VOLCANO_BATCH_GROUP)

    async def plumbed() -> bool:
        if volcano:
            dry = await stack.admin.create(resources.VOLCANO_JOBS, probe_job, dry_run=True)
            return bool(dry["spec"].get("policies") != probe_job["spec"].get("policies"))
        dry = await stack.admin.create(resources.JOBS, probe_job, dry_run=True)
        return bool(dry["spec"].get("podReplacementPolicy") == "Failed")

    await _eventually(plumbed, within=30, what="the webhook's view of the opted-in queue")


def opt_in_labels(policy_name: str) -> Obj:
    return {"metadata": {"labels": {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: policy_name}}}


MERGE = api.MERGE_PATCH
