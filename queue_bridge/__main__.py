"""``kontinue-bridge``: run one queue-bridge replica until SIGTERM (exit 0), until it loses its
Lease (exit 1, so Kubernetes restarts it and it campaigns afresh) or until a watch cache's task
ends (exit 2; :mod:`kontinue.supervision`). Bad settings or no usable Kubernetes client
configuration end it at once with one line naming the cause."""

from __future__ import annotations

import asyncio
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
        try:
            return await app.run(config, stop=stop, api_client=api_client)
        finally:
            await api_client.close()

    supervision.main("kontinue-bridge", settings.Settings.from_env, run)


if __name__ == "__main__":
    main()
