"""``kontinue-bridge``: run one queue-bridge replica until SIGTERM (exit 0) or until it loses
its Lease (exit 1, so Kubernetes restarts it and it campaigns afresh)."""

from __future__ import annotations

import asyncio
import signal
import sys

from kontinue import telemetry
from queue_bridge import app, settings


def main() -> None:
    telemetry.setup_logging()
    try:
        config = settings.Settings.from_env()
    except ValueError as exc:
        sys.exit(f"kontinue-bridge: {exc}")

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await app.run(config, stop=stop)

    sys.exit(asyncio.run(run()))


if __name__ == "__main__":
    main()
