"""A level-triggered controller loop: watches mark it dirty, one pass runs on fresh lists.

Shared by the emulated Volcano scheduler and controller (one concept: "re-decide from the
cluster's state whenever it changes"); the passes themselves live in those modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from emulator import informer
from emulator.apiserver import server
from emulator.kueue import controller as kueue_controller
from kontinue.kube import errors, resources

log = logging.getLogger(__name__)


class Loop:
    def __init__(
        self,
        client: server.Client,
        watched: Iterable[resources.Resource],
        run_pass: Callable[[], Awaitable[None]],
        *,
        name: str,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        period: float = 1.0,
    ) -> None:
        self.client = client
        self.watched = list(watched)
        self.run_pass = run_pass
        self.name = name
        self.on_event = on_event
        self.period = period  # Volcano's --schedule-period (default 1 s) also re-runs passes
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def poke(self) -> None:
        self._dirty.set()

    async def start(self) -> None:
        for resource in self.watched:
            self._tasks.append(asyncio.create_task(self._watch(resource)))
        self._tasks.append(asyncio.create_task(self._loop()))

    async def stop(self) -> None:
        await kueue_controller.cancel_all(self._tasks)
        self._tasks.clear()

    async def _watch(self, resource: resources.Resource) -> None:
        await informer.mark_on_change(
            self.client,
            resource,
            on_listed=self._dirty.set,
            on_event=self._changed,
            what=self.name,
        )

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(kind, obj)
        self._dirty.set()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.period):
                    await self._dirty.wait()
            self._dirty.clear()
            await asyncio.sleep(0)
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except (errors.Conflict, errors.NotFound) as exc:
                log.debug("%s pass raced a write (%s); retrying", self.name, exc)
                self._dirty.set()
                await asyncio.sleep(0.01)
            except Exception:
                log.exception("%s pass failed", self.name)
                await asyncio.sleep(0.2)
                self._dirty.set()
