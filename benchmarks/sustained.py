"""The sustained phase of :mod:`benchmarks.bench_bridge`: evictions at a steady rate for as long
as asked, by recycling the Workloads (issue 14 target 2c: 200 evictions/s for 30 s, p99 < 100 ms
at 5,000 pods).

At 5,000 pods there are 1,000 Workloads, and 30 s at 200/s is 6,000 evictions, so each Workload
is evicted about six times. A second eviction of a Workload whose pods are still members of its
first Checkpoint makes no Checkpoint (``queue_bridge/deciding.py`` ``taken``), so between two
evictions of one Workload the benchmark *recycles* it:

1. once the Checkpoint of its eviction is seen on the benchmark's watch, Kueue readmits it: a
   server-side apply of ``workloads/status`` as field manager ``kueue-admission`` that keeps the
   admission and resets ``Evicted``/``Preempted`` to False, reason ``QuotaReserved``, as Kueue
   does when it reserves quota again (tests/kueue_writes.py ``readmitted``);
2. :data:`SETTLE_SECONDS` later the Checkpoint is deleted (as ``kubectl delete checkpoint``
   would): its members are then members of nothing, so the next eviction makes a new Checkpoint.
   The pause lets the bridge's Workload watch show the readmission first: the Checkpoint's
   DELETED event queues the Workload's key, and a Workload still seen evicted would have its
   Checkpoint made again (counted as ``remade`` and deleted again);
3. the Workload goes to the back of the pool; the next eviction takes the pool's front. Each
   eviction's condition time differs from the previous one's by more than a second, so the
   Checkpoint names (``queue_bridge/naming.py``: Workload UID + eviction time in seconds) differ.

What this leaves out, and why: a real cycle replaces the member pods (the kubelet's terminated
statuses, the finalizers released, five new pods created and started) — ~25 writes per cycle
that the emulator, in this process, could not serve 200 times a second beside the bridge's own
requests. What it adds: the bridge also handles each readmission and each Checkpoint deletion,
so the CPU per eviction of this phase includes them (a conservative figure).

If the pool runs dry (the bridge slower than the offered rate, so Workloads come back late), a
tick offers nothing and is counted as ``starved``: the printed offered rate is the real one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kontinue.kube import errors, resources

SETTLE_SECONDS = 1.0
"""Between a Workload's readmission and the deletion of its Checkpoint (module doc, step 2)."""


class Cluster(Protocol):
    """What the phase needs of :class:`benchmarks.bench_bridge.Filled`."""

    admin: Any

    async def evict(self, name: str) -> None: ...

    async def readmit(self, name: str) -> None: ...


class Recycler:
    """Evicts Workloads from a pool at a rate and recycles each once its Checkpoint appears."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.pool: collections.deque[str] = collections.deque()
        self.pending: dict[str, float] = {}  # Workload -> write time (perf_counter)
        self.latencies: list[float] = []  # ms, eviction write -> Checkpoint ADDED
        self.remade = 0
        self.starved = 0
        self.errors: list[str] = []
        self.recycling: set[str] = set()  # readmitted, Checkpoint not deleted yet
        self.tasks: set[asyncio.Task[None]] = set()
        self.counting = True
        self.changed = asyncio.Event()  # a Checkpoint seen or a task done (settle)

    def _spawn(self, what: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(what)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.changed.set()

    def on_added(self, workload: str, checkpoint_name: str, at: float) -> None:
        """The benchmark's Checkpoint watch saw ``checkpoint_name`` made for ``workload``."""
        self.changed.set()
        written = self.pending.pop(workload, None)
        if written is not None:
            if self.counting:
                self.latencies.append((at - written) * 1000)
            self._spawn(self.recycle(workload, checkpoint_name))
        elif workload in self.recycling or workload in self.pool:
            self.remade += 1  # made again from an eviction the bridge still saw (step 2)
            self._spawn(self._delete(checkpoint_name))

    async def recycle(self, workload: str, checkpoint_name: str) -> None:
        """Readmit ``workload``, delete its Checkpoint, return it to the pool (module doc)."""
        self.recycling.add(workload)
        try:
            await self.cluster.readmit(workload)
            await asyncio.sleep(SETTLE_SECONDS)
            await self._delete(checkpoint_name)
        finally:
            self.recycling.discard(workload)
        self.pool.append(workload)

    async def _delete(self, name: str) -> None:
        try:
            await self.cluster.admin.delete(resources.CHECKPOINTS, name, namespace=self.namespace)
        except errors.NotFound:
            pass
        except Exception as exc:  # reported, never hidden
            self.errors.append(f"delete {name}: {exc!r}")

    async def _evict(self, name: str) -> None:
        self.pending[name] = time.perf_counter()
        try:
            await self.cluster.evict(name)
        except Exception as exc:
            self.pending.pop(name, None)
            self.errors.append(f"evict {name}: {exc!r}")

    async def run(self, *, rate: float, seconds: float) -> tuple[int, float]:
        """Offer one eviction every ``1/rate`` s for ``seconds``; (evictions offered, seconds)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        ticks = int(rate * seconds)
        offered = 0
        for i in range(ticks):
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if not self.pool:
                self.starved += 1
                continue
            offered += 1
            self._spawn(self._evict(self.pool.popleft()))
        return offered, loop.time() - start

    async def settle(self, *, within: float) -> None:
        """Wait (bounded) until every eviction offered has its Checkpoint and every recycle is
        done; what is still pending then is missing."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while (self.pending or self.tasks) and loop.time() < deadline:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=deadline - loop.time())


async def phase(
    cluster: Cluster,
    namespace: str,
    *,
    pool: list[str],
    dirty: dict[str, str],
    rate: float,
    seconds: float,
    cpu: Callable[[], float],
    hook: Callable[[Callable[[str, str, float], None] | None], None],
) -> dict[str, Any]:
    """One sustained run: ``pool`` are Workloads ready to evict, ``dirty`` Workloads evicted
    before (name -> their Checkpoint), recycled first; ``hook`` installs the watch callback."""
    recycler = Recycler(cluster, namespace)
    recycler.pool.extend(pool)
    hook(recycler.on_added)
    try:
        recycler.counting = False
        await asyncio.gather(*(recycler.recycle(w, cp) for w, cp in dirty.items()))
        recycler.counting = True
        cpu_before, own_before = cpu(), time.process_time()
        offered, offered_s = await recycler.run(rate=rate, seconds=seconds)
        await recycler.settle(within=60)
        cpu_ms = (cpu() - cpu_before) * 1000 / max(1, offered)
        own_ms = (time.process_time() - own_before) * 1000 / max(1, offered)
    finally:
        hook(None)
    return {
        "n": offered,
        "offered_s": offered_s,
        "ms": recycler.latencies,
        "missing": len(recycler.pending),
        "cpu_ms": cpu_ms,
        "emulator_cpu_ms": own_ms,
        "remade": recycler.remade,
        "starved": recycler.starved,
        "errors": recycler.errors[:5],
        "pool_after": list(recycler.pool) + list(recycler.pending),
    }
