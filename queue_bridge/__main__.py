"""``kontinue-bridge``: run one queue-bridge replica until SIGTERM (exit 0), until it loses its
Lease (exit 1, so Kubernetes restarts it and it campaigns afresh) or until a watch cache's task
ends (exit 2; :mod:`kontinue.supervision`). Bad settings or no usable Kubernetes client
configuration end it at once with one line naming the cause."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys

from kontinue import supervision, usage
from kontinue.kube import client
from queue_bridge import app, settings


def main() -> None:
    usage.handle(
        sys.argv,
        prog="kontinue-bridge",
        summary="Kontinue's queue bridge: one replica (leader-elected) that turns evictions "
        "into Checkpoints and plans restores, until SIGTERM.",
        settings_doc="docs/bridge.md",
    )

    async def run(config: settings.Settings, stop: asyncio.Event) -> int:
        try:
            api_client = await client.make_api_client()
        except (client.ConfigException, OSError) as exc:
            raise SystemExit(
                f"kontinue-bridge: no Kubernetes client configuration: {exc}"
            ) from None
        started: asyncio.Future[app.Controller] = asyncio.get_running_loop().create_future()
        freezing = asyncio.create_task(_freeze_once_synced(started), name="gc-freeze")
        try:
            return await app.run(config, stop=stop, api_client=api_client, started=started)
        finally:
            freezing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await freezing
            await api_client.close()

    supervision.main("kontinue-bridge", settings.Settings.from_env, run)


async def _freeze_once_synced(started: asyncio.Future[app.Controller]) -> None:
    """Once the caches hold their first lists, move everything allocated so far (modules,
    models, indexes) out of the garbage collector's reach, as the webhook does
    (webhook/__main__.py): a collection then walks only what handling keys allocates, not the
    whole heap (CPU per eviction, docs/benchmarks.md). Objects freed by reference counting are
    freed as before."""
    ctrl = await started
    try:
        await ctrl.caches.wait_synced()
    except RuntimeError:  # a cache stopped before its first list: the process is ending
        return
    gc.collect()
    gc.freeze()


if __name__ == "__main__":
    main()
