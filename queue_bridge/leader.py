"""Leader election on a ``coordination.k8s.io/v1`` Lease, the protocol client-go uses.

Two bridge replicas run; one holds the Lease and does the work, the other waits. The holder
renews every ``renew_seconds``; a candidate takes the Lease only when ``renewTime +
leaseDurationSeconds`` has passed (client-go tools/leaderelection/leaderelection.go,
``tryAcquireOrRenew``). Writes carry the Lease's resourceVersion, so two candidates racing for
an expired Lease cannot both win: the loser gets ``409 Conflict``. A leader that cannot renew
within ``deadline_seconds`` stops its work *before* the Lease can expire for others, so two
replicas never act at once. On a clean shutdown the leader releases the Lease (empty holder) so
the standby takes over at once instead of after a full lease duration.

Nothing the bridge knows lives only in the leader: a new leader re-derives everything from
cluster state (level-triggered), so a takeover mid-checkpoint loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from kontinue.kube import api, errors, resources
from kontinue.models import base

logger = logging.getLogger("kontinue.bridge.leader")


def format_micro_time(value: datetime.datetime) -> str:
    """``metav1.MicroTime``: RFC 3339 with microseconds, UTC."""
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    return base.parse_time(value)


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to write to the Lease, or ``spec=None`` to leave it (someone else holds it)."""

    spec: dict[str, Any] | None
    leading: bool


def decide(
    spec: dict[str, Any] | None,
    *,
    identity: str,
    now: datetime.datetime,
    duration_seconds: int,
) -> Decision:
    """Pure: given the Lease's current spec, acquire, renew, or keep waiting."""
    spec = spec or {}
    holder = spec.get("holderIdentity") or ""
    renewed = parse_time(spec.get("renewTime"))
    lease_duration = int(spec.get("leaseDurationSeconds") or duration_seconds)
    expired = renewed is None or renewed + datetime.timedelta(seconds=lease_duration) <= now
    stamp = format_micro_time(now)
    if holder == identity:
        return Decision(
            {**spec, "renewTime": stamp, "leaseDurationSeconds": duration_seconds}, True
        )
    if holder and not expired:
        return Decision(None, False)
    return Decision(
        {
            "holderIdentity": identity,
            "leaseDurationSeconds": duration_seconds,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (1 if holder else 0),
        },
        True,
    )


READY_POLL_SECONDS = 0.05


class LeaderElector:
    def __init__(
        self,
        kube: api.Api,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration_seconds: int = 15,
        renew_seconds: float = 5.0,
        deadline_seconds: float = 10.0,
        clock: Callable[[], datetime.datetime] | None = None,  # None in production
        ready: Callable[[], bool] | None = None,  # None: always ready
    ) -> None:
        if not renew_seconds < deadline_seconds < duration_seconds:
            raise ValueError("need renew_seconds < deadline_seconds < duration_seconds")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_seconds = duration_seconds
        self.renew_seconds = renew_seconds
        self.deadline_seconds = deadline_seconds
        self._clock = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self.ready = ready or (lambda: True)
        """Whether this replica can do the leader's work (the bridge: every watch cache synced).
        It campaigns only while ready, and a leader that stays unready for ``deadline_seconds``
        stops renewing and gives the Lease up: a replica that cannot work (a watch its RBAC
        or the cluster's CRDs never let sync) must not keep a healthy standby out."""
        self.leading = asyncio.Event()

    async def try_acquire_or_renew(self) -> bool:
        """One round of the protocol; ``True`` when we hold the Lease afterwards."""
        try:
            lease = await self.kube.get(resources.LEASES, self.name, namespace=self.namespace)
        except errors.NotFound:
            lease = None
        decision = decide(
            lease.get("spec") if lease else None,
            identity=self.identity,
            now=self._clock(),
            duration_seconds=self.duration_seconds,
        )
        if decision.spec is None:
            return False
        try:
            if lease is None:
                await self.kube.create(
                    resources.LEASES,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": decision.spec,
                    },
                )
            else:
                await self.kube.replace(resources.LEASES, {**lease, "spec": decision.spec})
        except errors.Conflict:
            return False  # someone else wrote first; look again next round
        return decision.leading

    async def release(self) -> None:
        """Give the Lease up so the standby need not wait for it to expire."""
        with contextlib.suppress(errors.ApiError):
            lease = await self.kube.get(resources.LEASES, self.name, namespace=self.namespace)
            if lease.get("spec", {}).get("holderIdentity") == self.identity:
                spec = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
                await self.kube.replace(resources.LEASES, {**lease, "spec": spec})

    async def run(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Wait for the Lease, run ``work`` while holding it; return when leadership is lost.

        ``work`` is cancelled as soon as renewal fails past the deadline. The caller decides
        whether to campaign again (the bridge exits and lets Kubernetes restart it, which also
        drops any in-memory state a stale leader might hold).
        """
        waiting_logged = False
        while True:
            if self.ready():
                if await self._attempt():
                    break
                await asyncio.sleep(self.renew_seconds)
                continue
            if not waiting_logged:
                logger.info("%s waits for its caches to sync before campaigning", self.identity)
                waiting_logged = True
            # Campaign as soon as the caches have synced (not a renew period later): a replica
            # that starts next to work already waiting must not lose a second to its own start.
            await asyncio.sleep(READY_POLL_SECONDS)
        logger.info("%s became leader of lease %s/%s", self.identity, self.namespace, self.name)
        self.leading.set()
        worker = asyncio.create_task(work(), name="leader-work")
        renewer = asyncio.create_task(self._keep_renewing(), name="lease-renewer")
        try:
            await asyncio.wait([worker, renewer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (worker, renewer):
                task.cancel()
            results = await asyncio.gather(worker, renewer, return_exceptions=True)
            self.leading.clear()
            await self.release()
            logger.info("%s stopped leading", self.identity)
        for result in results:
            if isinstance(result, Exception):
                raise result

    async def _attempt(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        except errors.ApiError as exc:
            logger.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    async def _keep_renewing(self) -> None:
        loop = asyncio.get_running_loop()
        last_renewed = last_ready = loop.time()
        while True:
            await asyncio.sleep(self.renew_seconds)
            if self.ready():
                last_ready = loop.time()
            elif loop.time() - last_ready >= self.deadline_seconds:
                logger.error(
                    "caches unsynced for %.1fs: giving up the lease", self.deadline_seconds
                )
                return
            if await self._attempt():
                last_renewed = loop.time()
            elif loop.time() - last_renewed >= self.deadline_seconds:
                logger.error("could not renew lease within %.1fs", self.deadline_seconds)
                return
