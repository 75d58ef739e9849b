"""What the container runtime knows about one container: plain data shared by runtime and status.

Mirrors the CRI container states the kubelet turns into ``v1.ContainerState``; timestamps are
aware UTC datetimes (``status`` truncates them to seconds, as the API does).
"""

from __future__ import annotations

import dataclasses
import datetime


@dataclasses.dataclass(frozen=True)
class Waiting:
    reason: str
    message: str | None = None


@dataclasses.dataclass(frozen=True)
class Running:
    started_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class Terminated:
    exit_code: int
    reason: str  # Completed | Error | StartError | OOMKilled
    finished_at: datetime.datetime
    started_at: datetime.datetime | None = None
    message: str | None = None
    signal: int | None = None  # the signal that ended the process, if any (not written to the API)


State = Waiting | Running | Terminated


@dataclasses.dataclass(frozen=True)
class ContainerRecord:
    """One container as the runtime reports it (absent from a view = not created yet)."""

    name: str
    state: State
    container_id: str | None = None
    image: str = ""
    image_id: str = ""
    restart_count: int = 0


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
