"""A work queue smaller than the cluster still reaches every key (issue 11, item 6).

Before the fix, the start-up sweep and every resync added keys in sorted order into the bounded
queue, so with more finalizer-holding pods than ``KONTINUE_BRIDGE_MAX_KEYS`` the same tail was
dropped on every pass: a pod that ended while the bridge was down, sorting after the running
ones, kept its ``kontinue.dev/checkpoint`` finalizer forever (until its deletion backstop, which
is only checked when its key runs).
"""

from __future__ import annotations

from tests.integration.bridge.conftest import Cluster
from tests.waiting import eventually


async def test_a_pod_past_the_queue_bound_is_still_released(cluster: Cluster) -> None:
    await cluster.queues()
    running = await cluster.pods(await cluster.job("a-train"), 5)  # hold the finalizer
    [late] = await cluster.pods(await cluster.job("z-late"), 1)
    # While no bridge runs, the late pod ends and is deleted; our finalizer keeps it.
    await cluster.terminate(late, exit_code=0)
    assert await cluster.pod_exists(late["metadata"]["name"])

    # 2 Job keys + 6 pod keys against a bound of 3: the late pod's key sorts last.
    bridge = await cluster.start_bridge("bridge-a", max_queued_keys=3)

    async def released() -> bool:
        return not await cluster.pod_exists(late["metadata"]["name"])

    await eventually(released, within=10, what="the late pod's finalizer removed")
    await bridge.controller.queue.join()
    for pod in running:  # running pods keep theirs
        assert await cluster.pod_exists(pod["metadata"]["name"])
