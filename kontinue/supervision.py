"""Root tasks of a deployable, supervised the way kopf supervises an operator's.

Both deployables (``python -m webhook``, ``python -m queue_bridge``) run a few long-lived tasks
beside their request handling: one per watch cache, the webhook's certificate keeper, the
bridge's leader election. Each is essential; one that ends — returns, raises or is cancelled by
someone else — while the process is meant to run leaves a replica that looks alive but serves
stale state. So a :class:`Supervisor` names every root task, and the first one to end is logged
once (with its traceback, if it raised) and ends the process with a non-zero status, as kopf ends
the operator once any root task exits (nolar/kopf ``kopf/_core/reactor/running.py``,
``run_tasks``: "The root tasks are expected to run forever ... Once any of them exits, the whole
operator and all other root tasks should exit"). Kubernetes then restarts the container, which
starts from a fresh list.

:func:`main` is the one process runner of both: logging, settings (a bad one ends the process
with one line), signals that set the ``stop`` event, and the body's result as the exit status.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, NoReturn, TypeVar

from kontinue import telemetry

log = logging.getLogger("kontinue.supervision")
S = TypeVar("S")


class Supervisor:
    """Spawns named root tasks and reports the first one that ends on its own."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[Any], str] = {}
        self._ended = asyncio.Event()
        self._closing = False
        self.failed: list[str] = []
        """Names of root tasks that ended while the process was meant to run (``/healthz``)."""

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as the root task ``name``: it must run until :meth:`close`."""
        task = asyncio.create_task(coro, name=name)
        self._tasks[task] = name
        task.add_done_callback(self._reap)
        return task

    def retire(self, tasks: Iterable[asyncio.Task[Any]]) -> None:
        """Let ``tasks`` end from now on without ending the process (an orderly stop)."""
        for task in tasks:
            task.remove_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[Any]) -> None:
        if self._closing:
            return
        name = self._tasks.get(task, task.get_name())
        error: BaseException | None = None
        if task.cancelled():
            how = "was cancelled"
        elif (error := task.exception()) is not None:
            how = f"failed: {error!r}"
        else:
            how = "ended"
        log.error(
            "root task %s %s; ending the process", name, how, exc_info=error if error else None
        )
        self.failed.append(name)
        self._ended.set()

    async def wait(self, stop: asyncio.Event) -> str | None:
        """Until ``stop`` is set (``None``) or a root task ended on its own (its name)."""
        waiters = [
            asyncio.create_task(stop.wait(), name="stop"),
            asyncio.create_task(self._ended.wait(), name="root-task-ended"),
        ]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        return self.failed[0] if self.failed else None

    async def close(self) -> None:
        """Cancel every root task still running and wait for them (an orderly stop)."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


def main(
    program: str,
    load: Callable[[], S],
    body: Callable[[S, asyncio.Event], Awaitable[int]],
) -> NoReturn:
    """The process of a deployable: logging, settings, then ``body(settings, stop)`` in a new
    event loop until it returns the exit status; SIGTERM and SIGINT set ``stop``.

    Settings that do not load (``ValueError``; also a bad ``KONTINUE_LOG_FORMAT`` or ``OTEL_*``
    exporter setting, kontinue/telemetry.py) end it at once with one line naming the cause, as
    does a ``SystemExit`` ``body`` raises.
    """
    try:
        telemetry.setup_logging()  # KONTINUE_LOG_FORMAT / KONTINUE_LOG_LEVEL
        telemetry.span_exporter_from_env()  # OTEL_*: a bad value ends the process here
        config = load()
    except ValueError as exc:
        sys.exit(f"{program}: {exc}")

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await body(config, stop)

    sys.exit(asyncio.run(run()))
