"""The bridge's Events, posted best-effort off the path from an eviction to its Checkpoint.

A handler asks for an Event (:meth:`EventOutbox.add`) and moves on; one sender task posts what
is queued, in batches: each batch first waits for the keys that create Checkpoints to drain
(at most :data:`DEFER_SECONDS`), so a burst of evictions makes its Checkpoints first and tells
about them after (issue 14). A batch is posted :data:`IN_FLIGHT` at a time: one POST after
another could not keep up with a wave (three Events per eviction at 200 evictions/s), and the
backlog grew for as long as the wave lasted.

At shutdown (or when leadership is lost) :meth:`EventOutbox.close` waits a little for the
backlog, then drops what is left with one warning saying how many: the API client is about to
close, and posting each remaining Event into it would fail and log a traceback apiece.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import Any, Protocol

from kontinue.kube import events

log = logging.getLogger("kontinue.bridge")

DEFER_SECONDS = 1.0
"""How long a batch of Event posts waits, at most, for the keys that create Checkpoints to drain."""

IN_FLIGHT = 8
"""Event POSTs of one batch in flight at once."""

Request = tuple[dict[str, Any], str, str, events.EventType]


class Recorder(Protocol):
    async def record(
        self, obj: dict[str, Any], *, reason: str, message: str, type_: events.EventType
    ) -> None: ...


class Urgency(Protocol):
    async def urgent_drained(self, within: float) -> None: ...


class EventOutbox:
    def __init__(self, recorder: Recorder, urgency: Urgency) -> None:
        self.recorder = recorder
        self.urgency = urgency
        self._queued: collections.deque[Request] = collections.deque()
        self._sender: asyncio.Task[None] | None = None

    def add(self, obj: dict[str, Any], reason: str, message: str, type_: str) -> None:
        """Queue one Event on ``obj``; the sender task posts it soon."""
        self._queued.append((obj, reason, message, "Warning" if type_ == "Warning" else "Normal"))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send(), name="bridge-events")

    async def _send(self) -> None:
        while self._queued:
            await self.urgency.urgent_drained(DEFER_SECONDS)
            batch = len(self._queued)  # what is queued now; later ones wait for the next batch
            while batch > 0 and self._queued:
                chunk = [self._queued.popleft() for _ in range(min(IN_FLIGHT, batch))]
                batch -= len(chunk)
                await asyncio.gather(*(self._post(*request) for request in chunk))

    async def _post(
        self, obj: dict[str, Any], reason: str, message: str, type_: events.EventType
    ) -> None:
        try:
            await self.recorder.record(obj, reason=reason, message=message, type_=type_)
        except Exception:  # the recorder logs API errors; anything else must not stop us
            log.exception("recording event failed reason=%s", reason)

    async def sent(self) -> None:
        """Wait until every Event asked for so far was posted (tests)."""
        while self._sender is not None and not self._sender.done():
            await asyncio.shield(self._sender)

    async def close(self, within: float) -> int:
        """Post what is queued for up to ``within`` seconds, then drop the rest: how many
        Events were dropped (those queued, and up to :data:`IN_FLIGHT` cut off mid-POST)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.sent(), within)
        sender, self._sender = self._sender, None
        dropped = len(self._queued)
        self._queued.clear()
        if sender is not None and not sender.done():
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        if dropped:
            log.warning("%d Events not recorded: the bridge stopped leading first", dropped)
        return dropped
