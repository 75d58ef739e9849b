"""The demo's cross-check: how many pods restored, started cold or failed to restore, read from
the bridge's own ``GET /metrics`` (``kontinue_restores_total``, docs/operations.md) rather than
from the demo's recorder, so the printed table and the product's metrics can be compared."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

import aiohttp
from prometheus_client import parser

from emulator.demo import timeline

RESTORES = "kontinue_restores_total"
RESULTS = ("restored", "cold_start", "failed")


def restores(text: str) -> dict[str, int]:
    """Pure: ``kontinue_restores_total`` summed by ``result`` over its other labels."""
    counts: collections.Counter[str] = collections.Counter(dict.fromkeys(RESULTS, 0))
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == RESTORES:
                counts[sample.labels["result"]] += int(sample.value)
    return dict(counts)


async def bridge_restores(url: str) -> dict[str, int]:
    """``restores`` of the bridge serving ``url`` (its health/metrics base URL)."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
        session.get(url + "/metrics") as response,
    ):
        response.raise_for_status()
        return restores(await response.text())


async def settled_restores(
    url: str, *, restored: Callable[[], int], within: float = 60.0
) -> dict[str, int]:
    """Scrape until the bridge's ``restored`` equals ``restored()`` (the demo's own count of
    restore init containers that exited 0) or ``within`` seconds passed.

    Call it only once the cluster is frozen (:meth:`emulator.demo.stack.Stack.freeze`): then no
    restore exit is written any more, the two watches of the same pods can only catch up, and
    the recorder, stopped after this returns, counts what the bridge counted. Compared while the
    kubelets still ran, the two agreed at one instant and the recorder counted one more restore
    before it stopped (a Volcano run: 8 against 9)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        counts = await bridge_restores(url)
        if counts["restored"] == restored() or loop.time() > deadline:
            return counts
        await asyncio.sleep(0.2)


def summary(run: timeline.Run) -> str:
    """The line printed under the table: the bridge's counts, and whether they agree with it.

    The table counts a restore when the webhook chose a checkpoint for a pod (its
    ``kontinue.dev/restore-from``); the bridge counts it once the pod's restore init container
    exited — ``restored`` for exit 0. So the two agree on the chosen pods whose restore ran;
    those still waiting at the end are named apart.
    """
    counts = run.bridge_restores
    chosen = [p for p in run.pods if p.restored_from]
    ran = sum(1 for p in chosen if p.restore_exit == 0)
    restored = counts.get("restored", 0)
    verdict = (
        "agrees with the table"
        if restored == ran
        else f"DIFFERS from the table ({ran} of its restores ran)"
    )
    waiting = sum(1 for p in chosen if p.restore_exit is None)
    return (
        "from the bridge's /metrics (kontinue_restores_total): "
        f"restored {restored}, cold-started {counts.get('cold_start', 0)}, "
        f"failed {counts.get('failed', 0)} — {verdict}"
        + (f"; {waiting} of the table's restores had not run at the end" if waiting else "")
    )
